"""Every name of the seed page and of rLLM's current module paths imports from where it is
documented, and both layouts name one implementation."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

SEED = {
    "rllm.experimental.common.advantage": [
        "register_rllm_adv_estimator",
        "get_rllm_adv_estimator",
        "collect_reward_and_advantage_from_trajectory_groups",
        "calculate_grpo_advantages",
        "calculate_reinforce_advantages",
        "calculate_reinforce_plus_plus_baseline_advantages",
        "calculate_rloo_advantages",
    ],
    "rllm.experimental.common.config": ["rLLMAdvantageEstimator", "AlgorithmConfig"],
    "rllm.experimental.common.rl_algo": ["calculate_grpo_advantages_per_group", "calculate_rloo_advantages_per_group"],
    "rllm.experimental.unified_trainer": ["UnifiedTrainer", "AgentTrainer"],
}

TODAY = {
    "rllm.trainer.algorithms.advantage": [
        "RLLM_ADV_ESTIMATOR_REGISTRY",
        "register_rllm_adv_estimator",
        "get_rllm_adv_estimator",
        "register_adv_estimator",
        "get_adv_estimator",
        "collect_reward_and_advantage_from_trajectory_groups",
        "calculate_grpo_advantages",
        "calculate_reinforce_advantages",
        "calculate_reinforce_plus_plus_baseline_advantages",
        "calculate_prpo_advantages",
        "calculate_rloo_advantages",
        "AlgorithmConfig",
        "rLLMAdvantageEstimator",
    ],
    "rllm.trainer.algorithms.config": [
        "AlgorithmConfig",
        "rLLMAdvantageEstimator",
        "CompactFilteringConfig",
        "RejectionSamplingConfig",
        "RolloutCorrectionConfig",
        "TransformConfig",
    ],
    "rllm.trainer.algorithms.rl_algo": ["calculate_grpo_advantages_per_group", "calculate_rloo_advantages_per_group"],
    "rllm.trainer.algorithms.rejection_sampling": [
        "RejectionSamplingConfig",
        "RejectionSamplingState",
        "apply_rejection_sampling_and_filtering",
    ],
    "rllm.trainer.algorithms.transform": ["TransformConfig", "transform_episodes_to_trajectory_groups"],
    "rllm.trainer.algorithms.metrics": ["reduce_metrics_by_trajectory_name", "reduce_metrics_lists"],
    "rllm.trainer.algorithms": [
        "AlgorithmConfig",
        "CompactFilteringConfig",
        "RejectionSamplingConfig",
        "RejectionSamplingState",
        "RolloutCorrectionConfig",
        "TransformConfig",
        "apply_rejection_sampling_and_filtering",
        "collect_reward_and_advantage_from_trajectory_groups",
        "rLLMAdvantageEstimator",
        "reduce_metrics_by_trajectory_name",
        "reduce_metrics_lists",
        "transform_episodes_to_trajectory_groups",
    ],
    "rllm.trainer.unified_trainer": ["UnifiedTrainer", "TrainerState"],
    "rllm.trainer.backend_protocol": ["BackendProtocol"],
    "rllm.types": ["Step", "Trajectory", "Episode", "TrajectoryGroup", "Task"],
    "rllm": ["register_adv_estimator", "register_rllm_adv_estimator", "get_rllm_adv_estimator"],
}


@pytest.mark.parametrize(
    ("module", "name"), [(m, n) for layout in (SEED, TODAY) for m, names in layout.items() for n in names]
)
def test_name_imports_from_its_documented_path(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is not None


SAME = [
    ("rllm.experimental.common.advantage", "rllm.trainer.algorithms.advantage", "calculate_grpo_advantages"),
    ("rllm.experimental.common.advantage", "rllm.trainer.algorithms.advantage", "register_rllm_adv_estimator"),
    ("rllm.experimental.common.advantage", "rllm.trainer.algorithms.advantage", "RLLM_ADV_ESTIMATOR_REGISTRY"),
    (
        "rllm.experimental.common.advantage",
        "rllm.trainer.algorithms.advantage",
        "collect_reward_and_advantage_from_trajectory_groups",
    ),
    ("rllm.experimental.common.config", "rllm.trainer.algorithms.config", "AlgorithmConfig"),
    ("rllm.experimental.common.config", "rllm.trainer.algorithms.config", "rLLMAdvantageEstimator"),
    ("rllm.experimental.common.rl_algo", "rllm.trainer.algorithms.rl_algo", "calculate_rloo_advantages_per_group"),
    ("rllm.experimental.unified_trainer", "rllm.trainer.unified_trainer", "UnifiedTrainer"),
    ("rllm.experimental.unified_trainer", "rllm.trainer.backend_protocol", "BackendProtocol"),
    ("rllm.experimental.unified_trainer", "rllm.trainer", "AgentTrainer"),
    ("rllm.agents.agent", "rllm.types", "TrajectoryGroup"),
    ("rllm.trainer.algorithms.config", "rllm.trainer.algorithms.rejection_sampling", "RejectionSamplingConfig"),
    ("rllm.trainer.algorithms.config", "rllm.trainer.algorithms.transform", "TransformConfig"),
]


@pytest.mark.parametrize(("seed", "today", "name"), SAME)
def test_both_layouts_name_one_implementation(seed: str, today: str, name: str) -> None:
    assert getattr(importlib.import_module(seed), name) is getattr(importlib.import_module(today), name)


def test_todays_names_are_aliases_of_the_seeds() -> None:
    import rllm
    from rllm.trainer.algorithms import advantage

    assert advantage.register_adv_estimator is advantage.register_rllm_adv_estimator
    assert advantage.get_adv_estimator is advantage.get_rllm_adv_estimator
    assert rllm.register_adv_estimator is rllm.register_rllm_adv_estimator


def test_a_fresh_interpreter_imports_todays_paths_first() -> None:
    """Import order must not matter: today's path first, in a process of its own."""
    code = (
        "from rllm.trainer.algorithms.advantage import register_adv_estimator, get_adv_estimator\n"
        "from rllm.trainer.algorithms.config import AlgorithmConfig\n"
        "import numpy as np\n"
        "@register_adv_estimator('shift')\n"
        "def shift(rewards, algorithm_config, **kwargs):\n"
        "    out = [r - 1 for r in rewards]\n"
        "    return out, out\n"
        "print(get_adv_estimator('shift')([np.array([3.0])], AlgorithmConfig())[0][0].tolist())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[2.0]"
