"""verl's advantage estimators inside rllm, as ``verl.<name>``, when verl is installed.

The names are known without importing verl, so ``import rllm`` and ``rllm estimators`` stay
free of torch; verl is imported when such an estimator first runs. Each call turns the flat
rewards into verl's token-level tensors (one reward on the last token of each response, whose
length is ``response_lengths`` when the estimator uses it and 1 otherwise), the group labels into
verl's ``index``, runs verl's registered function, and reads one advantage per response (or, for
verl's per-token estimators, one per step) back.

This entry point also carries ``rllm.backend=verl`` and its ``rllm.verl`` section
(:mod:`rllm_verl.backend_keys`, whose hooks are imported here).

verl's ``optimal_token_baseline``, ``tir_optimal_token_baseline`` (they need the policy's
per-token ``sum_pi_squared`` and log-probabilities) and ``gdpo`` (it reads reward components from
verl's own batch layout) are not offered: an rllm batch has no such inputs.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

import rllm
from rllm.plugins import EstimatorRegistrar
from rllm.toolkit import AdvantageBatch, FloatArray, Option, Ragged
from rllm_verl.backend_keys import rllm_register_backends, rllm_register_config_sections  # noqa: F401

if TYPE_CHECKING:
    import torch

PREFIX = "verl."
NORM_BY_STD = Option("norm_adv_by_std_in_grpo", (bool,), True, "divide by the group std (verl's GRPO switch)")
EPSILON = Option("epsilon", (float,), 1e-6, "added to the group std before dividing (verl's default)", minimum=0.0)
GAMMA = Option("gamma", (float,), 1.0, "discount over tokens (verl's algorithm.gamma)", minimum=0.0)
LAM = Option("lam", (float,), 1.0, "GAE lambda (verl's algorithm.lam)", minimum=0.0)


@dataclass(frozen=True)
class VerlEstimator:
    """One of verl's estimators: its registry name, what it reads, its options, one line of doc."""

    name: str
    doc: str
    per: Literal["response", "token"] = "response"
    requires: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()
    uses_lengths: bool = False
    """Outcome estimators whose result depends on response lengths get them (when given) as masks."""


VERL_ESTIMATORS: tuple[VerlEstimator, ...] = (
    VerlEstimator("grpo", "verl's GRPO (per-group loop, unbiased std)", options=(NORM_BY_STD, EPSILON)),
    VerlEstimator("grpo_vectorized", "verl's vectorized GRPO (torch)", options=(NORM_BY_STD, EPSILON)),
    VerlEstimator(
        "grpo_passk", "verl's pass@k GRPO: best of each group over the runner-up", options=(NORM_BY_STD, EPSILON)
    ),
    VerlEstimator("rloo", "verl's RLOO (per-group loop)"),
    VerlEstimator("rloo_vectorized", "verl's vectorized RLOO (torch)"),
    VerlEstimator("opo", "verl's OPO: length-weighted group baseline", requires=("response_lengths",)),
    VerlEstimator("gpg", "verl's GPG"),
    VerlEstimator(
        "reinforce_plus_plus_baseline",
        "verl's REINFORCE++ with group baseline, whitened over tokens",
        uses_lengths=True,
    ),
    VerlEstimator("remax", "verl's ReMax: reward minus the greedy rollout's", requires=("baseline_rewards",)),
    VerlEstimator(
        "reinforce_plus_plus",
        "verl's REINFORCE++: discounted token returns, whitened",
        per="token",
        requires=("step_rewards",),
        options=(GAMMA,),
    ),
    VerlEstimator(
        "gae",
        "verl's GAE over tokens, whitened",
        per="token",
        requires=("step_rewards", "step_values"),
        options=(GAMMA, LAM),
    ),
)
"""verl 0.9's estimators that an rllm batch can feed (tests compare this list with verl's registry)."""


def verl_installed() -> bool:
    """Whether verl can be imported, found without importing it.

    A folder named ``verl`` on the path (``tests/verl`` when pytest runs) is a namespace
    package with no origin, not verl.
    """
    spec = importlib.util.find_spec("verl")
    return spec is not None and spec.origin is not None


def rllm_inactive_reason() -> str | None:
    """Why this plugin registers nothing (``rllm plugins`` shows it), or None when it works."""
    return None if verl_installed() else "verl is not installed, so its estimators are not offered (pip install verl)"


@rllm.hookimpl
def rllm_register_estimators(register: EstimatorRegistrar) -> None:
    if not verl_installed():
        return
    for spec in VERL_ESTIMATORS:
        register(PREFIX + spec.name, make_estimator(spec), style="batch", requires=spec.requires, options=spec.options)


def make_estimator(spec: VerlEstimator) -> Callable[..., FloatArray | Ragged]:
    """An rllm batch-style estimator that runs verl's registered estimator ``spec.name``."""

    def estimator(batch: AdvantageBatch, **options: Any) -> FloatArray | Ragged:
        return run_verl(spec, batch, options)

    estimator.__name__ = estimator.__qualname__ = f"verl_{spec.name}"
    estimator.__doc__ = spec.doc
    return estimator


def run_verl(spec: VerlEstimator, batch: AdvantageBatch, options: dict[str, Any]) -> FloatArray | Ragged:
    """verl's ``spec.name`` on ``batch``: flat arrays to verl's tensors and back."""
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    fn = get_adv_estimator_fn(spec.name)
    if spec.per == "token":
        steps: Ragged = batch.step_rewards
        rewards, mask = _padded(steps)
        values = _padded(batch.step_values)[0] if "step_values" in spec.requires else None
    else:
        lengths = batch.response_lengths if spec.uses_lengths or "response_lengths" in spec.requires else None
        rewards, mask = _outcome(np.asarray(batch.rewards), lengths)
        values = None
    inputs: dict[str, Any] = {
        "token_level_rewards": rewards,
        "response_mask": mask,
        "index": batch.layout.group_index,
        "config": OmegaConf.create(dict(options)),
        "values": values,
        "reward_baselines": None
        if batch.baseline_rewards is None
        else torch.as_tensor(np.array(batch.baseline_rewards, dtype=np.float32)),
        **options,
    }
    parameters = inspect.signature(fn).parameters
    with torch.no_grad():
        advantages, _ = fn(**{k: v for k, v in inputs.items() if k in parameters and v is not None})
    if spec.per == "token":
        return Ragged(values=advantages[mask.bool()].numpy(), offsets=batch.step_rewards.offsets)
    return advantages[:, 0].numpy()  # an outcome estimator gives every token of a response the same value


def _outcome(rewards: FloatArray, lengths: FloatArray | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level rewards with each reward on its response's last token, and the response mask."""
    import torch

    scores = torch.as_tensor(np.array(rewards, dtype=np.float32))
    if lengths is None:
        return scores.unsqueeze(-1), torch.ones((len(scores), 1), dtype=torch.float32)
    ends = torch.as_tensor(np.maximum(np.asarray(lengths, dtype=np.int64), 1))
    positions = torch.arange(int(ends.max()))
    mask = (positions.unsqueeze(0) < ends.unsqueeze(-1)).to(torch.float32)
    token_rewards = torch.zeros_like(mask)
    token_rewards[torch.arange(len(scores)), ends - 1] = scores
    return token_rewards, mask


def _padded(rows: Ragged) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged per-step values as a right-padded ``(rows, longest)`` tensor and its mask."""
    import torch

    lengths = torch.as_tensor(rows.lengths.astype(np.int64))
    mask = torch.arange(int(lengths.max()) if len(lengths) else 0).unsqueeze(0) < lengths.unsqueeze(-1)
    padded = torch.zeros(mask.shape, dtype=torch.float32)
    padded[mask] = torch.as_tensor(np.array(rows.values, dtype=np.float32))
    return padded, mask.to(torch.float32)
