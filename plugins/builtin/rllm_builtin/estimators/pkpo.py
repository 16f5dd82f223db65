"""PKPO (Walder & Karkhanis 2025, "Pass@k Policy Optimization"): train for the best of k samples.

With n rollouts of a task and rewards g, sorted ascending (g_0 <= ... <= g_{n-1}), the
unbiased estimate of the expected best reward among k of them is
``rho = sum_p C(p, k-1) g_p / C(n, k)``: the p-th smallest is the best of a k-subset in
``C(p, k-1)`` of the ``C(n, k)`` subsets. Each rollout's gradient weight is its share of
those subsets' best rewards, ``s_p = (g_p C(p, k-1) + sum_{q>p} g_q C(q-1, k-2)) / C(n, k)``,
minus a leave-one-out baseline ``(k/n) rho(others)``, which keeps the estimate unbiased
and lowers its variance. ``k=1`` gives ``(r_i - mean of the others) / n``.
"""

from __future__ import annotations

from math import lgamma

import numpy as np

from rllm.errors import GroupError
from rllm.toolkit import AdvantageBatch, FloatArray, Numerics, rewards_as


def pkpo(batch: AdvantageBatch, *, pass_at_k: int, numerics: Numerics) -> FloatArray:
    """PKPO (Walder & Karkhanis 2025): per-rollout weights whose policy gradient is unbiased for pass@k.

    Every group needs at least ``pass_at_k`` rollouts. Binary rewards give pass@k; other
    rewards the expected best of k.
    """
    layout = batch.layout
    xs = rewards_as(batch, numerics)
    sizes = layout.sizes
    if len(sizes) and sizes.min() < pass_at_k:
        first = layout.label(int(np.flatnonzero(sizes < pass_at_k)[0]))
        raise GroupError(
            f"Estimator 'pkpo' with pass_at_k={pass_at_k} needs at least {pass_at_k} rollouts per group; group "
            f"{first!r} has {int(sizes.min())}. Sample more rollouts per task or lower pass_at_k."
        )
    advantages = np.zeros(len(xs), dtype=xs.dtype)
    grouped_order = layout.order
    for n in np.unique(sizes).tolist():  # one vectorized pass per distinct group size, not per group
        groups = np.flatnonzero(sizes == n)
        members = layout.starts[groups][:, None] + np.arange(n)
        positions = members if grouped_order is None else grouped_order[members]
        advantages[positions] = _weights(xs[positions].astype(np.float64), pass_at_k)
    return advantages


def _weights(rewards: np.ndarray, k: int) -> np.ndarray:
    """PKPO weights with the leave-one-out baseline for rows of ``n`` rewards each."""
    n = rewards.shape[1]
    order = np.argsort(rewards, axis=1, kind="stable")
    g = np.take_along_axis(rewards, order, axis=1)  # ascending per row
    p = np.arange(n)
    # s_p = (g_p C(p, k-1) + sum_{q>p} g_q C(q-1, k-2)) / C(n, k)
    own = g * _ratio(p, k - 1, n, k)
    later = g * _ratio(p - 1, k - 2, n, k)
    after = np.cumsum(later[:, ::-1], axis=1)[:, ::-1] - later  # sum over q > p
    s = own + after
    # Leave-one-out baseline (k/n) rho(others), rho over the n-1 others sorted: rank q if q < p, q-1 if q > p.
    if n - 1 >= k:
        before_terms = g * _ratio(p, k - 1, n - 1, k)  # others below p keep their rank
        after_terms = g * _ratio(p - 1, k - 1, n - 1, k)  # others above p move down one rank
        below = np.cumsum(before_terms, axis=1) - before_terms
        above = np.cumsum(after_terms[:, ::-1], axis=1)[:, ::-1] - after_terms
        s = s - (k / n) * (below + above)
    out = np.empty_like(s)
    np.put_along_axis(out, order, s, axis=1)
    return out


def _ratio(top: np.ndarray, choose: int, n: int, k: int) -> np.ndarray:
    """``C(top, choose) / C(n, k)`` elementwise (0 where ``top < choose`` or ``choose < 0``), via log-gamma."""
    out = np.zeros(len(top))
    if choose < 0:
        return out
    valid = top >= choose
    log_denominator = lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1)
    for i in np.flatnonzero(valid).tolist():  # n terms per group size, not per group
        t = int(top[i])
        out[i] = np.exp(lgamma(t + 1) - lgamma(choose + 1) - lgamma(t - choose + 1) - log_denominator)
    return out
