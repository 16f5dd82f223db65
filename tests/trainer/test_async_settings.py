"""rllm.async_training: its keys, the refusals by name, and the producer's admission control (no torch needed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rllm.errors import ConfigError, TrainerError
from rllm.experimental.unified_trainer import UnifiedTrainer
from rllm.rollouts.policy import RolloutWeights, check_batch_version, lag_metrics
from rllm.trainer.async_training import AheadSampler, SampledBatch
from rllm.trainer.engine import EngineStats
from rllm.trainer.parallel import ProcessGroup
from rllm.types import Episode, Step, Trajectory
from rllm_builtin.embedded.backend import EmbeddedBackend, EmbeddedRolloutEngine

ASYNC = ("rllm.async_training.enable=true",)
STALE = (*ASYNC, "rllm.async_training.staleness_threshold=1")


class SharedWeights(RolloutWeights):
    """Claims to overlap; its snapshots are nothing (the embedded engine samples the policy being trained)."""

    overlaps = True

    def snapshot(self) -> None:
        return None


class OverlappingBackend(EmbeddedBackend):
    """The embedded backend claiming it can overlap rollouts (only the checks before training run)."""

    @property
    def rollout_weights(self) -> RolloutWeights:
        return SharedWeights()


class TwoRanks(OverlappingBackend):
    @property
    def process_group(self) -> ProcessGroup:
        return ProcessGroup(0, 2, lambda value: [value, value], lambda: None)


class Versionless:
    """A duck-typed rollout engine (the three methods) that reports no weight_version."""

    def __init__(self, engine: EmbeddedRolloutEngine) -> None:
        self.engine = engine

    async def generate(self, prompt_ids: Any, max_tokens: int | None = 1) -> Any:
        return await self.engine.generate(prompt_ids, max_tokens)

    def for_episode(self, seed: int) -> Any:
        return self

    def for_workers(self) -> Any:
        return self


class VersionlessBackend(OverlappingBackend):
    def init_rollout_engine(self, **kwargs: Any) -> Any:
        return Versionless(super().init_rollout_engine(**kwargs))


def _build(make_config, backend: Any, *overrides: str) -> UnifiedTrainer:
    return UnifiedTrainer(backend, make_config(*overrides), progress=False)


def test_a_negative_threshold_is_refused_naming_the_key(make_config) -> None:
    with pytest.raises(
        ConfigError, match=r"rllm.async_training.staleness_threshold must be an integer >= 0 and <= 32; got -1"
    ):
        make_config(*ASYNC, "rllm.async_training.staleness_threshold=-1")


@pytest.mark.parametrize("key", ["staleness_threshold", "max_batches_ahead"])
def test_a_threshold_above_its_bound_is_refused_in_one_line(make_config, key: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"rllm.async_training.{key} must be an integer >= \d+ and <= 32; got 100000"
    ):
        make_config(*ASYNC, f"rllm.async_training.{key}=100000")
    make_config(*ASYNC, f"rllm.async_training.{key}=32")  # the bound itself is allowed


def test_the_lag_counts_stay_a_bounded_family_of_keys() -> None:
    episodes = [_episode(f"e{lag}:0", 100 - lag) for lag in range(0, 100, 3)]  # lags 0, 3, ..., 99
    metrics = lag_metrics(episodes, 100, 100_000)
    counts = {key for key in metrics if key.startswith("rollout/staleness/count_")}
    assert len(counts) == 32 + 2  # count_0 .. count_32, and count_over
    assert metrics["rollout/staleness/count_over"] == float(len(range(33, 100, 3)))  # lags 33..99
    assert metrics["rollout/staleness/count_3"] == 1.0 and metrics["rollout/staleness/count_4"] == 0.0
    assert "rollout/staleness/count_over" not in lag_metrics(episodes[:2], 100, 3)  # lags 0 and 3: none above


def test_a_backend_that_cannot_overlap_is_named(make_config) -> None:
    with pytest.raises(ConfigError, match=r"backend 'embedded' \(EmbeddedBackend\) cannot") as caught:
        _build(make_config, None, *ASYNC)
    assert "\n" not in str(caught.value)


@pytest.mark.filterwarnings("ignore:rllm.algorithm.rollout_correction.tis_mode:UserWarning")
@pytest.mark.filterwarnings("ignore:rllm.algorithm.rollout_correction.off_policy_mask_threshold:UserWarning")
def test_stale_samples_need_a_correction_or_the_explicit_key(make_config) -> None:
    with pytest.raises(ConfigError, match=r"=1 .*no rollout correction .*allow_uncorrected=true"):
        _build(make_config, OverlappingBackend, *STALE)
    for correction in (
        "rllm.algorithm.rollout_correction.tis_mode=token",
        "rllm.algorithm.rollout_correction.off_policy_mask_threshold=0.5",
        "rllm.async_training.allow_uncorrected=true",
    ):
        _build(make_config, OverlappingBackend, *STALE, correction).shutdown()
    _build(make_config, OverlappingBackend, *ASYNC).shutdown()  # staleness 0 is on-policy: nothing to correct


def test_torchrun_dynamic_sampling_and_versionless_engines_are_refused(make_config) -> None:
    with pytest.raises(ConfigError, match=r"not supported under torchrun \(2 ranks\)"):
        _build(make_config, TwoRanks, *ASYNC)
    with pytest.raises(ConfigError, match=r"does not combine with dynamic sampling"):
        _build(make_config, OverlappingBackend, *ASYNC, "rllm.dynamic_sampling.enable=true")
    with pytest.raises(
        ConfigError, match=r"rollout engine Versionless \(module .*\) reports no integer weight_version"
    ):
        _build(make_config, VersionlessBackend, *ASYNC)


@pytest.mark.parametrize("key", ["mini_batch_size", "partial_rollout", "trigger_parameter_sync_step"])
def test_rllms_other_async_keys_are_refused_as_missing_subsystems(make_config, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"'rllm.async_training.{key}' .* belongs to rLLM's .*, which rllm does not"):
        make_config(*ASYNC, f"+rllm.async_training.{key}=1")


def _episode(uid: str, *versions: int | None) -> Episode:
    steps = [Step(reward=1.0, weight_version=v) for v in versions]
    return Episode(id=uid, trajectories=[Trajectory(steps=steps)])


def test_staleness_is_counted_per_episode_from_its_oldest_step() -> None:
    episodes = [_episode("a:0", 3, 4), _episode("b:0", 4), _episode("c:0", 2), _episode("d:0", None)]
    # policy version 4: lags 1 (oldest step 3), 0, 2; the unlabelled episode is not counted
    assert lag_metrics(episodes, 4, 2) == {
        "rollout/stale_steps": 2.0,  # the steps of versions 3 and 2
        "rollout/staleness/min": 0.0,
        "rollout/staleness/mean": 1.0,
        "rollout/staleness/max": 2.0,
        "rollout/staleness/count_0": 1.0,
        "rollout/staleness/count_1": 1.0,
        "rollout/staleness/count_2": 1.0,
    }


def test_a_batch_with_a_step_of_another_version_is_refused_naming_the_episode() -> None:
    check_batch_version([_episode("a:0", 5, 5), _episode("b:0", 5)], 5)  # one version: fine
    with pytest.raises(TrainerError, match=r"Episode b:1 of a batch sampled from policy version 5 has a step .* 6"):
        check_batch_version([_episode("a:0", 5), _episode("b:1", 5, 6)], 5)


def test_a_sampled_batch_survives_json() -> None:
    batch = SampledBatch(1, 3, 9, 7, [_episode("t:0", 7)], EngineStats(attempts=2, retries=1), 0.25)
    again = SampledBatch.from_json(batch.to_json())
    assert (again.epoch, again.index, again.step, again.version, again.stats, again.seconds) == (
        1,
        3,
        9,
        7,
        EngineStats(attempts=2, retries=1),
        0.25,
    )
    assert [e.to_dict() for e in again.episodes] == [e.to_dict() for e in batch.episodes]
    with pytest.raises(ValueError, match="version=-1"):
        SampledBatch.from_json({**batch.to_json(), "version": -1})


@pytest.mark.parametrize(("lead", "pending"), [(0, 0), (1, 0), (2, 0), (2, 1)])
def test_the_producer_samples_in_order_and_never_beyond_its_lead(lead: int, pending: int) -> None:
    """Each batch starts sampling only when its step is at most ``lead`` beyond the one training; none is lost."""

    async def scenario() -> tuple[list[tuple[int, int]], list[int]]:
        started: list[tuple[int, int]] = []
        sampler: AheadSampler

        async def sample(epoch: int, index: int, batch: Any, step: int) -> SampledBatch:
            started.append((step, sampler.trained))
            await asyncio.sleep(0)
            return SampledBatch(epoch, index, step, 0, [], EngineStats())

        held = [SampledBatch(0, i, i + 1, 0, [], EngineStats()) for i in range(pending)]
        positions = iter([(0, i, None) for i in range(pending, 8)])
        sampler = AheadSampler(positions, sample, trained=0, last_step=6, lead=lead, pending=held)
        sampler.start()
        trained = []
        while True:
            batch, _ = await sampler.take()
            if batch is None:
                break
            for _ in range(3):  # a slow update: the producer runs meanwhile
                await asyncio.sleep(0)
            trained.append(batch.step)
            await sampler.step_trained()
        await sampler.stop()
        return started, trained

    started, trained = asyncio.run(scenario())
    assert trained == [1, 2, 3, 4, 5, 6]  # every step once, in order, up to last_step
    assert [step for step, _ in started] == list(range(pending + 1, 7))
    assert all(step <= done + 1 + lead for step, done in started), started
    if lead:  # with a lead the producer does run ahead of training
        assert any(step > done + 1 for step, done in started), started


class StuckEngine(Versionless):
    """Says the version it is given, but its answers say version 0 (a server whose weights someone else set)."""

    weight_version = 0

    async def generate(self, prompt_ids: Any, max_tokens: int | None = 1) -> Any:
        generation = await self.engine.generate(prompt_ids, max_tokens)
        generation.weight_version = 0
        return generation


class StuckBackend(OverlappingBackend):
    def init_rollout_engine(self, **kwargs: Any) -> Any:
        return StuckEngine(super().init_rollout_engine(**kwargs))


def test_a_batch_whose_answers_carry_another_version_stops_the_run(make_config) -> None:
    trainer = _build(make_config, StuckBackend, *ASYNC, "rllm.trainer.total_batches=3", "rllm.trainer.test_freq=0")
    try:
        with pytest.raises(TrainerError, match=r"sampled from policy version 1 has a step sampled by weight_version 0"):
            trainer.fit()
    finally:
        trainer.shutdown()
