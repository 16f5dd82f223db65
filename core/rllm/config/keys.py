"""A configuration key: its type, default, allowed values and meaning (declared in :mod:`rllm.contract.keys`)."""

from __future__ import annotations

from rllm.contract.keys import ConfigKey, KeyType

__all__ = ["ConfigKey", "KeyType"]
