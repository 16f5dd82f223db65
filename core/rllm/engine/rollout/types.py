"""rLLM's names for what a token-in/token-out engine takes and gives, at rLLM's path.

They are aliases so that engine code type-checks the same here and in rLLM: the ids of a
prompt (``TokenInput``), a backend's own answer object (``TokenOutput``) and the tokenizer
(a transformers tokenizer, or anything with ``encode``/``decode``).
"""

from __future__ import annotations

from typing import Any, TypeAlias

__all__ = ["TokenInput", "TokenOutput", "Tokenizer"]

TokenInput: TypeAlias = list[int]
TokenOutput: TypeAlias = Any
Tokenizer: TypeAlias = Any
