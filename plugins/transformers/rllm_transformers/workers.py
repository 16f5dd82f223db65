"""What the Ray executor sends its workers for the transformers engine, once per batch.

:class:`WorkerEngine` is a snapshot of the trainer's engine: the model's class, config,
precision (its autocast: the worker's forward computes as the trainer's) and weights as they are
after the last update, the tokenizer and the sampling settings (the
validation flag included). It is plain picklable data; in a worker its first use builds a
:class:`~rllm_transformers.engine.TransformersEngine` from it, which the worker's concurrent
episodes share, so they are batched there as in the trainer's process. Each episode still
samples from its own seed (``for_episode``), so the workers give the same episodes as the
local executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rllm.engine import Generation, RolloutEngine
from rllm_transformers.engine import EpisodeEngine, Sampling, TransformersEngine, UniformStream
from rllm_transformers.lora import merged_weights
from rllm_transformers.precision import Precision, precision_in


@dataclass
class WorkerEngine(RolloutEngine):
    """The trainer's engine as data; built into a live engine where it is first used (a Ray worker)."""

    model_class: type
    model_config: Any
    weights: dict[str, torch.Tensor]
    precision: Precision
    """The run's precision (``rllm.transformers.precision``): the weights' dtype, and the autocast of the forward."""
    device_type: str
    tokenizer: Any = field()  # required: without field() the dataclass takes RolloutEngine.tokenizer's None
    sampling: Sampling
    max_new_tokens: int
    max_prompt_length: int
    greedy_validation: bool
    is_validation: bool
    _engine: TransformersEngine | None = field(default=None, repr=False, compare=False)

    @classmethod
    def snapshot(cls, engine: TransformersEngine) -> WorkerEngine:
        """A copy of the engine's weights now: later updates in the trainer do not reach this snapshot."""
        model = engine.model
        plain = merged_weights(model)  # LoRA: the adapters merged, so the model class loads them without peft
        weights = {name: value.detach().to("cpu", copy=True) for name, value in plain.items()}
        return cls(
            type(model),
            model.config,
            weights,
            precision_in(model),
            engine.device.type,
            engine.tokenizer,
            engine.sampling,
            engine.max_new_tokens,
            engine.max_prompt_length,
            engine.greedy_validation,
            engine.is_validation,
        )

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_engine": None}  # a built engine (its model, its batcher) stays where it was built

    def engine(self) -> TransformersEngine:
        """The live engine, built on first use: the model on the trainer's device type if this process has it."""
        if self._engine is None:
            device = torch.device(self.device_type)
            if device.type == "cuda" and not torch.cuda.is_available():
                device = torch.device("cpu")
            model = self.model_class(self.model_config)
            model.to(dtype=self.precision.weights)
            model.load_state_dict(self.weights)
            self.precision.prepare(model, device)  # the trainer's autocast (and TF32 on CUDA): the same draws
            model.eval()
            self._engine = TransformersEngine(
                model,
                self.tokenizer,
                device,
                UniformStream(),  # calls without an episode seed: a stream of this process's own, not a replayed copy
                self.sampling,
                self.max_new_tokens,
                self.max_prompt_length,
                self.greedy_validation,
            )
            self._engine.is_validation = self.is_validation
        return self._engine

    def for_episode(self, seed: int) -> EpisodeEngine:
        return self.engine().for_episode(seed)

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        return await self.engine().generate(prompt_ids, max_tokens)

    async def chat(self, messages: Sequence[dict[str, str]], max_tokens: int | None = None) -> Generation:
        return await self.engine().chat(messages, max_tokens)
