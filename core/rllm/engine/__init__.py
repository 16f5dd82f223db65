"""What workflows sample from: the rollout engine's contract (:class:`RolloutEngine`) and its answers.

The contract is in :mod:`rllm.engine.rollout.rollout_engine`; every backend's engine
implements it, and workflows are written against it. Token-level workflows call
``generate`` and get a :class:`Generation`; rLLM's text workflows call
``get_model_response`` and get a :class:`ModelOutput`. :mod:`rllm.engine.chat` and
:mod:`rllm.engine.tool_calls` are the text helpers engine authors share; :mod:`rllm.engine.weight_sync`
takes new weights to the inference servers an engine samples from; :mod:`rllm.engine.openai_api` is
OpenAI's completion API as rllm's servers speak it.
"""

from __future__ import annotations

from rllm.engine import openai_api
from rllm.engine.chat import ConversationPrompts, TemplateChatParser, completion_output, generation_output, template_ids
from rllm.engine.messages import check_messages
from rllm.engine.rollout import PROMPT_TOO_LONG, EpisodeView, Generation, ModelOutput, RolloutEngine, engine_problem
from rllm.engine.rollout.openai_engine import OpenAIEngine
from rllm.engine.tool_calls import ToolCall
from rllm.engine.vocabulary import same_vocabulary
from rllm.engine.weight_sync import (
    DiskWeightSync,
    MemoryWeightSync,
    PolicyUpdate,
    VLLMWeightSync,
    WeightSync,
    weight_sync_for,
)

__all__ = [
    "PROMPT_TOO_LONG",
    "ConversationPrompts",
    "DiskWeightSync",
    "EpisodeView",
    "Generation",
    "MemoryWeightSync",
    "ModelOutput",
    "OpenAIEngine",
    "PolicyUpdate",
    "RolloutEngine",
    "TemplateChatParser",
    "ToolCall",
    "VLLMWeightSync",
    "WeightSync",
    "check_messages",
    "completion_output",
    "engine_problem",
    "generation_output",
    "openai_api",
    "same_vocabulary",
    "template_ids",
    "weight_sync_for",
]
