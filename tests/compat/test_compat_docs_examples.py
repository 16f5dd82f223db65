"""rLLM's current documentation examples, as a user copies them, run unchanged and give rLLM's numbers.

The snippets below are the text of rLLM's "Advantage estimator" and "Pre-computing advantage"
pages (only the ``AgentTrainer(...)`` calls are left out: the trainer receives the same map
as ``AlgorithmConfig.estimator_map``). Each runs in a namespace of its own against a private
plugin manager; the expected numbers are worked out by hand beside each assertion.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rllm import Step, Trajectory, TrajectoryGroup, load_config
from rllm.errors import RLLMWarning
from rllm.trainer.algorithms.advantage import AlgorithmConfig, collect_reward_and_advantage_from_trajectory_groups

pytestmark = pytest.mark.usefixtures("plugin_manager")

BATCH_MEAN_BASELINE = """
import numpy as np
from rllm.trainer.algorithms.advantage import (
    register_rllm_adv_estimator,
    get_rllm_adv_estimator,
)


@register_rllm_adv_estimator("batch_mean_baseline")
def batch_mean_baseline(rewards, algorithm_config, **kwargs):
    batch_mean = np.mean(np.concatenate(rewards)) if rewards else 0.0
    advantages_by_group = [group_rewards - batch_mean for group_rewards in rewards]
    return advantages_by_group, advantages_by_group


fn = get_rllm_adv_estimator("batch_mean_baseline")
"""

OPO_PORT = """
import numpy as np
from rllm.trainer.algorithms.advantage import register_rllm_adv_estimator


@register_rllm_adv_estimator("opo")
def calculate_opo_advantages(rewards, algorithm_config, **kwargs):
    traj_groups = kwargs.get("traj_groups")
    assert traj_groups is not None, "OPO needs traj_groups for response lengths"

    advantages_by_group = []
    for group_rewards, traj_group in zip(rewards, traj_groups, strict=True):
        lengths = np.array(
            [
                sum(len(step.response_ids) for step in traj.steps)
                for traj in traj_group.trajectories
            ],
            dtype=np.float64,
        )
        total_len = float(np.sum(lengths))
        baseline = float(np.sum(lengths * group_rewards) / total_len) if total_len > 0 else 0.0
        advantages_by_group.append(group_rewards - baseline)

    return advantages_by_group, advantages_by_group
"""

ROLE_MAP_ENUMS = """
from rllm.trainer.algorithms.config import rLLMAdvantageEstimator
traj_group_adv_estimator_map = {
    "solver": rLLMAdvantageEstimator.GRPO,
    "judge": rLLMAdvantageEstimator.REINFORCE,
}
"""

ROLE_MAP_CUSTOM = """
traj_group_adv_estimator_map = {
    "solver": "batch_mean_baseline",
    "judge": "reinforce",
}
"""

MIXED_MODE_MAP = """
from rllm.trainer.algorithms.config import rLLMAdvantageEstimator

traj_group_adv_estimator_map = {
    "solver": rLLMAdvantageEstimator.GRPO,       # RL estimator
    "validator": rLLMAdvantageEstimator.REINFORCE,  # another RL role (if present)
}
"""

YAML_GLOBAL_DEFAULT = """
rllm:
  algorithm:
    adv_estimator: grpo
  stepwise_advantage:
    mode: broadcast
    norm_adv_by_std_in_grpo: true
"""

YAML_LOSS_FN = """
rllm:
  algorithm:
    loss_fn: ppo  # or importance_sampling / cispo / dro / cross_entropy
"""

YAML_CUSTOM = """
rllm:
  algorithm:
    adv_estimator: batch_mean_baseline
"""

YAML_OPO = """
rllm:
  algorithm:
    adv_estimator: opo
"""

YAML_PRECOMPUTE = """
rllm:
  algorithm:
    use_precomputed_advantage: true
    adv_estimator: grpo
"""


def run(snippet: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(textwrap.dedent(snippet), "<rLLM docs>", "exec"), namespace)
    return namespace


def config_from(tmp_path: Path, yaml_text: str) -> AlgorithmConfig:
    path = tmp_path / "config.yaml"
    path.write_text(yaml_text)
    return AlgorithmConfig.from_config(load_config(path))


def group(task: str, role: str, rewards: list[float | None], lengths: list[list[int]] | None = None) -> TrajectoryGroup:
    lengths = lengths or [[1] for _ in rewards]
    trajectories = [
        Trajectory(name=role, reward=r, steps=[Step(response_ids=list(range(n))) for n in steps])
        for r, steps in zip(rewards, lengths, strict=True)
    ]
    return TrajectoryGroup(trajectories=trajectories, group_id=f"{task}:{role}")


def advantages(g: TrajectoryGroup) -> list[Any]:
    return [t.steps[0].advantage for t in g.trajectories]


def test_batch_mean_baseline_as_global_default_from_yaml(tmp_path: Path) -> None:
    namespace = run(BATCH_MEAN_BASELINE)
    config = config_from(tmp_path, YAML_CUSTOM)
    a, b = group("t1", "solver", [1.0, 0.0]), group("t2", "solver", [1.0, 1.0, 0.0])
    collect_reward_and_advantage_from_trajectory_groups([a, b], config)
    # Role-batch mean of 1, 0, 1, 1, 0 is 3/5.
    assert advantages(a) == pytest.approx([0.4, -0.6])
    assert advantages(b) == pytest.approx([0.4, 0.4, -0.6])
    # The looked-up function, called the way rLLM's collection step calls it.
    out, returns = namespace["fn"](rewards=[np.array([2.0, 0.0])], algorithm_config=config, traj_groups=[a])
    assert out[0].tolist() == [1.0, -1.0] and returns[0].tolist() == [1.0, -1.0]


def test_per_role_map_with_the_custom_estimator() -> None:
    run(BATCH_MEAN_BASELINE)
    mapping = run(ROLE_MAP_CUSTOM)["traj_group_adv_estimator_map"]
    solver, judge = group("t", "solver", [1.0, 0.0, 0.0, 0.0]), group("t", "judge", [1.0, 0.0])
    collect_reward_and_advantage_from_trajectory_groups([solver, judge], AlgorithmConfig(estimator_map=mapping))
    assert advantages(solver) == pytest.approx([0.75, -0.25, -0.25, -0.25])  # batch mean 1/4
    assert advantages(judge) == [1.0, 0.0]  # REINFORCE: the reward


def test_per_role_map_with_enum_members() -> None:
    mapping = run(ROLE_MAP_ENUMS)["traj_group_adv_estimator_map"]
    solver, judge = group("t", "solver", [1.0, 0.0]), group("t", "judge", [1.0, 0.0])
    collect_reward_and_advantage_from_trajectory_groups([solver, judge], AlgorithmConfig(estimator_map=mapping))
    # GRPO on [1, 0]: mean 1/2, population std 1/2, eps 1e-6.
    assert advantages(solver) == pytest.approx([0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)])
    assert advantages(judge) == [1.0, 0.0]


OPO_GROUP = ([1.0, 0.0, 1.0], [[3, 1], [2], [2]])
# Lengths 4, 2, 2 (all steps' response tokens); baseline (4*1 + 2*0 + 2*1) / 8 = 3/4.
OPO_EXPECTED = [0.25, -0.75, 0.25]


def test_opo_port_reads_traj_groups_under_its_documented_name(plugin_manager: object) -> None:
    # rLLM's example, unchanged, registers over the built-in 'opo' (not one of rLLM's own estimators): it
    # replaces it, warning; rLLM's own names (grpo, rloo, ...) would be refused without replace=True.
    with pytest.warns(RLLMWarning, match="replaces estimator 'opo' of built-in plugin"):
        run(OPO_PORT)
    g = group("t", "solver", *OPO_GROUP)
    collect_reward_and_advantage_from_trajectory_groups([g], AlgorithmConfig(estimator="opo"))
    assert advantages(g) == pytest.approx(OPO_EXPECTED)


def test_opo_port_reads_traj_groups() -> None:
    """The same port under a free name (the only change), so its numbers are checked today."""
    run(OPO_PORT.replace('register_rllm_adv_estimator("opo")', 'register_rllm_adv_estimator("opo_port")'))
    g = group("t", "solver", *OPO_GROUP)
    judge = group("t", "judge", [1.0, 0.0], [[1], [3]])  # baseline (1*1 + 3*0) / 4 = 1/4
    config = AlgorithmConfig(estimator_map={"solver": "opo_port", "judge": "opo_port"})
    collect_reward_and_advantage_from_trajectory_groups([g, judge], config)
    assert advantages(g) == pytest.approx(OPO_EXPECTED)
    assert advantages(judge) == pytest.approx([0.75, -0.25])


def test_opo_yaml_gives_the_ports_numbers_with_the_builtin(tmp_path: Path) -> None:
    g = group("t", "solver", *OPO_GROUP)
    collect_reward_and_advantage_from_trajectory_groups([g], config_from(tmp_path, YAML_OPO))
    assert advantages(g) == pytest.approx(OPO_EXPECTED)


def test_loss_fn_yaml(tmp_path: Path) -> None:
    assert config_from(tmp_path, YAML_LOSS_FN).loss_fn == "ppo"


def test_global_default_yaml_block_loads(tmp_path: Path) -> None:
    config = config_from(tmp_path, YAML_GLOBAL_DEFAULT)
    assert config.estimator == "grpo" and config.norm_adv_by_std_in_grpo is True


def test_mixed_mode_precomputed_judge_beside_rl_roles(tmp_path: Path) -> None:
    """Solver on GRPO, validator on REINFORCE, judge on advantages its workflow precomputed."""
    config = config_from(tmp_path, YAML_PRECOMPUTE)
    mapping = run(MIXED_MODE_MAP)["traj_group_adv_estimator_map"]
    config = dataclasses.replace(config, estimator_map=mapping)  # what the trainer does with the map
    # Two solver trajectories per episode, two rollouts: one solver group of four.
    solver = group("t", "solver", [1.0, 0.0, 1.0, 1.0])
    validator = group("t", "validator", [1.0, 0.0])
    judge = group("t", "judge", [None, None], [[3], [2]])
    teacher = [[-0.5, -1.0, -0.2], [-0.1, -0.3]]
    student = [[-0.7, -0.9, -0.2], [-0.4, -0.3]]
    for traj, t_lp, s_lp in zip(judge.trajectories, teacher, student, strict=True):
        judge_step = traj.steps[0]
        # The page's compute_distill_reverse_kl: teacher minus student log-probability per token.
        judge_step.advantage = [t - s for t, s in zip(t_lp, s_lp, strict=True)]
    metrics = collect_reward_and_advantage_from_trajectory_groups([solver, judge, validator], config)
    # GRPO on [1, 0, 1, 1]: mean 3/4, population std sqrt(3)/4.
    std = np.sqrt(3) / 4
    assert advantages(solver) == pytest.approx([0.25 / (std + 1e-6), -0.75 / (std + 1e-6)] + [0.25 / (std + 1e-6)] * 2)
    assert advantages(validator) == [1.0, 0.0]
    assert advantages(judge) == [pytest.approx([0.2, -0.1, 0.0]), pytest.approx([0.3, 0.0])]
    # Judge tokens 0.2, -0.1, 0, 0.3, 0: mean 0.08; two of five are zero.
    assert metrics["advantage/judge/mean"] == pytest.approx(0.08)
    assert metrics["advantage/judge/fraction_zero"] == pytest.approx(2 / 5)
    assert "reward/judge/mean" not in metrics
