"""The checks every queued Tinker request passes when it arrives: a bad one is refused at once, one line naming
the route and field, whichever door (JSON or protobuf, any SDK version) it came through."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rllm_transformers.engine import Sampling
from rllm_transformers.tinker_server import losses
from rllm_transformers.tinker_server.sampling import SampleJob
from rllm_transformers.tinker_server.trainer import ADAM_DEFAULTS
from rllm_transformers.tinker_server.wire import Batch, WireError


def check_batch(route: str, batch: Batch, vocab: int, context: int) -> dict[str, float]:
    """The loss's settings, or a :class:`WireError` naming the datum and field (both wires, JSON and protobuf)."""
    name = batch.loss_fn
    if name not in losses.LOSSES:
        served = ", ".join(losses.LOSSES)
        raise WireError(route, "loss_fn", f"unknown loss {name!r}; this server computes {served}.")
    try:
        settings = losses.check_config(name, batch.config)
    except (KeyError, ValueError) as exc:
        raise WireError(route, "loss_fn_config", f"{exc.args[0]}.") from None
    if not batch.data:
        raise WireError(route, "data", "is empty; give at least one Datum.")
    wanted = ("target_tokens", *losses.LOSSES[name].inputs)
    optional = {"weights"} if name == "cross_entropy" else set()
    for i, datum in enumerate(batch.data):
        where, length = f"data[{i}]", len(datum.tokens)
        if not length:
            raise WireError(route, f"{where}.model_input", "has no tokens.")
        if length > context:
            raise WireError(
                route,
                f"{where}.model_input",
                f"has {length} tokens, more than the model's context ({context}).",
            )
        bad = [t for t in datum.tokens if not 0 <= t < vocab]
        if bad:
            raise WireError(
                route,
                f"{where}.model_input",
                f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1}).",
            )
        for key in datum.inputs:
            if key not in wanted:
                raise WireError(
                    route,
                    f"{where}.loss_fn_inputs.{key}",
                    f"is not an input of {name} (it takes {', '.join(wanted)}).",
                )
        for key in wanted:
            values = datum.inputs.get(key)
            if values is None:
                if key in optional:
                    continue
                raise WireError(route, f"{where}.loss_fn_inputs.{key}", f"missing; {name} needs {', '.join(wanted)}.")
            if len(values) != length:
                raise WireError(
                    route,
                    f"{where}.loss_fn_inputs.{key}",
                    f"has {len(values)} entries where model_input has {length} tokens; give one per input token.",
                )
            if not bool(np.isfinite(values).all()):
                raise WireError(route, f"{where}.loss_fn_inputs.{key}", "holds a NaN or infinite value.")
        targets = datum.inputs["target_tokens"]
        if len(targets) and not (targets.min() >= 0 and targets.max() < vocab):
            raise WireError(
                route,
                f"{where}.loss_fn_inputs.target_tokens",
                f"holds an id outside the vocabulary (0..{vocab - 1}).",
            )
    return settings


def adam_params(route: str, body: dict[str, Any]) -> dict[str, float]:
    """The request's ``AdamParams`` over the SDK's defaults (no gradient clipping unless asked)."""
    if "adam_params" not in body:
        raise WireError(route, "adam_params", "missing; this server's optimizer is AdamW (give AdamParams).")
    given = body["adam_params"] if isinstance(body["adam_params"], dict) else {}
    params = {**ADAM_DEFAULTS, "grad_clip_norm": 0.0}
    for key, value in given.items():
        if key not in params:
            raise WireError(route, f"adam_params.{key}", f"is not an AdamParams field ({', '.join(params)}).")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise WireError(route, f"adam_params.{key}", f"must be a finite number >= 0, got {value!r}.")
        params[key] = float(value)
    return params


def read_sample(route: str, body: dict[str, Any], weights: str | None, vocab: int, context: int) -> SampleJob:
    """The request's job, or a :class:`WireError` naming the field (every ``asample`` is checked here)."""
    prompt = [int(t) for chunk in (body.get("prompt") or {}).get("chunks") or [] for t in chunk.get("tokens") or []]
    if not prompt:
        raise WireError(route, "prompt", "has no tokens.")
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        raise WireError(route, "prompt", f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1}).")
    room = context - len(prompt)
    if room < 1:
        raise WireError(route, "prompt", f"has {len(prompt)} tokens; the model's context is {context}.")
    count = body.get("num_samples", 1)
    if not isinstance(count, int) or count < 1:
        raise WireError(route, "num_samples", f"must be a positive integer, got {count!r}.")
    for key in ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k"):
        if body.get(key):
            raise WireError(route, key, "is not served by this server; leave it 0.")
    for key in ("target_prompt_logprobs", "prompt_logprobs_last_n", "record_stability_info"):
        if body.get(key):
            raise WireError(route, key, "is not served by this server; leave it unset.")
    params = body.get("sampling_params") or {}
    max_tokens = params.get("max_tokens")
    max_tokens = room if max_tokens is None else max_tokens
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise WireError(route, "sampling_params.max_tokens", f"must be a positive integer, got {max_tokens!r}.")
    temperature = float(params.get("temperature", 1.0))
    top_p, top_k = float(params.get("top_p", 1.0)), int(params.get("top_k", -1))
    if temperature < 0 or not 0 < top_p <= 1:
        raise WireError(route, "sampling_params", "needs temperature >= 0 and 0 < top_p <= 1.")
    stop = params.get("stop")
    stop = [stop] if isinstance(stop, str) else stop
    if stop is not None and not stop:
        raise WireError(route, "sampling_params.stop", "[] (no stop at all) is not served: sampling stops at EOS.")
    seed = params.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise WireError(route, "sampling_params.seed", f"must be an integer, got {seed!r}.")
    return SampleJob(
        weights,
        prompt,
        count,
        min(max_tokens, room),
        Sampling(temperature, top_p, max(top_k, 0)),
        seed,
        frozenset(s for s in stop or [] if isinstance(s, int)),
        tuple(s for s in stop or [] if isinstance(s, str)),
        bool(body.get("prompt_logprobs")),
    )
