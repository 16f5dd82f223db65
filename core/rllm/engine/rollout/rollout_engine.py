"""The rollout engine's contract: what workflows sample from, and what the trainer asks of it.

A backend's ``init_rollout_engine`` returns a :class:`RolloutEngine`. Workflows call
:meth:`~RolloutEngine.generate` (token ids in, a :class:`Generation` out). The workflow
engine calls :meth:`~RolloutEngine.for_episode` once per episode, so that what an episode
samples depends on its own seed only, and the Ray executor calls
:meth:`~RolloutEngine.for_workers` once per batch for what its workers sample from. The
contract is core, not a backend's, so every backend's engine, and every workflow, is written
against the same type; it sits at rLLM's path for its engine (``rllm.engine.rollout``).

rLLM's workflows speak text: they call :meth:`~RolloutEngine.get_model_response` with chat
messages and read a :class:`ModelOutput` (the text split into content, reasoning and tool
calls, with the sampled ids and log-probs). An engine answers them by implementing
``_get_model_response``; the public method checks the messages and stamps the
:attr:`~RolloutEngine.weight_version` the answer was sampled with, for every engine alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rllm.contract.names import ENGINE_METHODS
from rllm.engine.messages import check_messages
from rllm.engine.rollout.types import TokenInput, Tokenizer, TokenOutput
from rllm.engine.tool_calls import ToolCall
from rllm.errors import DataError, EngineCallError

if TYPE_CHECKING:
    from rllm.engine.chat import ChatParser

__all__ = ["PROMPT_TOO_LONG", "EpisodeView", "Generation", "ModelOutput", "RolloutEngine", "engine_problem"]

PROMPT_TOO_LONG = "prompt_length"
"""``Generation.finish_reason`` of a prompt longer than the engine takes: nothing was generated."""


@dataclass
class Generation:
    """One model call's answer: the response tokens, their sampling log-probs, its text and why it stopped."""

    response_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str = "stop"
    """``stop`` (end of sequence), ``length`` (max tokens) or :data:`PROMPT_TOO_LONG`."""
    prompt_ids: list[int] = field(default_factory=list)
    weight_version: int | None = None
    """The policy version that sampled it, when the engine knows (a server reports its own)."""


@dataclass
class ModelOutput:
    """One chat call's answer (rLLM's ``ModelOutput``): the text, split, and the exact tokens that were sampled.

    ``text`` is the whole completion; ``content``, ``reasoning`` and ``tool_calls`` are its
    parts (see ``rllm.engine.chat.split_completion``). ``prompt_ids`` and
    ``completion_ids`` are what the model saw and sampled, ``logprobs`` one sampling log-prob
    per completion id: a trainer learns from these, never from re-tokenised text.
    """

    text: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] | None = None
    prompt_ids: TokenInput | None = None
    completion_ids: list[int] | None = None
    multi_modal_inputs: dict[str, list[Any]] | None = None
    logprobs: list[float] | None = None
    """One per completion id."""
    prompt_logprobs: list[float] | None = None
    """One per prompt id, when the engine was asked for them."""
    routing_matrices: list[str] | None = None
    """Per-token expert routing of a mixture-of-experts model (for routing replay)."""
    prompt_length: int = 0
    completion_length: int = 0
    finish_reason: str | None = None
    """``stop``, ``length`` (the token limit) or the engine's own word."""
    weight_version: int | None = None
    """The policy version that sampled it; :meth:`RolloutEngine.get_model_response` stamps it."""
    metrics: dict[str, Any] | None = None
    """The call's own measurements (time to first token, broken tool-call blocks, ...)."""

    def __post_init__(self) -> None:
        ids, logprobs = self.completion_ids, self.logprobs
        if ids is not None and logprobs is not None and len(ids) != len(logprobs):
            raise DataError(
                f"ModelOutput has {len(logprobs)} logprobs for {len(ids)} completion ids; "
                "give one log-prob per sampled token."
            )

    def to_dict(self) -> dict[str, Any]:
        """The fields by name, tool calls as dicts (the dict rLLM writes)."""
        data = {item.name: getattr(self, item.name) for item in fields(self)}
        if self.tool_calls is not None:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelOutput:
        """The output of :meth:`to_dict` (a missing key takes its default; an unknown one is refused)."""
        if not isinstance(data, Mapping):
            raise DataError(f"ModelOutput.from_dict got a {type(data).__name__}; give the dict of to_dict().")
        names = [item.name for item in fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise DataError(f"ModelOutput has no field {unknown[0]!r}; its fields are {', '.join(names)}.")
        values = {name: data[name] for name in names if data.get(name) is not None}
        if "tool_calls" in values:
            values["tool_calls"] = [
                ToolCall.from_dict(call, f"tool_calls[{i}]") for i, call in enumerate(values["tool_calls"])
            ]
        return cls(**values)


@runtime_checkable
class RolloutEngine(Protocol):
    """What workflows sample from. Subclass it: :meth:`for_episode` and :meth:`for_workers` default to the engine.

    An engine that is not a subclass is accepted if it has the methods of
    :data:`~rllm.contract.names.ENGINE_METHODS`
    (checked when the workflow engine gets it, see :func:`engine_problem`). rLLM's text
    interface (:meth:`get_model_response` and the token-in/token-out pair) is here too; each
    part defaults to "not supported", so an engine implements what its model can do.
    """

    chat_parser: ChatParser | None = None
    """What renders messages into the prompt text, for workflows that render prompts themselves."""
    tokenizer: Tokenizer | None = None
    """The model's tokenizer (``encode``/``decode``), when the engine has one."""
    is_validation: bool = False
    """True while validation episodes sample (set by the workflow engine), so an engine and a workflow can
    use their validation settings; an episode's view (:meth:`for_episode`) reads it from its engine."""
    weight_version: int = 0
    """The version of the policy weights sampled from; whoever loads new weights into the engine raises it."""

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        """Sample a response to ``prompt_ids`` (at most ``max_tokens`` tokens; None: the engine's limit)."""
        raise NotImplementedError(f"{type(self).__name__} must implement async generate(prompt_ids, max_tokens)")

    def for_episode(self, seed: int) -> RolloutEngine:
        """The engine one episode samples from, its randomness drawn from ``seed`` (default: this engine).

        Override it when the engine samples: each episode then gets the same samples whichever
        episodes share its batches, and whichever executor runs it.
        """
        return self

    def for_workers(self) -> RolloutEngine:
        """What the Ray executor sends its workers, once per batch (default: this engine, pickled).

        Override it when the engine cannot be pickled or should not be copied: return a
        snapshot of the weights, or a client of an inference server.
        """
        return self

    async def get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        """Answer chat ``messages`` (rLLM's entry point): check them, call ``_get_model_response``, stamp the version.

        ``kwargs`` are sampling options the engine reads (``max_tokens``, ``temperature``,
        rLLM's ``application_id``, ...). The version is read before sampling, so an update
        that lands meanwhile does not relabel what the old weights sampled.
        """
        check_messages(messages)
        version = self.weight_version
        output = await self._get_model_response(messages, **kwargs)
        if not isinstance(output, ModelOutput):
            raise EngineCallError(
                f"{type(self).__qualname__}._get_model_response returned a {type(output).__name__}; "
                "return an rllm.engine.ModelOutput."
            )
        output.weight_version = version
        return output

    async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        """What an engine that answers chat messages implements (apply the chat template, sample, split)."""
        raise NotImplementedError(
            f"{type(self).__qualname__} does not answer chat messages: implement "
            "async _get_model_response(messages, **kwargs) -> ModelOutput"
        )

    async def get_token_output_from_token_input(self, token_input: TokenInput, **kwargs: Any) -> TokenOutput:
        """Sample from prompt ids, in the backend's own answer type (when :attr:`supports_token_in_token_out`)."""
        raise NotImplementedError(
            f"{type(self).__qualname__} does not sample from token ids through rLLM's interface: implement "
            "get_token_output_from_token_input and assemble_model_output, and return True from "
            "supports_token_in_token_out"
        )

    def assemble_model_output(self, token_input: TokenInput, token_output: TokenOutput) -> ModelOutput:
        """The :class:`ModelOutput` of one :meth:`get_token_output_from_token_input` answer."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement assemble_model_output")

    @property
    def supports_token_in_token_out(self) -> bool:
        """Whether callers may use the token-in/token-out pair above (default False)."""
        return False

    async def compute_logprobs(self, ids: Sequence[int]) -> list[float]:
        """The model's log-prob of each of ``ids`` after the ids before it (the first: 0.0), as a teacher answers.

        rLLM's on-policy distillation scores a student's sample with it
        (:func:`rllm.trainer.distill.compute_step_distill_advantage`).
        """
        raise NotImplementedError(
            f"{type(self).__qualname__} cannot score token ids: implement async compute_logprobs(ids) -> list[float]"
        )

    async def wake_up(self) -> None:
        """Get ready to sample (an inference server reloads what :meth:`sleep` freed); default nothing."""

    async def sleep(self) -> None:
        """Free what sampling holds while the trainer updates (a server's KV cache, weights); default nothing."""


class EpisodeView(RolloutEngine):
    """What :meth:`RolloutEngine.for_episode` returns for a sampling engine: its own randomness, the engine's state.

    The tokenizer, weight version and validation flag are read from ``engine`` at every call, so
    an update or the start of validation reaches the views already handed out; a subclass adds
    the calls, each passing its episode's seed or generator on to the engine.
    """

    def __init__(self, engine: RolloutEngine) -> None:
        self.engine = engine

    @property
    def tokenizer(self) -> Any:  # type: ignore[override]
        return self.engine.tokenizer

    @property
    def weight_version(self) -> int:  # type: ignore[override]
        return self.engine.weight_version

    @property
    def is_validation(self) -> bool:  # type: ignore[override]
        return self.engine.is_validation

    @property
    def supports_token_in_token_out(self) -> bool:
        return True


def engine_problem(engine: object) -> str | None:
    """Why ``engine`` cannot be a rollout engine (the methods it lacks), or None when it can."""
    missing = [name for name in ENGINE_METHODS if not callable(getattr(engine, name, None))]
    if not missing:
        return None
    kind = type(engine)
    return (
        f"The rollout engine {kind.__qualname__} (module {kind.__module__}) has no "
        f"{', '.join(f'{name}()' for name in missing)}: subclass rllm.engine.RolloutEngine (for_episode and "
        "for_workers default to the engine itself) or define them"
    )
