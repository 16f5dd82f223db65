"""What plugins and callers swap: the backend and grouping hook by name, the executor, the event loop."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

from rllm.errors import ConfigError
from rllm.experimental.unified_trainer import TrainerState, UnifiedTrainer
from rllm.plugins.registry import Entry, Source
from rllm.trainer.engine import LocalExecutor, WorkflowCall
from rllm.trainer.grouping import group_by_task_and_role
from rllm.types import Episode
from rllm_builtin.embedded import EmbeddedBackend

RUNTIME = Source("runtime", "tests")


class CountingBackend(EmbeddedBackend):
    """The embedded backend, counting the stages and hooks the trainer calls."""

    calls: ClassVar[list[str]] = []

    async def update_policy(self, trainer_state: TrainerState) -> None:
        self.calls.append(f"update@{trainer_state.global_step}")
        await super().update_policy(trainer_state)

    async def on_policy_updated(self, trainer_state: TrainerState) -> None:
        self.calls.append(f"synced@{trainer_state.global_step}")

    async def on_epoch_start(self, trainer_state: TrainerState) -> None:
        self.calls.append(f"epoch@{trainer_state.epoch}")

    async def on_validation_start(self, trainer_state: TrainerState) -> bool:
        self.calls.append("validation")
        return False  # skipping validation is the backend's call


def _fit(trainer: UnifiedTrainer) -> None:
    try:
        trainer.fit()
    finally:
        trainer.shutdown()


def test_backend_and_grouping_hook_are_chosen_by_registered_name(make_config, plugin_manager) -> None:
    grouped: list[int] = []

    def one_group_per_task(episodes: list[Episode], **options: Any):
        grouped.append(len(episodes))
        return group_by_task_and_role(episodes)

    plugin_manager.backends.add(Entry("counting", CountingBackend, RUNTIME))
    plugin_manager.grouping_hooks.add(Entry("per_task", one_group_per_task, RUNTIME))
    CountingBackend.calls = []
    config = make_config(
        "rllm.backend=counting",
        "rllm.grouping_hook=per_task",
        "rllm.trainer.total_batches=6",
        "rllm.trainer.test_freq=0",
    )
    trainer = UnifiedTrainer(None, config, progress=False)
    assert isinstance(trainer.backend, CountingBackend)
    _fit(trainer)
    assert CountingBackend.calls == [
        "validation",
        "epoch@0",
        *(call for s in range(1, 6) for call in (f"update@{s}", f"synced@{s}")),
        "epoch@1",
        "update@6",
        "synced@6",
    ]
    assert grouped == [160] * 6


def test_constructor_arguments_beat_the_config(make_config) -> None:
    calls: list[int] = []

    def hook(episodes: list[Episode], **options: Any):
        calls.append(len(episodes))
        return group_by_task_and_role(episodes)

    CountingBackend.calls = []
    trainer = UnifiedTrainer(
        CountingBackend, make_config("rllm.trainer.total_batches=1"), traj_grouping_hook=hook, progress=False
    )
    _fit(trainer)
    assert calls == [160] and "update@1" in CountingBackend.calls


def test_executor_is_pluggable(make_config) -> None:
    class RecordingExecutor(LocalExecutor):
        def __init__(self) -> None:
            self.uids: list[str] = []
            self.started = self.stopped = 0

        async def start(self) -> None:
            self.started += 1

        async def run(self, call: WorkflowCall) -> Episode | None:
            self.uids.append(call.uid)
            return await super().run(call)

        def shutdown(self) -> None:
            self.stopped += 1

    executor = RecordingExecutor()
    config = make_config(
        "rllm.trainer.total_batches=1", "rllm.trainer.val_before_train=false", "rllm.trainer.test_freq=0"
    )
    _fit(UnifiedTrainer(None, config, executor=executor, progress=False))
    assert (executor.started, executor.stopped) == (1, 1)
    assert len(executor.uids) == 160 and len(set(executor.uids)) == 160


def test_fit_works_inside_a_running_event_loop(make_config) -> None:
    trainer = UnifiedTrainer(None, make_config("rllm.trainer.total_batches=2"), progress=False)

    async def notebook_cell() -> None:
        trainer.fit()

    asyncio.run(notebook_cell())
    trainer.shutdown()
    assert (trainer.output_dir / "checkpoints" / "step_2").is_dir()


def test_misspelled_keyword_is_refused(make_config) -> None:
    with pytest.raises(ConfigError, match=r"unknown keyword argument\(s\) \['exeuctor'\]"):
        UnifiedTrainer(None, make_config(), exeuctor=LocalExecutor())


def test_servers_are_refused_by_a_backend_that_samples_in_process(make_config) -> None:
    config = make_config("rllm.rollout.openai.base_url=[http://127.0.0.1:9/v1]")
    with pytest.raises(ConfigError, match=r"rllm.rollout.openai.base_url is set, but backend 'embedded' samples from"):
        UnifiedTrainer(None, config, progress=False)
