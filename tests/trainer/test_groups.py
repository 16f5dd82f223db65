"""Episodes to groups: grouping, compact filtering, rejection sampling, validation metrics."""

from __future__ import annotations

import warnings

import pytest

from rllm import get_plugin_manager
from rllm.config.stages import TransformConfig
from rllm.errors import ConfigError, DataError, RLLMWarning, TrainerError
from rllm.trainer.grouping import (
    CompactFilteringConfig,
    group_by_task_and_role,
    transform_episodes_to_trajectory_groups,
)
from rllm.trainer.rejection import (
    RejectionSamplingConfig,
    RejectionSamplingState,
    apply_rejection_sampling_and_filtering,
)
from rllm.trainer.unified import UnifiedTrainer
from rllm.trainer.validation import pass_at_k_metrics, unbiased_pass_at_k
from rllm.types import Episode, Step, TerminationReason, Trajectory


def _episode(task_id: str, k: int, correct: bool, names=("solver",), reason=TerminationReason.ENV_DONE) -> Episode:
    trajectories = [Trajectory(name=name, steps=[Step(reward=float(correct))]) for name in names]
    return Episode(
        id=f"{task_id}:{k}",
        termination_reason=reason,
        is_correct=correct,
        trajectories=trajectories,
        info={"data_source": task_id.split("/")[0]},
    )


def _batch(outcomes: dict[str, list[bool]]) -> list[Episode]:
    return [_episode(task, k, ok) for task, results in outcomes.items() for k, ok in enumerate(results)]


NO_FILTER = CompactFilteringConfig()


def test_task_ids_with_colons_group_by_task_and_role() -> None:
    episodes = [
        _episode("math:v2:7", 0, True, names=("solver", "judge")),
        _episode("math:v2:7", 1, False, names=("solver", "judge")),
        _episode("math:v2:8", 0, True, names=("solver", "judge")),
    ]
    groups = group_by_task_and_role(episodes)
    assert sorted(g.group_id for g in groups) == [
        "math:v2:7:judge",
        "math:v2:7:solver",
        "math:v2:8:judge",
        "math:v2:8:solver",
    ]
    solver = next(g for g in groups if g.group_id == "math:v2:7:solver")
    assert solver.group_task_id == "math:v2:7" and solver.group_role == "solver"
    assert [m["rollout_idx"] for m in solver.metadata] == [0, 1]
    assert [m["is_correct"] for m in solver.metadata] == [True, False]


def test_unnamed_trajectories_are_named_by_position_and_empty_ones_skipped() -> None:
    episode = Episode(id="t:0", trajectories=[Trajectory(steps=[Step()]), Trajectory(), Trajectory(steps=[Step()])])
    assert sorted(g.group_role for g in group_by_task_and_role([episode])) == [
        "default_traj_name_0",
        "default_traj_name_2",
    ]


def _unnamed_pair() -> list[Episode]:
    """Two rollouts of task t, each with a solver and two unnamed trajectories."""
    named = [Trajectory(name="solver", steps=[Step()])]
    return [
        Episode(id=f"t:{k}", trajectories=[*named, Trajectory(steps=[Step()]), Trajectory(steps=[Step()])])
        for k in range(2)
    ]


@pytest.mark.parametrize(
    ("options", "sizes"),
    [
        ({}, {"solver": 2, "default_traj_name_1": 2, "default_traj_name_2": 2}),
        ({"drop_unnamed_traj": True}, {"solver": 2}),
        ({"impute_missing_names": False}, {"solver": 2, "default_traj_name": 4}),
        ({"default_traj_name": "solver"}, {"solver_0": 2, "default_traj_name": 4}),
    ],
)
def test_transform_config_fields_are_options_of_the_default_grouping_hook(
    options: dict[str, object], sizes: dict[str, int]
) -> None:
    groups = group_by_task_and_role(_unnamed_pair(), **options)
    assert {g.group_role: len(g.trajectories) for g in groups} == sizes
    config = TransformConfig(**options)  # type: ignore[arg-type]
    again = group_by_task_and_role(_unnamed_pair(), **config.grouping_options())
    assert {g.group_role: len(g.trajectories) for g in again} == sizes


def test_grouping_hook_options_come_from_the_config(make_config, train) -> None:
    seen: list[dict[str, object]] = []

    def recording(episodes, *, tag: str = "none", **rest):
        seen.append({"tag": tag, **rest})
        return group_by_task_and_role(episodes)

    config = make_config(
        "rllm.trainer.total_batches=1",
        "rllm.trainer.test_freq=0",
        "rllm.trainer.val_before_train=false",
        "+rllm.grouping_hook_options.tag=mine",
    )
    train(config, traj_grouping_hook=recording)
    assert seen and all(call == {"tag": "mine"} for call in seen)


def test_a_grouping_hook_option_the_hook_does_not_take_is_refused(make_config) -> None:
    config = make_config("+rllm.grouping_hook_options.drop_unamed_traj=true")
    with pytest.raises(
        ConfigError, match=r"grouping_hook_options\.drop_unamed_traj .*'task_and_role'.*drop_unnamed_traj"
    ):
        UnifiedTrainer(None, config)


def test_unset_rewards_take_the_last_step_but_mixed_groups_fail() -> None:
    episodes = _batch({"t": [True, False]})
    groups, metrics = transform_episodes_to_trajectory_groups(episodes, group_by_task_and_role, NO_FILTER)
    assert [t.reward for t in groups[0].trajectories] == [1.0, 0.0]
    assert metrics["grouping/num_groups"] == 1 and metrics["grouping/avg_group_size"] == 2

    mixed = _batch({"t": [True, False]})
    mixed[0].trajectories[0].reward = 0.5
    with pytest.raises(DataError, match="Group 't:solver' mixes trajectories with and without a reward"):
        transform_episodes_to_trajectory_groups(mixed, group_by_task_and_role, NO_FILTER)


@pytest.mark.parametrize(("enable", "kept"), [(True, 2), (False, 3)])
def test_compact_filtering_masks_by_termination_reason_only_when_enabled(enable: bool, kept: int) -> None:
    episodes = _batch({"t": [True, False, True]})
    episodes[1].termination_reason = TerminationReason.TIMEOUT
    section = {"enable": enable, "mask_timeout": True}
    groups, metrics = transform_episodes_to_trajectory_groups(
        episodes, group_by_task_and_role, CompactFilteringConfig.from_config(section)
    )
    assert len(groups[0].trajectories) == kept and metrics["grouping/episodes_masked"] == 3 - kept


def test_default_grouping_hook_is_registered_by_name() -> None:
    assert get_plugin_manager().grouping_hooks.resolve("task_and_role").target is group_by_task_and_role


def _rs(episodes, config, state):
    groups, _ = transform_episodes_to_trajectory_groups(episodes, group_by_task_and_role, NO_FILTER)
    return apply_rejection_sampling_and_filtering(episodes, groups, config, state)


def test_episode_mode_accumulates_across_batches_until_enough_partial_tasks() -> None:
    config = RejectionSamplingConfig(mode="episode", min_partial_solve_tasks=3)
    state = RejectionSamplingState()
    first = _batch({"a": [True, False], "b": [True, True]})  # 1 partial
    second = _batch({"c": [False, False], "d": [False, True]})  # 1 more partial: 2 < 3
    third = _batch({"e": [True, False]})  # 3 partial in total: release

    groups, episodes, metrics = _rs(first, config, state)
    assert (groups, episodes) == ([], []) and metrics["rejection/accumulated_groups"] == 2
    assert metrics["rejection/solve_partial"] == 1 and metrics["rejection/solve_all"] == 1

    groups, _, metrics = _rs(second, config, state)
    assert groups == [] and metrics["rejection/accumulated_partial_tasks"] == 2
    assert metrics["rejection/accumulated_batches"] == 2

    groups, episodes, metrics = _rs(third, config, state)
    assert [g.group_task_id for g in groups] == ["a", "b", "c", "d", "e"]
    assert len(episodes) == 10 and metrics["rejection/released"] == 1.0
    assert state.groups == [] and state.partial_tasks == 0  # a fresh accumulation starts


def test_batch_mode_keeps_partially_solved_tasks_only() -> None:
    config = RejectionSamplingConfig(mode="batch")
    groups, episodes, _ = _rs(
        _batch({"a": [True, False], "b": [True, True], "c": [False, False]}), config, RejectionSamplingState()
    )
    assert [g.group_task_id for g in groups] == ["a"]
    assert [ep.id for ep in episodes] == ["a:0", "a:1"]


def test_min_trajs_per_group_dropping_every_group_warns() -> None:
    config = RejectionSamplingConfig(mode="none", min_trajs_per_group=2)
    with pytest.warns(RLLMWarning, match="dropped every trajectory group.*largest has 1.*min_trajs_per_group=2"):
        groups, episodes, metrics = _rs(_batch({"a": [True], "b": [False]}), config, RejectionSamplingState())
    assert groups == [] and episodes == [] and metrics["rejection/groups_dropped_small"] == 2


def test_rejection_config_rejects_bad_settings() -> None:
    with pytest.raises(ConfigError, match="multiplier is not 1 but rejection sampling is disabled"):
        RejectionSamplingConfig.from_config({"enable": False, "multiplier": 2})
    with pytest.raises(ConfigError, match="mode='epsiode' is unknown"):
        RejectionSamplingConfig.from_config({"enable": True, "mode": "epsiode"})


def test_episode_mode_in_the_trainer_skips_updates_until_release(make_config, train) -> None:
    config = make_config(
        "rllm.rejection_sample.enable=true",
        "rllm.rejection_sample.mode=episode",
        "rllm.rejection_sample.min_partial_solve_tasks=25",
        "rllm.trainer.total_batches=4",
        "rllm.trainer.test_freq=0",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, metrics = train(config)
    records = [r for r in metrics if r["kind"] == "train"]
    updated = [r["batch/updated"] for r in records]
    partial = [r["rejection/accumulated_partial_tasks"] for r in records]
    # holding groups back is what episode mode is for: no step is reported as having nothing to train on
    assert not [w for w in caught if "nothing to train on" in str(w.message) or "trained nothing" in str(w.message)]
    # the untrained policy solves few of 20 tasks per batch partially: it takes several batches
    assert updated[0] == 0.0 and 1.0 in updated
    release = updated.index(1.0)
    assert partial[release] >= 25 > partial[release - 1]
    assert all(p < 25 for p in partial[:release])
    assert records[release]["rejection/groups_kept"] == 20 * (release + 1)


def test_pass_at_k_is_the_unbiased_estimator_averaged_over_tasks() -> None:
    episodes = _batch(
        {
            "math/1": [True, False, False, True],  # n=4, c=2
            "math/2": [False, True, False, False],  # n=4, c=1
            "math/3": [False, False],  # n=2, c=0 (two rollouts lost)
            "code/1": [True],
        }
    )
    metrics = pass_at_k_metrics(episodes, [1, 2, 4, 8])
    # pass@1 per task is c/n: (2/4 + 1/4 + 0/2) / 3
    assert metrics["val/math/pass@1"] == pytest.approx(0.25)
    # pass@2 = 1 - C(n-c,2)/C(n,2): math/1 1 - 1/6 = 5/6; math/2 1 - 3/6 = 1/2; math/3 1 - 1/1 = 0
    assert metrics["val/math/pass@2"] == pytest.approx((5 / 6 + 1 / 2 + 0) / 3)
    # pass@4 only over the tasks with 4 samples: both contain a correct one
    assert metrics["val/math/pass@4"] == 1.0
    assert "val/math/pass@8" not in metrics  # no task has 8 samples
    assert metrics["val/code/pass@1"] == 1.0 and "val/code/pass@2" not in metrics


def test_unbiased_pass_at_k_by_hand() -> None:
    # n=5, c=2, k=3: C(3,3)/C(5,3) = 1/10 of the 3-subsets miss both correct samples
    assert unbiased_pass_at_k(5, 2, 3) == pytest.approx(0.9)
    assert unbiased_pass_at_k(5, 0, 3) == 0.0 and unbiased_pass_at_k(5, 3, 3) == 1.0
    assert unbiased_pass_at_k(8, 1, 1) == pytest.approx(1 / 8)


def test_a_pass_at_k_larger_than_the_validation_samples_is_refused(make_config) -> None:
    config = make_config("rllm.rollout.n_val=4", "rllm.trainer.val_pass_at_k=[1,4,8]")
    with pytest.raises(ConfigError, match=r"val_pass_at_k=\[1, 4, 8\] asks for pass@8.*rllm.rollout.n_val=4"):
        UnifiedTrainer(None, config)


def test_rejection_multiplier_enlarges_the_training_batch(make_config, train) -> None:
    config = make_config(
        "rllm.rejection_sample.enable=true",
        "rllm.rejection_sample.mode=batch",
        "rllm.rejection_sample.multiplier=2",
        "rllm.trainer.total_batches=1",
        "rllm.trainer.test_freq=0",
        "rllm.trainer.val_before_train=false",
    )
    _, [record] = train(config)
    assert record["batch/num_episodes"] == 2 * 20 * 8
    kept = record["rejection/groups_kept"]
    assert kept == record["rejection/solve_partial"] < 40  # batch mode: partially solved tasks only


def test_enabling_rejection_sampling_without_a_mode_means_episode_as_in_rllm(make_config) -> None:
    from rllm.trainer.rejection import RejectionSamplingConfig

    config = make_config("rllm.rejection_sample.enable=true")
    assert RejectionSamplingConfig.from_config(config.rllm.rejection_sample).mode == "episode"
    grouped = make_config("rllm.rejection_sample.enable=true", "rllm.rejection_sample.mode=group")
    assert RejectionSamplingConfig.from_config(grouped.rllm.rejection_sample).mode == "group"  # a size filter only


@pytest.mark.parametrize("key", ["n", "n_val"])
def test_a_rollout_count_below_one_is_refused_by_the_schema_naming_the_key(make_config, key: str) -> None:
    config = make_config()
    config.rllm.rollout[key] = 0  # a programmatic config, past load_config's checks
    with pytest.raises(ConfigError, match=rf"^rllm\.rollout\.{key} must be an integer >= 1; got 0"):
        UnifiedTrainer(None, config)


def test_a_grouping_hook_calling_sys_exit_is_one_line_naming_it() -> None:
    def leaves(episodes: list[Episode]) -> list:
        raise SystemExit(3)

    with pytest.raises(TrainerError, match=r"^Grouping hook .*leaves called sys.exit\(3\); a grouping hook raises"):
        transform_episodes_to_trajectory_groups(_batch({"t": [True, False]}), leaves, NO_FILTER)
