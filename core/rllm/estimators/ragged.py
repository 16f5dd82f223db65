"""Variable-length rows of numbers (per-step fields and advantages) and the array types of a batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["FloatArray", "IndexArray", "Ragged"]

FloatArray = NDArray[np.floating[Any]]
IndexArray = NDArray[np.intp]


@dataclass(frozen=True)
class Ragged:
    """Variable-length rows (e.g. per-step rewards): row ``i`` is ``values[offsets[i]:offsets[i+1]]``."""

    values: FloatArray
    offsets: IndexArray
    per_token: bool = False
    """Rows of response tokens (a trajectory's steps' tokens in order) rather than of steps."""

    @classmethod
    def from_rows(cls, rows: Sequence[ArrayLike], dtype: Any = np.float64, per_token: bool = False) -> Ragged:
        lengths = np.fromiter((len(row) for row in rows), dtype=np.intp, count=len(rows))  # type: ignore[arg-type]
        offsets = np.zeros(len(rows) + 1, dtype=np.intp)
        np.cumsum(lengths, out=offsets[1:])
        values = (
            np.concatenate([np.asarray(row, dtype=dtype) for row in rows]) if len(rows) else np.zeros(0, dtype=dtype)
        )
        return cls(values=values, offsets=offsets, per_token=per_token)

    @property
    def lengths(self) -> IndexArray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def rows(self) -> list[FloatArray]:
        return np.split(self.values, self.offsets[1:-1])

    def expand(self, per_row: NDArray[Any]) -> NDArray[Any]:
        """One value per row copied to each of the row's entries (a trajectory's value to its steps)."""
        return np.repeat(per_row, self.lengths)

    def with_values(self, values: FloatArray) -> Ragged:
        """Other values with the same rows."""
        return Ragged(values=values, offsets=self.offsets, per_token=self.per_token)
