"""Step and trajectory ids: random version-4 UUID strings, made a batch at a time.

Every step and trajectory gets one when made. ``str(uuid.uuid4())`` costs about 3 us and a
formatted ``os.urandom`` 1 us, which made ids a measurable share of an episode of one token;
here 512 are formatted at once with numpy, and an id costs a list pop. A forked child empties
its copy of the batch, so parent and child never hand out the same id.
"""

from __future__ import annotations

import os

import numpy as np

BATCH = 512
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_DIGITS = np.array([c for c in range(36) if c not in (8, 13, 18, 23)])
"""The columns of a UUID's 32 hex digits among its 36 characters (the rest are dashes)."""
_ready: list[str] = []
os.register_at_fork(after_in_child=_ready.clear)


def _batch() -> list[str]:
    raw = np.frombuffer(os.urandom(16 * BATCH), dtype=np.uint8).reshape(BATCH, 16).copy()
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40  # version 4
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80  # RFC 4122 variant
    nibbles = np.empty((BATCH, 32), dtype=np.uint8)
    nibbles[:, 0::2], nibbles[:, 1::2] = raw >> 4, raw & 0x0F
    chars = np.full((BATCH, 37), ord("-"), dtype=np.uint8)
    chars[:, _DIGITS] = _HEX[nibbles]
    chars[:, 36] = ord(" ")
    return chars.tobytes().decode("ascii").split()


def new_id() -> str:
    """A random version-4 UUID's string, as ``str(uuid.uuid4())`` gives it."""
    try:
        return _ready.pop()
    except IndexError:
        _ready.extend(_batch())
        return _ready.pop()
