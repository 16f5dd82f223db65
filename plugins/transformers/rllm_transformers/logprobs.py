"""Each next token's log-prob under a causal LM, in chunks of positions: never the whole ``[rows, tokens, vocab]``.

At a real vocabulary (Qwen's 151,936) the logits of a batch are its largest tensor: 8 rows of
2,048 tokens are 10 GB in float32, and a log-softmax, its exp and an entropy each as much again.
:func:`score_tokens` takes the hidden states the model feeds its output layer (a hook on that
layer captures them and hands it nothing to project), then projects, normalises and picks the
chosen token's log-prob a chunk of positions at a time; the backward pass recomputes each chunk's
logits from the hidden states instead of keeping them. The entropy and the sum of squared
probabilities are computed only when asked for (a loss's entropy bonus, a metric, an estimator's
per-token field). Per position the arithmetic is the full pass's (a float32 log-softmax of the
logits), so the numbers are those of ``log_softmax(logits).gather(...)``.

Models whose logits are more than a linear map of those hidden states (a logit scale or soft
cap in their config), whose output layer is not an ``nn.Linear`` (an adapter on it) or whose
weights are sharded (FSDP) are scored from the logits the model returns, still chunked after it.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from rllm.errors import TrainerError
from rllm_transformers.precision import compute_dtype
from rllm_transformers.prefixes import forward_shared, shares_prefixes

CHUNK_ELEMENTS = 1 << 25
"""Logits per chunk (rows x vocabulary): 128 MB in float32, about 220 positions at a vocabulary of 151,936."""
SCALED_LOGITS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")
"""Config fields of models that transform ``lm_head``'s output before the softmax: scored from the model's logits."""


@dataclass(frozen=True)
class TokenScores:
    """Per position ``[rows, tokens - 1]`` (0 before ``start`` and where the next token is padding): the next token's
    log-prob, and when asked the entropy and the sum of squared probabilities of the position's distribution."""

    log_probs: torch.Tensor
    entropy: torch.Tensor | None = None
    sum_pi_squared: torch.Tensor | None = None


def score_tokens(
    model: Any,
    ids: torch.Tensor,
    attention: torch.Tensor,
    start: int = 0,
    *,
    entropy: bool = False,
    entropy_grad: bool = False,
    squares: bool = False,
    share_prompts: bool = False,
) -> TokenScores:
    """The log-prob of each next token of ``ids`` from position ``start`` on (the batch's first response token).

    ``entropy_grad`` gives the entropy a gradient (an entropy bonus in the loss); ``entropy``
    computes it without one (a metric, a loss that selects tokens by it); ``squares`` the sum
    of squared probabilities (verl's ``sum_pi_squared``). Where the model takes ``logits_to_keep``
    no logits are computed before ``start``. ``share_prompts`` (``rllm.transformers.share_prompts``)
    runs rows' common first ``start`` tokens once, through a KV cache
    (:func:`~rllm_transformers.prefixes.forward_shared`); else no cache is built.
    """
    rows, width = ids.shape
    start = min(max(start, 0), max(width - 1, 0))
    positions = width - 1 - start
    valid = attention[:, start + 1 :] != 0  # a padding position's value is 0
    if positions <= 0:  # rows of one token: nothing to score, nothing to run
        nothing = torch.zeros((rows, max(width - 1, 0)), device=ids.device)
        wanted = entropy or entropy_grad
        return TokenScores(nothing, nothing.clone() if wanted else None, nothing.clone() if squares else None)
    # the last column is only ever a target: no scored position reads it (a causal model), so it is not run
    return _score(
        model,
        ids[:, : width - 1],
        attention[:, : width - 1],
        start,
        ids[:, start + 1 :],
        valid,
        entropy=entropy,
        entropy_grad=entropy_grad,
        squares=squares,
        share_prompts=share_prompts,
    )


def score_targets(model: Any, ids: torch.Tensor, attention: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each position's log-prob of its own target, ``log p(targets[:, t] | ids[:, : t + 1])``, as ``[rows, width]``
    (0 on padding): the Tinker API's datums, whose target at a position may be any token, not only the next input.

    Chunked as :func:`score_tokens` is, so no ``[rows, width, vocab]`` tensor exists at any vocabulary.
    """
    if ids.numel() == 0:
        return torch.zeros(ids.shape, device=ids.device)
    return _score(model, ids, attention, 0, targets, attention != 0).log_probs


def _score(
    model: Any,
    ids: torch.Tensor,
    attention: torch.Tensor,
    start: int,
    targets: torch.Tensor,
    valid: torch.Tensor,
    *,
    entropy: bool = False,
    entropy_grad: bool = False,
    squares: bool = False,
    share_prompts: bool = False,
) -> TokenScores:
    """Positions ``start`` to the last of ``ids`` through the model, each scored against its column of ``targets``
    (``[rows, positions]``), placed after ``start`` zeros with ``valid``'s zeros on padding."""
    rows, width = ids.shape
    positions = width - start
    head = _plain_head(model)
    options: dict[str, Any] = {"use_cache": False}
    keeps = _keeps_logits(model)
    if keeps:  # only the scored positions' logits
        options["logits_to_keep"] = torch.arange(start, width, device=ids.device)
    if head is not None:
        with _captured_input(head) as captured:
            shared = share_prompts and keeps and shares_prefixes(model, rows, width, start)
            if not (shared and forward_shared(model, ids, attention, start)):
                model(input_ids=ids, attention_mask=attention, **options)
        if not captured:
            name = type(getattr(model, "module", model)).__name__
            raise TrainerError(f"{name}'s forward did not call its output layer (get_output_embeddings()).")
        hidden = captured[-1] if keeps else captured[-1][:, start:]
        inputs, weight, bias = hidden.reshape(rows * positions, -1), head.weight, head.bias
    else:
        logits = model(input_ids=ids, attention_mask=attention, **options).logits
        logits = logits if keeps else logits[:, start:]
        inputs, weight, bias = logits.reshape(rows * positions, -1), None, None
    picked = targets.reshape(-1)
    dtype = compute_dtype(model, inputs if weight is None else weight)
    vocab = int(inputs.shape[-1] if weight is None else weight.shape[0])
    chunk = max(1, CHUNK_ELEMENTS // max(vocab, 1))
    wanted = 2 if entropy_grad and torch.is_grad_enabled() else int(entropy or entropy_grad)
    if torch.is_grad_enabled() and (inputs.requires_grad or (weight is not None and weight.requires_grad)):
        outputs = _ChunkedScores.apply(inputs, weight, bias, picked, chunk, dtype, wanted, squares)
    else:
        outputs = _scores(inputs, weight, bias, picked, chunk, dtype, wanted, squares)[:3]
    chosen, entropies, sums = outputs
    return TokenScores(
        _placed(chosen, valid, start),
        _placed(entropies, valid, start) if wanted else None,
        _placed(sums, valid, start) if squares else None,
    )


def _placed(values: torch.Tensor, valid: torch.Tensor, start: int) -> torch.Tensor:
    """Every scored position's value at its place in the row (``[rows, start + scored positions]``): 0 before ``start``
    and on padding.

    Padding positions are scored with the others and zeroed here: no shape depends on the data.
    """
    placed = values.view(valid.shape).masked_fill(~valid, 0.0)
    return torch.nn.functional.pad(placed, (start, 0))


def _keeps_logits(model: Any) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (transformers' causal LMs do; DDP wraps one)."""
    return takes_logits_to_keep(getattr(model, "module", model).forward)


def takes_logits_to_keep(forward: Any) -> bool:
    """Whether ``forward`` has a ``logits_to_keep`` parameter, read once per function (``inspect.signature`` was
    50 us, paid by every sampling batch and log-prob pass)."""
    return _has_logits_to_keep(getattr(forward, "__func__", forward))


@functools.lru_cache(maxsize=64)
def _has_logits_to_keep(function: Any) -> bool:
    return "logits_to_keep" in inspect.signature(function).parameters


def _plain_head(model: Any) -> torch.nn.Linear | None:
    """The model's output layer when its logits are that layer of the last hidden states and nothing more."""
    inner = getattr(model, "module", model)
    getter = getattr(inner, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    if not isinstance(head, torch.nn.Linear) or hasattr(head.weight, "full_tensor"):
        return None  # an adapter on the head, or FSDP's sharded weights (DTensors) outside the forward
    config = getattr(inner, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if any(getattr(text, name, None) is not None for name in SCALED_LOGITS):
        return None
    return head


@contextmanager
def _captured_input(head: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """The output layer's input in this thread's forward, which it then projects nothing of (``[..., 0, hidden]``)."""
    captured: list[torch.Tensor] = []
    thread = threading.get_ident()

    def capture(_module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if threading.get_ident() != thread:  # another thread sampling from the same model: left alone
            return None
        captured.append(args[0])
        return (args[0][..., :0, :], *args[1:])

    handle = head.register_forward_pre_hook(capture)
    try:
        yield captured
    finally:
        handle.remove()


def _chunks(count: int, chunk: int) -> Iterator[slice]:
    for begin in range(0, count, chunk):
        yield slice(begin, min(begin + chunk, count))


def _logits(
    inputs: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, dtype: torch.dtype
) -> torch.Tensor:
    """One chunk's float32 logits: as given, or its hidden states through the output layer (in ``dtype``, as
    autocast would run it)."""
    if weight is None:
        return inputs.float()
    logits = torch.nn.functional.linear(inputs.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype))
    return logits.float()


def _scores(
    inputs: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    chunk: int,
    dtype: torch.dtype,
    wanted: int,
    squares: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chosen log-probs, entropies (``wanted`` > 0), sums of squares (``squares``) and log-normalisers (the
    log-sum-exp of each position's logits, which the backward's softmax reuses) of every position, no graph."""
    count = int(inputs.shape[0])
    chosen = torch.zeros(count, device=inputs.device)
    normalisers = torch.zeros(count, device=inputs.device)
    entropy = torch.zeros(count if wanted else 0, device=inputs.device)
    sums = torch.zeros(count if squares else 0, device=inputs.device)
    with torch.no_grad():
        for part in _chunks(count, chunk):
            logits = _logits(inputs[part], weight, bias, dtype)
            log_p = torch.log_softmax(logits, dim=-1)
            picked = targets[part, None]
            chosen[part] = log_p.gather(-1, picked).squeeze(-1)
            normalisers[part] = logits.gather(-1, picked).squeeze(-1) - chosen[part]
            if wanted or squares:
                p = log_p.exp()
                if squares:
                    sums[part] = (p * p).sum(-1)
                if wanted:
                    entropy[part] = -p.mul_(log_p).sum(-1)
    return chosen, entropy, sums, normalisers


class _ChunkedScores(torch.autograd.Function):
    """:func:`_scores` with a gradient: the backward recomputes each chunk's logits rather than keep them.

    It takes the softmax from the forward's log-normalisers, in place on the recomputed logits
    (no second log-softmax, no zeroed gradient buffer: at vocabulary 151,936 these passes over
    the chunk were most of the output layer's backward).

    d log p_t / d z = onehot(t) - p and d H / d z = -p (log p + H), per position; the output
    layer's weight gradient is accumulated in float32 across the chunks.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        inputs: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        chunk: int,
        dtype: torch.dtype,
        wanted: int,
        squares: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        chosen, entropy, sums, normalisers = _scores(inputs, weight, bias, targets, chunk, dtype, wanted, squares)
        ctx.save_for_backward(inputs, weight, bias, targets, entropy, normalisers)
        ctx.chunk, ctx.dtype, ctx.entropy_grad = chunk, dtype, wanted == 2
        ctx.mark_non_differentiable(sums)
        if wanted != 2:
            ctx.mark_non_differentiable(entropy)
        return chosen, entropy, sums

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_chosen: torch.Tensor | None, grad_entropy: torch.Tensor | None, _grad_sums: Any
    ) -> tuple[Any, ...]:
        inputs, weight, bias, targets, entropy, normalisers = ctx.saved_tensors
        needs_inputs, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        grad_inputs = torch.zeros_like(inputs) if needs_inputs else None
        grad_weight = torch.zeros(weight.shape, device=weight.device) if needs_weight else None
        grad_bias = torch.zeros(bias.shape, device=bias.device) if needs_bias else None
        projected = None if weight is None else weight.to(ctx.dtype)
        for part in _chunks(int(inputs.shape[0]), ctx.chunk):
            # in place on the chunk's fresh logits (a copy where they are the inputs): one chunk-sized tensor
            logits = _logits(inputs[part], projected, bias, ctx.dtype)
            logits = logits.clone() if projected is None else logits
            log_p = logits.sub_(normalisers[part, None])
            g = None if grad_chosen is None else grad_chosen[part, None].float()
            if ctx.entropy_grad and grad_entropy is not None:  # -p (g + g_H (log p + H))
                p = log_p.exp()
                grad = log_p.add_(entropy[part, None]).mul_(-grad_entropy[part, None].float())
                grad = (grad if g is None else grad.sub_(g)).mul_(p)
            else:  # -p g
                grad = torch.exp(log_p, out=log_p)
                grad = grad.zero_() if g is None else grad.mul_(-g)
            if g is not None:
                grad.scatter_add_(-1, targets[part, None], g)
            if projected is None:
                if grad_inputs is not None:
                    grad_inputs[part] = grad.to(inputs.dtype)
                continue
            low = grad.to(ctx.dtype)
            hidden = inputs[part].to(ctx.dtype)
            if grad_inputs is not None:
                grad_inputs[part] = (low @ projected).to(inputs.dtype)
            if grad_weight is not None:
                _add_product(grad_weight, low.t(), hidden)
            if grad_bias is not None:
                grad_bias += grad.sum(0)
        return (
            grad_inputs,
            None if grad_weight is None else grad_weight.to(weight.dtype),
            None if grad_bias is None else grad_bias.to(bias.dtype),
            *([None] * 5),
        )


def _add_product(total: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``total += a @ b`` in float32 without rounding ``a @ b`` to a low-precision ``a``'s dtype first."""
    if a.dtype == torch.float32:
        total.addmm_(a, b)
    elif total.device.type == "cuda":
        torch.addmm(total, a, b, out_dtype=torch.float32, out=total)
    else:
        total.addmm_(a.float(), b.float())
