"""KL in the reward: the controllers by hand, the penalty by an independent formula, the keys at every door."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from extras import missing

from rllm import AlgorithmConfig
from rllm.config import CORE_KEYS, load_config
from rllm.errors import ConfigError, LossOptionError, TrainerError
from rllm.losses import AdaptiveKLController, FixedKLController, KLInReward, kl_controller
from rllm.trainer.algorithms import KLControlConfig
from rllm.types import Step, Trajectory, TrajectoryGroup
from rllm_transformers.rewards import subtract_from_rewards

needs_torch = pytest.mark.skipif(
    bool(missing("torch")), reason="torch is not installed (pip install torch==2.13.0+cpu)"
)

# two sequences of a tiny batch: log-probs of the sampling policy and the reference, the second padded
OLD = [[-0.5, -1.0, -2.0], [-1.2, -0.1, 0.0]]
REF = [[-1.0, -0.8, -2.5], [-0.2, -0.4, 0.0]]
MASK = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]


def _kl_by_hand(old: float, ref: float, kind: str) -> float:
    """verl's estimators written out per token (k3 from the ratio ref/policy)."""
    if kind in ("kl", "k1"):
        return old - ref
    if kind == "abs":
        return abs(old - ref)
    if kind in ("mse", "k2"):
        return 0.5 * (old - ref) ** 2
    ratio = math.exp(ref - old)
    return ratio - math.log(ratio) - 1.0


# -- the controllers -----------------------------------------------------------------------------
def test_a_fixed_controller_never_moves() -> None:
    ctrl = kl_controller("fixed", 0.05)
    assert isinstance(ctrl, FixedKLController)
    for kl in (0.0, 0.2, 50.0):
        ctrl.update(kl, 1000)
    assert ctrl.value == 0.05


@pytest.mark.parametrize(
    ("kl", "factor"),
    [
        (0.2, 1 + 0.2 * 0.01),  # kl/target - 1 = 1, clipped to 0.2; n_steps/horizon = 100/10000
        (0.11, 1 + 0.1 * 0.01),  # within the clip: 0.1
        (0.05, 1 - 0.2 * 0.01),  # -0.5 clipped to -0.2
        (0.1, 1.0),  # on target
    ],
)
def test_adaptive_controller_after_one_update_by_hand(kl: float, factor: float) -> None:
    ctrl = kl_controller("adaptive", 0.001, target_kl=0.1, horizon=10000)
    assert isinstance(ctrl, AdaptiveKLController)
    ctrl.update(kl, 100)
    assert ctrl.value == pytest.approx(0.001 * factor, rel=1e-12)


def test_a_batch_of_more_than_five_horizons_below_target_keeps_the_coefficient_positive() -> None:
    """verl's factor ``1 - 0.2 * 16 / 1`` is -2.2 (0.001 -> -0.0022); the step's share of the horizon is capped at 1."""
    ctrl = kl_controller("adaptive", 0.001, target_kl=0.1, horizon=1)
    ctrl.update(0.0, 16)
    assert ctrl.value == pytest.approx(0.001 * 0.8, rel=1e-12)
    ctrl.update(1.0, 16)  # far above target: +20% at most
    assert ctrl.value == pytest.approx(0.001 * 0.8 * 1.2, rel=1e-12)
    capped = kl_controller("adaptive", 0.5, target_kl=0.1, horizon=100)
    for _ in range(50):
        capped.update(0.0, 10**6)
    assert capped.value == pytest.approx(0.5 * 0.8**50, rel=1e-9) and capped.value > 0


def test_up_to_one_horizon_per_update_the_step_is_verls_formula() -> None:
    ctrl = kl_controller("adaptive", 0.002, target_kl=0.1, horizon=64)
    ctrl.update(0.09, 64)  # the error -0.1 within the clip, the whole horizon
    assert ctrl.value == pytest.approx(0.002 * (1 - 0.1), rel=1e-12)
    ctrl.update(0.3, 16)
    assert ctrl.value == pytest.approx(0.002 * 0.9 * (1 + 0.2 * 16 / 64), rel=1e-12)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: AdaptiveKLController(0.001, 0.1, math.inf), r"kl_ctrl\.horizon must be an integer >= 1 .*got inf"),
        (lambda: AdaptiveKLController(0.001, 0.1, 2.5), r"kl_ctrl\.horizon must be an integer >= 1 .*got 2\.5"),
        (lambda: kl_controller("adaptive", 0.001, 0.1, 0.5), r"kl_ctrl\.horizon must be an integer >= 1 .*got 0\.5"),
        (lambda: kl_controller("adaptive", 0.001, 0.1, True), r"kl_ctrl\.horizon must be an integer >= 1 .*got True"),
        (lambda: kl_controller("adaptive", 0.001, math.nan), r"kl_ctrl\.target_kl must be a finite number > 0"),
        (lambda: kl_controller("adaptive", -0.1), r"kl_ctrl\.kl_coef must be a number >= 0; got -0\.1"),
        (lambda: kl_controller("fixed", math.nan), r"kl_ctrl\.kl_coef must be a number >= 0; got nan"),
        (lambda: kl_controller("adaptive", 0.001).update(math.nan, 8), r"needs a finite measured KL; got nan"),
        (lambda: kl_controller("adaptive", 0.001).update(0.1, 2.5), r"needs a count of samples >= 0; got 2\.5"),
    ],
)
def test_controller_options_out_of_range_are_one_line_errors(call, message) -> None:
    with pytest.raises(LossOptionError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_a_refused_update_leaves_the_coefficient() -> None:
    ctrl = kl_controller("adaptive", 0.001)
    with pytest.raises(LossOptionError):
        ctrl.update(math.inf, 8)
    assert ctrl.value == 0.001


def test_settings_come_from_the_algorithm_config_and_are_none_when_off() -> None:
    assert KLInReward.from_algorithm(AlgorithmConfig()) is None
    config = AlgorithmConfig.from_config(
        {
            "use_kl_in_reward": True,
            "kl_penalty": "low_var_kl",
            "kl_ctrl": {"type": "adaptive", "kl_coef": 0.02, "target_kl": 0.5, "horizon": 300},
        }
    )
    settings = KLInReward.from_algorithm(config)
    assert settings is not None and settings.kind == "low_var_kl"
    ctrl = settings.controller
    assert isinstance(ctrl, AdaptiveKLController)
    assert (ctrl.value, ctrl.target, ctrl.horizon) == (0.02, 0.5, 300)
    assert isinstance(KLInReward.from_algorithm(AlgorithmConfig(use_kl_in_reward=True)).controller, FixedKLController)


def test_the_defaults_are_verls_in_the_schema_and_the_dataclass() -> None:
    schema = {key.path: key.default for key in CORE_KEYS}
    assert schema["rllm.algorithm.use_kl_in_reward"] is False
    verls = {
        "kl_penalty": "kl",
        "kl_ctrl.type": "fixed",
        "kl_ctrl.kl_coef": 0.001,
        "kl_ctrl.target_kl": 0.1,
        "kl_ctrl.horizon": 10000,
    }
    assert {key: schema[f"rllm.algorithm.{key}"] for key in verls} == verls
    assert KLControlConfig() == KLControlConfig(type="fixed", kl_coef=0.001, target_kl=0.1, horizon=10000)
    assert AlgorithmConfig().kl_penalty == "kl"


# -- the penalty on a tiny batch -----------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("kind", ["k1", "abs", "k2", "k3", "low_var_kl+"])
def test_penalty_per_token_and_the_controllers_input_by_an_independent_formula(kind: str) -> None:
    import torch

    settings = KLInReward.from_algorithm(
        AlgorithmConfig(
            use_kl_in_reward=True, kl_penalty=kind, kl_ctrl={"type": "adaptive", "kl_coef": 0.3, "horizon": 4}
        )
    )
    assert settings is not None
    tensors = [torch.tensor(x, dtype=torch.float64) for x in (OLD, REF, MASK)]
    penalty, metrics = settings.penalty(*tensors)
    base = kind.rstrip("+")
    kl = [
        [_kl_by_hand(o, r, base) * m for o, r, m in zip(*rows, strict=True)]
        for rows in zip(OLD, REF, MASK, strict=True)
    ]
    assert penalty.flatten().tolist() == pytest.approx([0.3 * v for row in kl for v in row], abs=1e-12)
    assert penalty[1, 2] == 0.0  # off the mask
    mean_kl = (sum(kl[0]) / 3 + sum(kl[1]) / 2) / 2  # each sequence's token mean, then over sequences
    assert metrics == pytest.approx({"kl_in_reward/coef": 0.3, "kl_in_reward/kl": mean_kl})
    error = min(max(mean_kl / 0.1 - 1, -0.2), 0.2)
    assert settings.coef == pytest.approx(0.3 * (1 + error * 2 / 4))  # updated after, with 2 sequences


def _steps(n: int, reward: float) -> list[Step]:
    return [Step(prompt_ids=[1], response_ids=[2], reward=reward) for _ in range(n)]


@needs_torch
def test_rewards_lose_coef_times_the_kl_summed_over_each_steps_tokens() -> None:
    """Row 0 is a one-step trajectory, row 1 the second step of a two-step one whose first step is not trained."""
    import torch

    settings = KLInReward.from_algorithm(AlgorithmConfig(use_kl_in_reward=True, kl_ctrl={"kl_coef": 0.5}))
    assert settings is not None
    one, two = Trajectory(steps=_steps(1, 0.25), reward=1.0), Trajectory(steps=_steps(2, 0.0), reward=0.0)
    unscored = Trajectory(steps=_steps(1, 0.0), reward=None)
    groups = [TrajectoryGroup(trajectories=[one, two], group_id="t:solver"), TrajectoryGroup([unscored], "u:solver")]
    rows = [one.steps[0], two.steps[1]]
    old, ref, mask = OLD, REF, MASK
    tensors = [torch.tensor(x, dtype=torch.float64) for x in (old, ref, mask)]
    penalty, _ = settings.penalty(*tensors)
    metrics = subtract_from_rewards(groups, rows, penalty.sum(-1).tolist())
    first = 0.5 * sum(o - r for o, r in zip(OLD[0], REF[0], strict=True))
    second = 0.5 * sum(o - r for o, r in zip(OLD[1][:2], REF[1][:2], strict=True))
    assert one.reward == pytest.approx(1.0 - first) and one.steps[0].reward == pytest.approx(0.25 - first)
    assert two.reward == pytest.approx(0.0 - second) and two.steps[1].reward == pytest.approx(-second)
    assert two.steps[0].reward == 0.0 and unscored.reward is None  # untrained step, unscored trajectory
    assert metrics == pytest.approx({"kl_in_reward/penalty": (first + second + 0.0) / 3})


@needs_torch
def test_a_non_finite_kl_is_a_named_error_and_leaves_the_coefficient() -> None:
    import torch

    settings = KLInReward.from_algorithm(AlgorithmConfig(use_kl_in_reward=True, kl_ctrl={"type": "adaptive"}))
    assert settings is not None
    old = torch.tensor([[-math.inf, -1.0]])
    with pytest.raises(TrainerError, match=r"is -inf \(not finite\) with rllm\.algorithm\.kl_penalty='kl'"):
        settings.penalty(old, torch.tensor([[-1.0, -1.0]]), torch.ones(1, 2))
    assert settings.coef == 0.001


@needs_torch
def test_a_coefficient_that_overflows_the_rewards_is_blamed_on_the_kl_setting() -> None:
    import torch

    settings = KLInReward.from_algorithm(AlgorithmConfig(use_kl_in_reward=True, kl_ctrl={"kl_coef": 1e308}))
    assert settings is not None
    tensors = [torch.tensor(x, dtype=torch.float32) for x in (OLD, REF, MASK)]  # the backend's log-probs
    with pytest.raises(TrainerError) as caught:  # 1e308 times a KL of 0.5 is beyond float32
        settings.penalty(*tensors)
    message = str(caught.value)
    assert message.startswith("The KL-in-reward penalty is not finite: coefficient 1e+308 times the batch's KL")
    assert "lower rllm.algorithm.kl_ctrl.kl_coef" in message and "reward function" not in message
    assert settings.coef == 1e308


# -- the keys at the Python door and the CLI's ------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: AlgorithmConfig(kl_ctrl={"type": "adaptve"}), r"kl_ctrl\.type must be .*Did you mean 'adaptive'\?"),
        (lambda: KLControlConfig(horizon=-5), r"rllm\.algorithm\.kl_ctrl\.horizon must be an integer >= 1; got -5"),
        (
            lambda: AlgorithmConfig.from_config({"kl_ctrl": {"horizn": 5}}),
            r"Unknown key 'rllm\.algorithm\.kl_ctrl\.horizn'.*Did you mean 'horizon'\?",
        ),
        (lambda: AlgorithmConfig(kl_ctrl={"target_kl": 0}), r"kl_ctrl\.target_kl must be a number > 0; got 0"),
        (lambda: AlgorithmConfig(kl_penalty="low_var"), r"kl_penalty must be one of .*Did you mean 'low_var_kl'\?"),
        (
            lambda: load_config(overrides=["rllm.algorithm.kl_ctrl.type=adaptiv"]),
            r"rllm\.algorithm\.kl_ctrl\.type must be .*Did you mean 'adaptive'\?",
        ),
        (
            lambda: load_config(overrides=["rllm.algorithm.kl_ctrl.horizon=-10"]),
            r"rllm\.algorithm\.kl_ctrl\.horizon must be an integer >= 1; got -10",
        ),
    ],
)
def test_bad_kl_in_reward_settings_at_the_python_door(call, message) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)


def _rllm_train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rllm.cli.main",
            "train",
            "rllm.trainer.total_batches=1",
            "rllm.trainer.val_before_train=false",
            "rllm.trainer.test_freq=0",
            "rllm.trainer.logger=[jsonl]",
            f"rllm.trainer.output_dir={tmp_path / 'run'}",
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"RLLM_DISABLED_PLUGINS": "fast", "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"},
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rllm.algorithm.kl_ctrl.type=adaptve", "rllm.algorithm.kl_ctrl.type must be one of fixed, adaptive; got "),
        ("rllm.algorithm.kl_ctrl.horizon=-3", "rllm.algorithm.kl_ctrl.horizon must be an integer >= 1; got -3"),
        ("rllm.algorithm.use_kl_in_reward=true", "rllm.algorithm.use_kl_in_reward=true is not supported by the "),
    ],
)
def test_bad_kl_in_reward_settings_at_the_cli_door(tmp_path: Path, override: str, message: str) -> None:
    done = _rllm_train(tmp_path, override)  # the default backend: embedded
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], done.stderr
    if "adaptve" in override:
        assert "Did you mean 'adaptive'?" in lines[0]
    if "use_kl_in_reward" in override:
        assert "embedded backend" in lines[0]
    assert "Traceback" not in done.stderr


def test_the_embedded_backend_warns_that_the_controller_keys_do_nothing(tmp_path: Path) -> None:
    done = _rllm_train(tmp_path, "rllm.algorithm.kl_ctrl.kl_coef=0.5")
    assert done.returncode == 0, done.stderr
    said = "rllm.algorithm.kl_ctrl.kl_coef=0.5 has no effect without rllm.algorithm.use_kl_in_reward=true"
    assert said in done.stderr
