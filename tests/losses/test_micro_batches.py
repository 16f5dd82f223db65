"""Properties of every built-in loss in every mode it accepts: micro-batches add up, padding is inert.

A batch split into micro-batches, each told the whole batch's token, sequence and prompt counts
(as a backend does), gives losses and gradients that sum to the whole batch's; NaN, inf or huge
values on masked positions of any input change neither. The expectations are the whole
batch's own loss and gradient, and its values with clean padding: no number of the code under
test is taken as the truth for itself.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0+cpu)")

from rllm.losses import LOSS_AGG_MODES, compute_policy_loss, loss_entry, loss_names  # noqa: E402

SELECTION_OFF = {"clip_cov": {"clip_cov_lb": 10.0, "clip_cov_ub": -10.0}, "kl_cov": {"ppo_kl_coef": 0.0}}
"""clip_cov and kl_cov pick tokens by statistics of the micro-batch they see (as verl's do, declared
``additive=False``); with the pick switched off they add up like every other loss."""
OPTIONS = {"dro": {"dro_beta": 0.3}}
LOSSES = [name for name in loss_names() if loss_entry(name).alias_of is None]
CASES = [(name, mode) for name in LOSSES for mode in (loss_entry(name).agg_modes or LOSS_AGG_MODES)]
PROFILE = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def batches(draw: Any) -> dict[str, Any]:
    """A float64 batch of 1-6 rows x 1-7 tokens, right-padded with random lengths (0 allowed), ratios up to e^±3."""
    rows, width = draw(st.integers(1, 6)), draw(st.integers(1, 7))
    seed = draw(st.integers(0, 2**16))
    lengths = torch.tensor(draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows)))
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 3.0 - 0.01
    logp = old + (torch.rand(rows, width, generator=g, dtype=torch.float64) - 0.5) * 6.0
    return {
        "log_probs": logp.clamp(max=-1e-3),
        "old_log_probs": old,
        "advantages": torch.randn(rows, width, generator=g, dtype=torch.float64),
        "response_mask": (torch.arange(width)[None, :] < lengths[:, None]).to(torch.float64),
        "rollout_log_probs": old + 0.3 * torch.randn(rows, width, generator=g, dtype=torch.float64),
        "ref_log_probs": old - 0.2 * torch.rand(rows, width, generator=g, dtype=torch.float64),
        "prompt_ids": torch.tensor(draw(st.lists(st.integers(0, 2), min_size=rows, max_size=rows))),
    }


def whole_batch_prompt_counts(data: dict[str, Any]) -> dict[str, Any]:
    """Each row's prompt's response tokens over the whole batch, and the prompts with a token (by loops)."""
    tokens = [int(t) for t in data["response_mask"].sum(-1)]
    prompts = [int(p) for p in data["prompt_ids"]]
    of_prompt = {p: sum(t for t, q in zip(tokens, prompts, strict=True) if q == p) for p in prompts}
    return {
        "prompt_num_tokens": torch.tensor([float(of_prompt[p]) for p in prompts]),
        "num_prompts": float(sum(1 for t in of_prompt.values() if t > 0)),
    }


def run(name: str, mode: str, data: dict[str, Any], rows: Any = None, **counts: Any) -> tuple[float, Any]:
    """The loss (with a KL term and token-level rollout correction) of ``rows`` and d loss / d log_probs."""
    picked = {k: v if rows is None else v[rows] for k, v in data.items()}
    if rows is not None and "prompt_num_tokens" in counts:  # one per row: the micro-batch's rows
        counts = dict(counts, prompt_num_tokens=counts["prompt_num_tokens"][rows])
    logp = picked.pop("log_probs").clone().requires_grad_(True)
    torch.manual_seed(0)
    loss, metrics = compute_policy_loss(
        name,
        log_probs=logp,
        **picked,
        options={**OPTIONS.get(name, {}), **SELECTION_OFF.get(name, {})},
        agg_mode=mode,
        kl_coef=0.1,
        tis_mode="token",
        **counts,
    )
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    (grad,) = torch.autograd.grad(loss, logp, allow_unused=True)
    return float(loss.detach()), torch.zeros_like(logp) if grad is None else grad


@pytest.mark.parametrize(("name", "mode"), CASES)
@PROFILE
@given(data=batches(), cuts=st.lists(st.integers(1, 5), max_size=3), order=st.randoms(use_true_random=False))
def test_micro_batches_add_up_to_the_whole_batch(name: str, mode: str, data: dict[str, Any], cuts, order) -> None:
    """Loss and gradient of the whole batch = the sums over any split of its rows, given the batch's counts."""
    whole, whole_grad = run(name, mode, data)
    rows = data["response_mask"].shape[0]
    shuffled = list(range(rows))
    order.shuffle(shuffled)  # micro-batches need not be contiguous, nor equal in size
    bounds = sorted({min(c, rows) for c in cuts} | {0, rows})
    parts = [torch.tensor(shuffled[a:b]) for a, b in itertools.pairwise(bounds)]
    mask = data["response_mask"]
    counts = {"batch_num_tokens": float(mask.sum()), "global_batch_size": float((mask.sum(-1) > 0).sum())}
    counts = {k: v for k, v in counts.items() if v > 0}  # a batch without tokens has nothing to divide by
    counts.update(whole_batch_prompt_counts(data))
    total, grad = 0.0, torch.zeros_like(whole_grad)
    for part in parts:
        loss, part_grad = run(name, mode, data, part, **counts)
        total += loss
        grad[part] = part_grad
    scale = max(1.0, abs(whole))
    assert total == pytest.approx(whole, abs=1e-9 * scale)
    assert float((grad - whole_grad).abs().max()) <= 1e-9 * max(1.0, float(whole_grad.abs().max()))


GARBAGE = [math.nan, math.inf, -math.inf, 1e30]


@pytest.mark.parametrize(("name", "mode"), CASES)
@PROFILE
@given(data=batches(), junk=st.lists(st.sampled_from(GARBAGE), min_size=5, max_size=5))
def test_garbage_on_padding_changes_nothing(name: str, mode: str, data: dict[str, Any], junk: list[float]) -> None:
    """NaN/inf/1e30 on the masked positions of every input: the same finite loss, the same gradient, 0 on padding."""
    clean_loss, clean_grad = run(name, mode, data)
    masked = data["response_mask"] == 0
    dirty = dict(data)
    inputs = ("log_probs", "old_log_probs", "advantages", "rollout_log_probs", "ref_log_probs")
    for key, value in zip(inputs, junk, strict=True):
        dirty[key] = data[key].masked_fill(masked, value)
    loss, grad = run(name, mode, dirty)
    assert math.isfinite(loss) and bool(torch.isfinite(grad).all())
    assert loss == clean_loss
    assert torch.equal(grad, clean_grad) and float(grad[masked].abs().sum()) == 0.0


def test_the_losses_that_pick_by_micro_batch_statistics_say_so() -> None:
    assert sorted(n for n in LOSSES if not loss_entry(n).additive) == sorted(SELECTION_OFF)
