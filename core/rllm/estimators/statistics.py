"""Statistics estimators are built from: group centring and scaling, batch whitening, step returns.

Everything works on flat arrays in input order with the segment operations of
:class:`rllm.estimators.batch.GroupLayout`, so no estimator loops over groups in Python. Variances are
always computed from centred values (two passes), which keeps tiny spreads exact in float32.
Estimator authors reach these through :mod:`rllm.toolkit`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from rllm.errors import GroupError, RewardError, RLLMWarning
from rllm.estimators import acceleration
from rllm.estimators.batch import AdvantageBatch
from rllm.estimators.layout import GroupLayout
from rllm.estimators.numerics import PRESETS, Numerics
from rllm.estimators.ragged import FloatArray, Ragged


def rewards_as(batch: AdvantageBatch, numerics: Numerics, values: Any = None) -> FloatArray:
    """``values`` (default: the rewards) in the numerics dtype; may be the caller's array, so never write into it."""
    source = np.asarray(batch.rewards if values is None else values)
    if source.dtype.itemsize <= numerics.np_dtype.itemsize:
        return source.astype(numerics.np_dtype, copy=False)
    with np.errstate(over="ignore"):
        narrowed = source.astype(numerics.np_dtype)
        if np.isfinite(np.add.reduce(narrowed, dtype=np.float64)) or not np.isfinite(source).all():
            return narrowed
    limit = np.finfo(numerics.np_dtype).max
    raise RewardError(
        f"Some values exceed {numerics.dtype}'s range (about {limit:.1e}) and would become infinite; "
        "rescale the rewards or use dtype='float64'."
    )


def lone_groups(layout: GroupLayout, numerics: Numerics, estimator: str) -> np.ndarray | None:
    """Per-group mask of groups of one (None when there are none); refuses them under ``single="error"``."""
    if layout.uniform_size is not None and layout.uniform_size > 1:
        return None
    lone = layout.sizes == 1
    if not lone.any():
        return None
    if numerics.single == "error":
        first = layout.label(int(np.flatnonzero(lone)[0]))
        raise GroupError(
            f"Estimator {estimator!r}: group {first!r} has a single trajectory ({int(lone.sum())} such groups). "
            "Sample at least two rollouts per task, drop such groups (rejection sampling), or choose "
            "single='raw' or single='zero'."
        )
    return lone


def group_means(layout: GroupLayout, xs: FloatArray, lone: np.ndarray | None, numerics: Numerics) -> FloatArray:
    """Per-group means; a group of one has baseline 0 under ``single="raw"`` (else its own reward).

    Narrower floats are summed in float64 and the mean rounded once: a float32 running sum of a
    uniform group of non-dyadic rewards (0.7, 1/3) drifts from the mean by a rounding residue,
    which ``std + eps`` would turn into large advantages of one sign.
    """
    k = layout.uniform_size
    with np.errstate(over="ignore"):
        sums = layout.sum(xs, dtype=np.float64)  # added in float64 without a full-size converted copy
    if not np.isfinite(sums).all():  # the sum overflowed: average scaled values (a power of two, exact)
        scale = _power_of_two_above(float(np.max(np.abs(xs))))
        return group_means(layout, xs / scale, lone, numerics) * scale
    means = (sums / (k if k is not None else layout.sizes)).astype(xs.dtype, copy=False)
    if lone is not None and numerics.single == "raw":
        means[lone] = 0.0
    return means


def accelerated_centre(
    batch: AdvantageBatch, xs: FloatArray, numerics: Numerics, mode: int, estimator: str
) -> FloatArray | None:
    """A kernel plugin's ``group_centre`` result for the batch's contiguous groups, or None: use numpy.

    The kernels apply the ``raw`` and ``zero`` policies for groups of one themselves, so group
    sizes are only inspected (which may cost a pass over the labels) under ``single="error"``.
    Rewards so large that squaring them overflows (``batch.large_values``) take the numpy
    path, which scales before squaring.
    """
    layout = batch.layout
    if layout.codes is not None or batch.large_values:
        return None
    fast = layout.kernels.get(acceleration.GROUP_CENTRE)
    if fast is None:
        return None
    if numerics.single == "error":
        lone_groups(layout, numerics, estimator)
    result: FloatArray | None = fast(xs, layout, mode, numerics)
    return result


def centre(
    layout: GroupLayout, xs: FloatArray, lone: np.ndarray | None, numerics: Numerics
) -> tuple[FloatArray, FloatArray]:
    """A fresh array of ``xs`` minus its group baseline, and the per-group baselines."""
    means = group_means(layout, xs, lone, numerics)
    out = layout.spread(means)  # a fresh array that becomes the result: one large allocation, not two
    return np.subtract(xs, out, out=out), means


def group_std(layout: GroupLayout, centred: FloatArray, numerics: Numerics) -> FloatArray:
    """Per-group std from centred values (population or unbiased by ``numerics.std``)."""
    k = layout.uniform_size
    squares = layout.sum_sq(centred)
    if not np.isfinite(squares).all():  # squaring overflowed: scale by a power of two first (exact)
        scale = _power_of_two_above(float(np.max(np.abs(centred))))
        return group_std(layout, centred / scale, numerics) * scale
    if k is not None:
        return np.sqrt(squares / max(k - numerics.ddof, 1))
    return np.sqrt(squares / np.maximum(layout.sizes - numerics.ddof, 1).astype(centred.dtype))


def inverse_scale(
    std: FloatArray, means: FloatArray, layout: GroupLayout, lone: np.ndarray | None, numerics: Numerics
) -> FloatArray:
    """``1 / (std + eps)`` per group; std 1 for groups of one, 0 for constant groups under ``zero_variance="zero"``."""
    if lone is not None:
        std[lone] = 1.0
    with np.errstate(divide="ignore"):
        scale = 1.0 / (std + numerics.eps)
    if numerics.zero_variance == "zero":
        scale[constant_groups(std, means, layout)] = 0.0
    return scale


def constant_groups(std: FloatArray, means: FloatArray, layout: GroupLayout) -> np.ndarray:
    """Groups whose spread is within the rounding of their mean, i.e. all rewards equal."""
    tolerance = np.finfo(std.dtype).eps * np.abs(means) * layout.sizes
    return std <= tolerance


def normalise_groups(
    batch: AdvantageBatch, xs: FloatArray, numerics: Numerics, estimator: str, by_std: bool
) -> FloatArray:
    """``xs`` centred by group mean and, with ``by_std``, divided by ``std + eps`` per group (GRPO's core)."""
    layout = batch.layout
    mode = acceleration.DIVIDE_BY_STD if by_std else acceleration.CENTRE
    done = accelerated_centre(batch, xs, numerics, mode, estimator)
    if done is not None:
        return done
    lone = lone_groups(layout, numerics, estimator)
    centred, means = centre(layout, xs, lone, numerics)
    if by_std:
        scale = inverse_scale(group_std(layout, centred, numerics), means, layout, lone, numerics)
        with np.errstate(invalid="ignore"):  # 0 * inf (eps=0, constant group) is NaN; the output check names it
            layout.scale(centred, scale)
    return centred


def whiten(values: FloatArray, numerics: Numerics, shift: bool = True, weights: FloatArray | None = None) -> FloatArray:
    """Batch whitening in the style ``numerics.whiten`` names, in place (``values`` must be fresh).

    ``shift=False`` keeps the batch mean under ``whiten="std"`` (rLLM's REINFORCE++ baseline,
    whose input is already centred per group); the variance modes always subtract it.
    ``weights`` (see :func:`whitening_weights`) count value i ``weights[i]`` times in the mean
    and the variance, whose n - 1 correction then counts weights: one value per response
    standing for all its tokens, as verl's ``masked_whiten`` sees them.
    """
    if len(values) == 0:
        return values
    if weights is None:
        mean = values.dtype.type(values.mean(dtype=np.float64))  # a float32 sum drifts (see group_means)
    else:
        mean = values.dtype.type(np.einsum("i,i->", weights, values, dtype=np.float64) / weights.sum())
    std = batch_std(values, mean, 1 if (numerics.whiten_std or numerics.std) == "unbiased" else 0, weights)
    eps = numerics.eps if numerics.whiten_eps is None else numerics.whiten_eps
    if numerics.whiten == "std":
        denominator = std + eps
    else:
        shift = True
        # sqrt(var + eps) or sqrt(max(var, eps)), without squaring a std so large that its square overflows
        if std > 1e150:
            denominator = std
        else:
            denominator = np.sqrt(std * std + eps) if numerics.whiten == "var_add" else np.sqrt(max(std * std, eps))
    if shift:
        values -= mean
    values *= 1.0 / denominator if denominator > 0 else 0.0
    return values


_warned_fallbacks: set[tuple[str, str]] = set()
"""(estimator, preset or option) pairs already warned that token whitening fell back to responses."""


def whitening_weights(batch: AdvantageBatch, numerics: Numerics, estimator: str) -> FloatArray | None:
    """The response lengths that weight a per-trajectory whitening under ``whiten_weight="tokens"``, else None.

    Without lengths (or when every length is 0, e.g. trajectories without token ids) the
    whitening counts responses, and the first such call per estimator and preset warns,
    since the numbers then differ from the peer's that whitens over tokens.
    """
    if numerics.whiten_weight != "tokens":
        return None
    lengths = getattr(batch, "response_lengths", None)
    if lengths is not None:  # finite and >= 0: checked where the batch takes them
        lengths = np.asarray(lengths, dtype=np.float64)
        if lengths.sum() > 0:
            return lengths
    preset = PRESETS.get(numerics.preset or "")
    source = f"preset {numerics.preset!r}" if preset and preset.whiten_weight == "tokens" else "whiten_weight='tokens'"
    if (estimator, source) not in _warned_fallbacks:
        _warned_fallbacks.add((estimator, source))
        warnings.warn(
            f"Estimator {estimator!r} under {source} whitens over tokens, but the batch has no response "
            "lengths: it falls back to response-level whitening (each response counted once). Pass "
            "response_lengths (token counts), or set whiten_weight='responses' to choose that.",
            RLLMWarning,
            stacklevel=2,
        )
    return None


_CHUNK = 1 << 15


def batch_std(values: FloatArray, mean: float, ddof: int, weights: FloatArray | None = None) -> float:
    """Standard deviation of all ``values`` about ``mean`` (0 when there are too few), computed in chunks.

    Two passes (the mean is given), no full-size temporary for the deviations, and values so
    large that their squares overflow are scaled by a power of two first (exact). With
    ``weights`` value i counts ``weights[i]`` times, the divisor being ``sum(weights) - ddof``.
    """
    count = len(values) if weights is None else float(weights.sum())
    if count <= ddof:
        return 0.0
    buffer = np.empty(min(len(values), _CHUNK), dtype=values.dtype)
    total = 0.0
    with np.errstate(over="ignore"):
        for start in range(0, len(values), _CHUNK):  # a loop over fixed-size chunks, not groups
            part = values[start : start + _CHUNK]
            deviations = np.subtract(part, mean, out=buffer[: len(part)])
            if weights is None:
                total += float(np.einsum("i,i->", deviations, deviations))
            else:
                chunk_weights = weights[start : start + _CHUNK]
                total += float(np.einsum("i,i,i->", deviations, deviations, chunk_weights, dtype=np.float64))
    if not np.isfinite(total) and np.isfinite(mean):
        scale = _power_of_two_above(float(np.max(np.abs(values - mean))))
        return batch_std(values / scale, mean / scale, ddof, weights) * scale
    return float(np.sqrt(total / (count - ddof)))


def _power_of_two_above(value: float) -> float:
    """A power of two near ``value`` (dividing by it is exact and brings ``value`` into [1, 2))."""
    if not value > 0 or not math.isfinite(value):
        return 1.0
    return math.ldexp(1.0, math.frexp(value)[1] - 1)


def suffix_discounted(rows: Ragged, factor: float) -> FloatArray:
    """``out_t = x_t + factor * out_{t+1}`` within every row (a discounted return-to-go).

    Vectorized over rows; the loop runs over positions counted from a row's end, so its
    length is the longest row (steps per trajectory), never the number of rows.
    """
    values = rows.values
    out = values.copy()
    lengths = rows.lengths
    if len(out) == 0 or factor == 0:
        return out
    to_end = np.repeat(rows.offsets[1:] - 1, lengths) - np.arange(len(out))
    order = np.argsort(to_end, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(to_end))))
    for distance in range(1, len(bounds) - 1):
        at = order[bounds[distance] : bounds[distance + 1]]
        out[at] += factor * out[at + 1]
    return out
