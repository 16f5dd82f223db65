"""What the data model's records share: rLLM's ``metadata`` name of ``info``, and reading their dict form.

:mod:`rllm.types` builds its records (steps, trajectories, episodes) with these; they sit below
it so that the data model stays one module of record types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from rllm.errors import DataError


def take_metadata(obj: Any, metadata: dict[str, Any] | None) -> None:
    """Accept rLLM's ``metadata=`` constructor keyword as the ``info`` dict (giving both is an error)."""
    if metadata is None:
        return
    if obj.info and obj.info is not metadata:
        raise DataError(f"{type(obj).__name__} got both info and metadata; they are one dict, give one of them.")
    obj.info = metadata


_T = TypeVar("_T")


def metadata_alias(cls: type[_T]) -> type[_T]:
    """Make ``metadata`` read and write the ``info`` dict (after the dataclass took its keyword)."""

    def get(self: Any) -> dict[str, Any]:
        return self.info  # type: ignore[no-any-return]

    def put(self: Any, value: dict[str, Any] | None) -> None:
        self.info = {} if value is None else value

    cls.metadata = property(get, put, doc="rLLM's current name of ``info``.")  # type: ignore[attr-defined]
    return cls


def read_field(data: Mapping[str, Any], key: str, default: Callable[[], Any]) -> Any:
    """``data[key]``, or ``default()`` when it is absent or null (rLLM writes null for empty fields)."""
    value = data.get(key)
    return default() if value is None else value
