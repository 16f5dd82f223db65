"""Whether two tokenizers give the same ids: what a teacher and its student, or a policy and its copy, must share."""

from __future__ import annotations

from typing import Any

__all__ = ["same_vocabulary"]


def same_vocabulary(tokenizer: Any, other: Any) -> bool:
    """The same token-to-id table and EOS id (through ``get_vocab()``); one without the table matches only itself."""
    if tokenizer is other:
        return True
    vocab, theirs = getattr(tokenizer, "get_vocab", None), getattr(other, "get_vocab", None)
    if vocab is None or theirs is None:
        return False
    return bool(
        vocab() == theirs() and getattr(tokenizer, "eos_token_id", None) == getattr(other, "eos_token_id", None)
    )
