"""The rollout engine's contract is core's ``rllm.engine.RolloutEngine``: every shipped engine implements it,
and an engine (or an executor) without the methods the trainer calls is refused in one line, before any rollout."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from rllm.engine import Generation, RolloutEngine
from rllm.errors import ConfigError, PluginContractError
from rllm.trainer import UnifiedTrainer
from rllm.trainer.engine import LocalExecutor, WorkflowCall, WorkflowEngine, instantiate
from rllm.types import Episode, TerminationReason
from rllm.workflows import Workflow
from rllm_builtin.embedded import EmbeddedBackend, EmbeddedRolloutEngine
from rllm_builtin.embedded.policy import SoftmaxPolicy


class Echo(RolloutEngine):
    """Only ``generate``: ``for_episode`` and ``for_workers`` come from the contract."""

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        return Generation(list(prompt_ids), [0.0] * len(prompt_ids), "")


class GenerateOnly:
    """Duck-typed, without the two methods the trainer calls."""

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        return Generation([], [], "")


class Sees(Workflow):
    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        return Episode(termination_reason=TerminationReason.ENV_DONE, metrics={"engine": id(self.rollout_engine)})


def test_a_subclass_gets_the_defaults_and_each_episode_its_engine() -> None:
    engine = Echo()
    assert isinstance(engine, RolloutEngine) and engine.for_episode(7) is engine and engine.for_workers() is engine
    workflow = instantiate(WorkflowCall(Sees, {}, engine, {"uid": "a"}, "a:0", seed=7), engine)
    assert workflow.rollout_engine is engine and workflow.seed == 7
    reply = asyncio.run(workflow.rollout_engine.generate([3, 4]))
    assert reply.response_ids == [3, 4] and reply.finish_reason == "stop"


def test_the_embedded_engine_implements_the_contract() -> None:
    engine = EmbeddedRolloutEngine(SoftmaxPolicy(14, 8), np.random.default_rng(0), 1.0)
    assert isinstance(engine, RolloutEngine) and isinstance(engine.for_episode(1), EmbeddedRolloutEngine)
    assert engine.for_workers() is engine
    one = asyncio.run(engine.for_episode(5).generate([1, 2], max_tokens=3))
    again = asyncio.run(engine.for_episode(5).generate([1, 2], max_tokens=3))
    assert one == again and one.finish_reason == ("stop" if one.response_ids[-1] == 13 else "length")


def test_an_engine_without_the_contracts_methods_is_refused_naming_it() -> None:
    with pytest.raises(PluginContractError) as caught:
        WorkflowEngine(Sees, rollout_engine=GenerateOnly())
    assert str(caught.value) == (
        f"The rollout engine GenerateOnly (module {__name__}) has no for_episode(), for_workers(): subclass "
        "rllm.engine.RolloutEngine (for_episode and for_workers default to the engine itself) or define them."
    )


def test_a_backend_whose_engine_breaks_the_contract_stops_the_trainer_before_any_rollout(make_config: Any) -> None:
    class Bare(EmbeddedBackend):
        def init_rollout_engine(self, **kwargs: Any) -> Any:
            return object()

    with pytest.raises(PluginContractError, match=r"rollout engine object \(module builtins\) has no generate\(\), "):
        UnifiedTrainer(Bare, make_config("rllm.trainer.total_batches=1"), progress=False)


def test_an_executor_without_prepare_is_refused_naming_it() -> None:
    class NoPrepare:
        async def start(self) -> None: ...

        async def run(self, call: WorkflowCall) -> Episode | None: ...

        def shutdown(self) -> None: ...

    with pytest.raises(ConfigError, match=r"^executor .*NoPrepare has no prepare\(\); an executor implements"):
        WorkflowEngine(Sees, executor=NoPrepare())  # type: ignore[arg-type]


def test_prepare_runs_once_per_batch_with_its_first_call() -> None:
    class Recording(LocalExecutor):
        def __init__(self) -> None:
            self.prepared: list[str] = []

        async def prepare(self, call: WorkflowCall) -> None:
            self.prepared.append(call.uid)

    executor = Recording()
    engine = WorkflowEngine(Sees, rollout_engine=Echo(), executor=executor)
    tasks = [{"uid": "a"}, {"uid": "a"}, {"uid": "b"}]
    asyncio.run(engine.execute_tasks(tasks, ["a", "a", "b"]))
    asyncio.run(engine.execute_tasks(tasks[2:], ["b"]))
    assert executor.prepared == ["a:0", "b:0"]
