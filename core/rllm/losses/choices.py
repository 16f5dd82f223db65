"""The one-line error for a value outside its vocabulary: the key, the value, the choices, close matches."""

from __future__ import annotations

import difflib
from typing import Any

from rllm.errors import LossOptionError


def one_of(value: Any, choices: tuple[str, ...], key: str, what: str) -> str:
    """``value`` if it is one of ``choices``, else a :class:`~rllm.errors.LossOptionError` naming ``key``."""
    if isinstance(value, str) and value in choices:
        return value
    close = difflib.get_close_matches(str(value), choices, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    raise LossOptionError(f"{key}={value!r} is not {what}; use one of {', '.join(choices)}.{hint}")
