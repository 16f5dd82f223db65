"""The sampling settings' one check, shared by ``rllm train``'s keys and ``rllm serve``'s requests.

``rllm.transformers.temperature``/``top_p`` and ``rllm.embedded.temperature`` are these keys,
and :func:`rllm.engine.openai_api.parse` checks a request's fields with them, so a value one
door refuses the other refuses too: NaN, infinities, and values so small that float32 rounds
them to 0 (or to a subnormal the logits divided by it overflow).
"""

from __future__ import annotations

from rllm.contract.keys import ConfigKey

__all__ = ["TEMPERATURE_KEY", "TOP_P_KEY"]

TEMPERATURE_KEY = ConfigKey(
    "temperature",
    "float",
    1.0,
    "Sampling temperature, 0.01 to 2 (vLLM's floor; a value float32 rounds to 0 or a subnormal makes the "
    "tempered logits infinite).",
    minimum=0.01,
    maximum=2.0,
)
"""The sampling temperature's one check, for ``rllm train``'s keys (``rllm.transformers.temperature``,
``rllm.embedded.temperature``) and ``rllm serve``'s requests (which also take 0: greedy)."""
TOP_P_KEY = ConfigKey(
    "top_p",
    "float",
    1.0,
    "Nucleus sampling mass; 1: off. At least 1e-6 (below, only the likeliest token is kept anyway, and values "
    "float32 rounds to 0 keep none).",
    minimum=1e-6,
    maximum=1.0,
)
"""``top_p``'s one check, for ``rllm.transformers.top_p`` and ``rllm serve``'s requests."""
