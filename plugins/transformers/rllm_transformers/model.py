"""The policy model and its tokenizer: ``tiny`` (built from a config, random weights, a character
tokenizer over the digit tasks' vocabulary) or a local directory / hub id loaded with transformers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rllm.errors import ConfigError, RLLMWarning
from rllm.tasks import VOCAB

TINY = "tiny"
PAD = "<pad>"
EOS = "<eos>"
CHARACTERS = [token for token in VOCAB if token != EOS]
"""The tiny tokenizer's ids 0-12 are the digit tasks' token ids, ``<eos>`` is 13 as there, ``<pad>`` 14."""


@dataclass
class Policy:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device


def char_tokenizer() -> PreTrainedTokenizerBase:
    """One token per character of the digit tasks, ids equal to the tasks' own (see :data:`CHARACTERS`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(VOCAB)}
    vocab[PAD] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=PAD)


def tiny_model(options: DictConfig, vocab_size: int, pad_id: int, eos_id: int) -> PreTrainedModel:
    """A Qwen2-style causal LM from a config: about 75k parameters at the defaults."""
    from transformers import Qwen2Config

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=int(options.hidden_size),
        intermediate_size=2 * int(options.hidden_size),
        num_hidden_layers=int(options.num_layers),
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=None,
    )
    return AutoModelForCausalLM.from_config(config)


def resolve_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "rllm.transformers.device=cuda, but torch sees no CUDA device (or this torch is a CPU build); "
            "use rllm.transformers.device=auto or cpu."
        )
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def load_policy(options: DictConfig) -> Policy:
    """Build or load the model named by ``rllm.transformers.model`` on its device and dtype, seeded."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # checkpoint writes would draw a bar over the trainer's own
    device = resolve_device(str(options.device))
    dtype = torch.bfloat16 if str(options.dtype) == "bfloat16" else torch.float32
    torch.manual_seed(int(options.seed))
    name = str(options.model)
    if name == TINY:
        tokenizer = char_tokenizer()
        model = tiny_model(options, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    else:
        tokenizer, model = _pretrained(name)
    model.to(device=device, dtype=dtype)  # type: ignore[arg-type]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return Policy(model, tokenizer, device)


def _pretrained(name: str) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """A local directory, or a hub id (resolved from the local cache only when the hub is unreachable)."""
    looks_like_path = name.startswith((".", "/", "~")) or os.sep in name.strip("/").split("/", 2)[-1]
    path = Path(name).expanduser()
    if looks_like_path and not path.exists():
        raise ConfigError(f"rllm.transformers.model={name!r}: no such directory; give a model directory or 'tiny'.")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"rllm.transformers.model={name!r} is a file; give the directory save_pretrained wrote.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path) if path.exists() else name)
        model = AutoModelForCausalLM.from_pretrained(str(path) if path.exists() else name)
    except OSError as exc:
        where = "in that directory" if path.exists() else "locally, and the model hub could not be reached"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"rllm.transformers.model={name!r}: no causal LM and tokenizer found {where} ({first}); download it "
            "where the hub is reachable (huggingface-cli download) or give a local directory."
        ) from None
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ConfigError(
                f"rllm.transformers.model={name!r}: its tokenizer has neither a pad token nor an EOS token; "
                "add one (tokenizer.add_special_tokens({'pad_token': ...}) and save_pretrained) before training."
            )
        import warnings

        warnings.warn(
            f"rllm.transformers.model={name!r}: its tokenizer has no pad token; padding with its EOS token "
            f"{tokenizer.eos_token!r} (padding is masked out, so this does not change training).",
            RLLMWarning,
            stacklevel=3,
        )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, model


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
