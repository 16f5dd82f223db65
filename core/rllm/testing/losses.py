"""Conformance checks for a policy loss, run through :func:`rllm.losses.compute_policy_loss` (needs torch).

The batch is float64 with sequences of different lengths, so that the aggregation modes give
different numbers; tolerances are relative 1e-5, so a loss computing in float32 passes. The
expectations come from the loss itself on other inputs (its rows alone, the batch without
padding), never from a formula of the loss: any loss that aggregates by ``ctx.aggregate``
meets them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from rllm.errors import ConformanceError, RLLMError

LENGTHS = (6, 4, 6, 1, 3)
PROMPTS = (0, 0, 1, 2, 2)
"""The prompt each sequence answers (``prompt-mean`` weighs the prompts alike)."""
_INPUT = (
    f"{len(LENGTHS)} sequences x {max(LENGTHS)} tokens (seed 0) of lengths {', '.join(map(str, LENGTHS))}, "
    f"answering prompts {', '.join(map(str, PROMPTS))}"
)
_RTOL = 1e-5


def _inputs(seed: int = 0) -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    shape = (len(LENGTHS), max(LENGTHS))
    old = -torch.rand(shape, generator=generator, dtype=torch.float64) - 0.1
    log_probs = old + 0.05 * torch.randn(shape, generator=generator, dtype=torch.float64)
    mask = (torch.arange(shape[1])[None, :] < torch.tensor(LENGTHS)[:, None]).to(torch.float64)
    advantages = torch.randn(shape, generator=generator, dtype=torch.float64)
    return {
        "log_probs": log_probs,
        "old_log_probs": old,
        "advantages": advantages,
        "response_mask": mask,
        "prompt_ids": torch.tensor(PROMPTS),
    }


def _fail(name: str, prop: str, detail: str, what: str = _INPUT) -> ConformanceError:
    return ConformanceError(f"loss {name!r} breaks '{prop}': {detail}; input: {what}")


def _run(
    name: str, inputs: dict[str, Any], options: Mapping[str, Any], mode: str, prop: str, **counts: Any
) -> tuple[Any, Any, dict[str, float]]:
    """The loss, its gradient with respect to ``log_probs`` (zeros when it has none) and its metrics."""
    import torch

    from rllm.losses import compute_policy_loss

    log_probs = inputs["log_probs"].detach().clone().requires_grad_(True)
    rest = {k: v for k, v in inputs.items() if k != "log_probs"}
    try:
        with torch.random.fork_rng():  # a loss that draws (clip_cov) draws alike on every call
            torch.manual_seed(0)
            loss, metrics = compute_policy_loss(
                name, log_probs=log_probs, **rest, options=dict(options), agg_mode=mode, **counts
            )
    except RLLMError as exc:
        raise _fail(name, prop, f"{type(exc).__name__}: {str(exc).rstrip('.')}") from None
    (grad,) = torch.autograd.grad(loss, log_probs, allow_unused=True)
    return loss.detach(), torch.zeros_like(log_probs) if grad is None else grad, metrics


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_RTOL, abs_tol=_RTOL * 1e-3)


def _modes(name: str) -> tuple[str, ...]:
    from rllm.losses import LOSS_AGG_MODES, loss_entry

    return loss_entry(name).agg_modes or LOSS_AGG_MODES


def check_scalar_gradient(name: str, options: Mapping[str, Any]) -> None:
    """Every accepted mode: a scalar with a finite gradient, 0 on masked tokens, finite metrics."""
    import torch

    inputs = _inputs()
    masked = inputs["response_mask"] == 0
    for mode in _modes(name):
        prop = f"scalar with a finite gradient ({mode})"
        loss, grad, metrics = _run(name, inputs, options, mode, prop)
        if not bool(torch.isfinite(loss)) or not bool(torch.isfinite(grad).all()):
            raise _fail(name, prop, f"loss {float(loss)}, gradient {grad.tolist()}")
        if float(grad.abs().sum()) == 0:
            raise _fail(name, prop, "the gradient is 0 everywhere: the loss does not depend on log_probs")
        if float(grad[masked].abs().max()) > 0:
            raise _fail(name, "masked tokens contribute nothing", f"their gradient is nonzero ({mode})")
        bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
        if bad:
            raise _fail(name, prop, f"metrics {bad} are not finite")


def _padded(inputs: dict[str, Any]) -> dict[str, Any]:
    """The batch with NaN, inf and 1e30 on its padding, two more padded tokens and a fully masked sequence."""
    import torch

    garbage = {"log_probs": math.nan, "old_log_probs": math.inf, "advantages": 1e30, "response_mask": 0.0}
    rows, width = inputs["log_probs"].shape
    padded = {}
    for key, value in inputs.items():
        if key == "prompt_ids":  # the fully masked sequence answers a prompt of its own
            padded[key] = torch.cat([value, value.new_tensor([max(PROMPTS) + 1])])
            continue
        grown = torch.full((rows + 1, width + 2), garbage[key], dtype=value.dtype)
        grown[:rows, :width] = value
        if key != "response_mask":
            grown[:rows, :width] = value.masked_fill(inputs["response_mask"] == 0, garbage[key])
        padded[key] = grown
    return padded


def check_masked_positions(name: str, options: Mapping[str, Any]) -> None:
    """Garbage on masked positions, more padding and a fully masked sequence change neither loss nor gradient."""
    inputs = _inputs()
    padded = _padded(inputs)
    rows, width = inputs["log_probs"].shape
    what = f"{_INPUT}, padded to {width + 2} tokens with NaN/inf/1e30 and a fully masked sequence"
    for mode in _modes(name):
        prop = f"masked tokens contribute nothing ({mode})"
        fixed = {"loss_scale_factor": width} if mode == "seq-mean-token-sum-norm" else {}
        loss, grad, _ = _run(name, inputs, options, mode, prop, **fixed)
        other, other_grad, _ = _run(name, padded, options, mode, prop, **fixed)
        if not _close(float(other), float(loss)):
            raise _fail(name, prop, f"padding moved the loss from {float(loss):.6g} to {float(other):.6g}", what)
        moved = float((other_grad[:rows, :width] - grad).abs().max())
        if not (moved <= _RTOL * max(1.0, float(grad.abs().max()))) or float(other_grad[rows:].abs().sum()) != 0:
            raise _fail(name, prop, "padding changed the gradient", what)


def _weights(mode: str, mask: Any) -> list[float]:
    """How each sequence's loss (the sequence alone as a batch) enters the batch's loss in ``mode``."""
    tokens = mask.sum(dim=-1)
    if mode == "token-sum":
        return [1.0] * len(tokens)
    if mode == "token-mean":
        return (tokens / tokens.sum()).tolist()
    if mode == "prompt-mean":  # a sequence's share of its prompt's tokens, the prompts alike
        of_prompt = {p: sum(t for t, q in zip(LENGTHS, PROMPTS, strict=True) if q == p) for p in PROMPTS}
        return [t / (len(of_prompt) * of_prompt[p]) for t, p in zip(LENGTHS, PROMPTS, strict=True)]
    return [1.0 / len(tokens)] * len(tokens)  # every sequence has a token


def check_modes(name: str, options: Mapping[str, Any]) -> None:
    """Each accepted mode aggregates as its name says.

    On one sequence alone the modes are one per-token sum seen through its token count:
    token-sum = seq-mean-token-sum = token-mean x tokens = seq-mean-token-mean x tokens =
    prompt-mean x tokens = seq-mean-token-sum-norm x width. On the batch (a loss whose
    sequences do not see each other, ``additive``), each mode weighs the sequences' own losses
    as it should: token-mean by their token counts, the seq-mean modes equally, token-sum by 1,
    prompt-mean by their share of their prompt's tokens over the number of prompts.
    """
    from rllm.losses import loss_entry

    inputs = _inputs()
    modes = _modes(name)
    width = inputs["log_probs"].shape[1]
    alone = [{k: v[[row]] for k, v in inputs.items()} for row in range(len(LENGTHS))]
    per_row = {
        mode: [float(_run(name, row, options, mode, "aggregation modes honoured")[0]) for row in alone]
        for mode in modes
    }
    factor = {"token-sum": 1, "seq-mean-token-sum": 1, "seq-mean-token-sum-norm": width}
    for row, tokens in enumerate(LENGTHS):
        sums = {m: per_row[m][row] * factor.get(m, tokens) for m in modes}
        first = next(iter(sums))
        for mode, value in sums.items():
            if not _close(value, sums[first]):
                raise _fail(
                    name,
                    "aggregation modes honoured",
                    f"sequence {row} alone ({tokens} tokens): {mode} gives {per_row[mode][row]:.6g} but {first} "
                    f"gives {per_row[first][row]:.6g}, which are not one token sum seen through {mode}",
                )
    if not loss_entry(name).additive:
        return
    for mode in modes:
        whole = float(_run(name, inputs, options, mode, "aggregation modes honoured")[0])
        expected = sum(w * v for w, v in zip(_weights(mode, inputs["response_mask"]), per_row[mode], strict=True))
        if not _close(whole, expected):
            raise _fail(
                name,
                "aggregation modes honoured",
                f"{mode} gave {whole:.6g}; weighing each sequence's own {mode} loss as {mode} does gives "
                f"{expected:.6g}",
            )


def check_micro_batches(name: str, options: Mapping[str, Any]) -> None:
    """Split into micro-batches told the batch's counts, the losses and gradients add up to the batch's."""
    import torch

    from rllm.losses import prompt_counts

    inputs = _inputs()
    mask = inputs["response_mask"]
    counts = {"batch_num_tokens": float(mask.sum()), "global_batch_size": float(len(LENGTHS))}
    of_prompt, prompts = prompt_counts(mask, inputs["prompt_ids"])
    parts = [[0, 3], [1], [2, 4]]  # prompts 0 and 2 split between micro-batches
    for mode in _modes(name):
        prop = f"micro-batches add up ({mode})"
        loss, grad, _ = _run(name, inputs, options, mode, prop)
        total, summed = 0.0, torch.zeros_like(grad)
        for rows in parts:
            given = dict(counts, prompt_num_tokens=of_prompt[rows], num_prompts=prompts)
            part, part_grad, _ = _run(name, {k: v[rows] for k, v in inputs.items()}, options, mode, prop, **given)
            total += float(part)
            summed[rows] = part_grad
        if not _close(total, float(loss)):
            raise _fail(
                name,
                prop,
                f"micro-batches of sequences {parts}, each given batch_num_tokens={counts['batch_num_tokens']:g} "
                f"and global_batch_size={counts['global_batch_size']:g}, sum to {total:.6g}, the batch gives "
                f"{float(loss):.6g}",
            )
        if float((summed - grad).abs().max()) > _RTOL * max(1.0, float(grad.abs().max())):
            raise _fail(name, prop, f"the gradients of micro-batches {parts} do not add up to the batch's")


def check_empty_batch(name: str, options: Mapping[str, Any]) -> None:
    """A batch whose sequences are all fully masked (a micro-batch of padding rows) gives a finite loss and a zero
    gradient in every mode: a 0 / 0 there would reach the weights as NaN."""
    import torch

    inputs = _inputs()
    inputs["response_mask"] = torch.zeros_like(inputs["response_mask"])
    what = f"{_INPUT}, every token masked"
    for mode in _modes(name):
        prop = f"a fully masked batch is finite ({mode})"
        fixed = {"loss_scale_factor": max(LENGTHS)} if mode == "seq-mean-token-sum-norm" else {}
        loss, grad, _ = _run(name, inputs, options, mode, prop, **fixed)
        if not bool(torch.isfinite(loss)) or float(grad.abs().sum()) != 0:
            raise _fail(
                name,
                prop,
                f"loss {float(loss)}, gradient sum {float(grad.abs().sum())}; "
                "guard every division by a token or sequence count (ctx.aggregate does)",
                what,
            )


SEQUENCE_ADVANTAGES = (1.0, -0.5, -1.5, 2.0, 0.75)
"""One advantage per sequence (as outcome estimators give), both signs, for the direction check."""


def check_direction(name: str, options: Mapping[str, Any]) -> None:
    """On-policy, a gradient step raises the log-probs of positive-advantage tokens and lowers the negatives'.

    The batch's log-probs equal the old ones (ratio 1, inside every clip) and each sequence has one
    advantage: every masked token's gradient must have the opposite sign of its advantage (or be 0).
    A loss whose gradient does not depend on the advantages (cross-entropy) has no direction to keep.
    """
    import torch

    inputs = _inputs()
    inputs["log_probs"] = inputs["old_log_probs"].clone()
    per_sequence = torch.tensor(SEQUENCE_ADVANTAGES, dtype=torch.float64)[:, None]
    inputs["advantages"] = per_sequence.expand_as(inputs["log_probs"]).clone()
    on = inputs["response_mask"] != 0
    what = f"{_INPUT}, log_probs equal to old_log_probs, advantages {list(SEQUENCE_ADVANTAGES)} per sequence"
    for mode in _modes(name):
        prop = f"gradient follows the advantage ({mode})"
        _, grad, _ = _run(name, inputs, options, mode, prop)
        _, flipped, _ = _run(name, dict(inputs, advantages=-inputs["advantages"]), options, mode, prop)
        if torch.allclose(grad, flipped, rtol=_RTOL, atol=0.0):
            return  # the advantages do not enter its gradient
        along = grad * inputs["advantages"]
        worst = float(along[on].max())
        if worst > _RTOL * float(along[on].abs().max()) or float(along[on].sum()) >= 0:
            flat = int(torch.where(on, along, -math.inf).argmax())
            row, col = divmod(flat, along.shape[1])
            raise _fail(
                name,
                prop,
                f"a descent step moves the log-prob of token {col} of sequence {row} (advantage "
                f"{SEQUENCE_ADVANTAGES[row]:g}) against its advantage (gradient {float(grad[row, col]):.6g}); "
                "the loss must fall as the log-probs of positive-advantage tokens rise, e.g. -advantage * ratio",
                what,
            )


LOSS_CHECKS: dict[str, Callable[[str, Mapping[str, Any]], None]] = {
    "direction": check_direction,
    "scalar_gradient": check_scalar_gradient,
    "masked_positions": check_masked_positions,
    "empty_batch": check_empty_batch,
    "modes": check_modes,
    "micro_batches": check_micro_batches,
}
"""Each check of a loss by the id it has in test reports; ``micro_batches`` only for an ``additive`` loss."""


def loss_check_names(name: str) -> list[str]:
    """The checks that apply to loss ``name`` (a loss declared ``additive=False`` is not checked for that)."""
    from rllm.losses import loss_entry

    return [check for check in LOSS_CHECKS if check != "micro_batches" or loss_entry(name).additive]


def check_loss(name: str, options: Mapping[str, Any] | None = None) -> None:
    """Every check that applies to loss ``name``."""
    for check in loss_check_names(name):
        LOSS_CHECKS[check](name, dict(options or {}))
