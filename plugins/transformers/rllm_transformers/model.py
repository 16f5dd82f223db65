"""The policy model and its tokenizer: ``tiny`` (built from a config, random weights, a character
tokenizer: the digit tasks' vocabulary, or printable ASCII with a chat template) or a local
directory / hub id loaded with transformers."""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rllm.errors import ConfigError, RLLMWarning
from rllm.tasks import VOCAB
from rllm_transformers.checkpoint import ADAPTER_CONFIG
from rllm_transformers.plugin import INIT_STD, TINY_HEADS, TOKENIZERS
from rllm_transformers.precision import Precision, precision_of

TINY = "tiny"
PAD = "<pad>"
EOS = "<eos>"
CHARACTERS = [token for token in VOCAB if token != EOS]
"""The tiny tokenizer's ids 0-12 are the digit tasks' token ids, ``<eos>`` is 13 as there, ``<pad>`` 14."""

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
"""ChatML's turn delimiters, as in rllm.engine.chat (tests/transformers/test_text_model.py checks the two agree)."""
TEXT_SPECIALS = ("<|pad|>", "<|bos|>", IM_END, "<|unk|>", IM_START)
"""The text tokenizer's ids 0-4: pad, bos, eos (ChatML's ``<|im_end|>``, which ends a turn), unk (any
character outside :data:`TEXT_CHARACTERS`), and ``<|im_start|>``, which opens a turn and its role."""
TEXT_CHARACTERS = ("\n", *(chr(code) for code in range(0x20, 0x7F)))
"""Ids 5-100: newline, then printable ASCII from space to ``~``."""
CHAT_TEMPLATE = (
    "{%- if tools -%}"
    "{{- raise_exception('this template renders no tools; use rllm.engine.chat.render_chatml(tools=...)') -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant', 'tool'] -%}"
    "{{- raise_exception('role ' ~ message['role'] ~ ' is not one of system, user, assistant, tool') -}}"
    "{%- endif -%}"
    "{%- if message['content'] is not string -%}"
    "{{- raise_exception('the content of a ' ~ message['role'] ~ ' message is not a string') -}}"
    "{%- endif -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' ~ message['content'] ~ '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' ~ (message['content'] | trim) ~ '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' ~ message['role'] ~ '\\n' ~ message['content'] ~ '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""ChatML, as :func:`rllm.engine.chat.render_chatml` writes plain messages (no tools, reasoning or tool calls).

The model ends its turn with ``<|im_end|>``, its EOS token, where sampling stops; the next
turn's history renders that reply the same way and continues with ``\\n``, so a multi-turn
prompt extends the previous prompt and reply token for token.
"""


ONE_THREAD_PARAMETERS = 1_000_000
"""Under this many parameters a model's CPU ops are too small to split across threads."""


def default_threads(model: PreTrainedModel, device: torch.device) -> int:
    """What ``rllm.transformers.num_threads=0`` means: one thread for a small model on the CPU, else 0 (torch's).

    Whether the model is ``tiny`` or a directory holding one (a warm start, a checkpoint)
    does not matter, its size does: on a 2-core machine the text race's steps took 16 s
    with torch's two threads and 3 s with one (bench/transformers_backend.py).
    """
    small = sum(parameter.numel() for parameter in model.parameters()) < ONE_THREAD_PARAMETERS
    return 1 if small and device.type == "cpu" else 0


def use_threads(options: DictConfig, model: PreTrainedModel, device: torch.device) -> None:
    """Set torch's CPU threads as ``rllm.transformers.num_threads`` says, for every process that runs the model (the
    trainer, ``rllm serve``, ``rllm serve --tinker``)."""
    threads = int(options.num_threads) or default_threads(model, device)
    if threads > 0:
        torch.set_num_threads(threads)


@dataclass
class Policy:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    precision: Precision


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


def text_tokenizer() -> PreTrainedTokenizerBase:
    """One token per printable ASCII character plus :data:`TEXT_SPECIALS`, with :data:`CHAT_TEMPLATE`.

    A ``tokenizers`` model wrapped in ``PreTrainedTokenizerFast``, so ``save_pretrained`` writes
    ``tokenizer.json`` and the template, and ``AutoTokenizer.from_pretrained`` reads them back.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pad, bos, eos, unk, start = TEXT_SPECIALS
    vocab = {token: index for index, token in enumerate((*TEXT_SPECIALS, *TEXT_CHARACTERS))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=pad,
        bos_token=bos,
        eos_token=eos,
        unk_token=unk,
        additional_special_tokens=[start],
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def has_digit_ids(options: DictConfig) -> bool:
    """Whether the policy's token ids are the digit tasks' own (``tiny`` with the ``digits`` tokenizer)."""
    return str(options.model) == TINY and str(options.tokenizer) == TOKENIZERS[0]


def tiny_model(
    options: DictConfig, vocab_size: int, pad_id: int, eos_id: int, bos_id: int | None = None
) -> PreTrainedModel:
    """A Qwen2-style causal LM from a config: about 75k parameters at the defaults.

    ``options`` holds ``hidden_size``, ``num_layers`` and optionally ``init_std`` (default 0.02, the key's).
    """
    from transformers import Qwen2Config

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=int(options.hidden_size),
        intermediate_size=2 * int(options.hidden_size),
        num_hidden_layers=int(options.num_layers),
        num_attention_heads=TINY_HEADS,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=float(options.get("init_std", INIT_STD)),
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=bos_id,
    )
    return AutoModelForCausalLM.from_config(config)


DEFAULT_CONTEXT = 2048
"""The context assumed for a model whose config names no ``max_position_embeddings``."""
REPLY_SHARE, MOST_REPLY, LEAST_PROMPT = 16, 4096, 512


def token_limits(options: DictConfig, model: PreTrainedModel) -> tuple[int, int]:
    """``rllm.transformers.max_new_tokens`` and ``max_prompt_length``; where null, from the model's context.

    A reply may take a sixteenth of the context (``max_position_embeddings``), at most 4,096
    tokens, and a prompt what the context leaves, at least 512: the tiny models (and warm starts
    saved from them), with a context of 256, get 16 and 512; Qwen2.5's 32,768 gives 2,048 and 30,720.
    """
    context = int(getattr(model.config, "max_position_embeddings", None) or DEFAULT_CONTEXT)
    chosen = options.get("max_new_tokens")
    new_tokens = max(1, min(context // REPLY_SHARE, MOST_REPLY)) if chosen is None else int(chosen)
    chosen = options.get("max_prompt_length")
    prompt = max(LEAST_PROMPT, context - new_tokens) if chosen is None else int(chosen)
    return new_tokens, prompt


def resolve_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "rllm.transformers.device=cuda, but torch sees no CUDA device (or this torch is a CPU build); "
            "use rllm.transformers.device=auto or cpu."
        )
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def load_policy(options: DictConfig, place: str | None = None) -> Policy:
    """Build or load the model named by ``rllm.transformers.model`` on its device in its precision, seeded.

    ``place`` puts the weights elsewhere than the device the policy computes on: ``"cpu"`` (host memory) or
    ``"meta"`` (the shape only: nothing is read or allocated), for FSDP ranks that keep no whole copy on the device.
    """
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # checkpoint writes would draw a bar over the trainer's own
    device = resolve_device(str(options.device))
    precision = precision_of(options)
    torch.manual_seed(int(options.seed))
    name, kind = str(options.model), str(options.tokenizer)
    shape_only = place == "meta"
    if name == TINY:
        tokenizer = char_tokenizer() if kind == TOKENIZERS[0] else text_tokenizer()
        with torch.device("meta") if shape_only else nullcontext():
            model = tiny_model(
                options, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id
            )
    elif kind != TOKENIZERS[0]:
        raise ConfigError(
            f"rllm.transformers.tokenizer={kind} applies to model=tiny only; {name!r} brings its own tokenizer, "
            f"so leave rllm.transformers.tokenizer at {TOKENIZERS[0]}."
        )
    else:
        tokenizer, model = _pretrained(name, shape_only)
    precision.prepare(model, device, torch.device(place) if place else None)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return Policy(model, tokenizer, device, precision)


def _pretrained(name: str, shape_only: bool = False) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """A local directory, or a hub id (resolved from the local cache only when the hub is unreachable); with
    ``shape_only`` the model is built from its config on the meta device, its weights left unread."""
    looks_like_path = name.startswith((".", "/", "~")) or os.sep in name.strip("/").split("/", 2)[-1]
    path = Path(name).expanduser()
    if looks_like_path and not path.exists():
        raise ConfigError(f"rllm.transformers.model={name!r}: no such directory; give a model directory or 'tiny'.")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"rllm.transformers.model={name!r} is a file; give the directory save_pretrained wrote.")
    if (path / ADAPTER_CONFIG).is_file():
        raise ConfigError(
            f"rllm.transformers.model={name!r} holds a LoRA adapter (a LoRA run's checkpoint), not a whole model; "
            "give the base model (and resume the run from its checkpoint), or merge the adapter first: "
            "peft.PeftModel.from_pretrained(base, directory).merge_and_unload().save_pretrained(...)."
        )
    if path.is_dir():
        check_model_directory(name, path)
    try:
        tokenizer = load_tokenizer(str(path) if path.exists() else name)
        source = str(path) if path.exists() else name
        if shape_only:
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source))
        else:
            model = AutoModelForCausalLM.from_pretrained(source)
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


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")
"""Files of which a model directory needs one for its tokenizer (``tokenizer.save_pretrained`` writes the first two)."""


def check_model_directory(name: str, path: Path) -> None:
    """Refuse, in one line, a directory that is not a model and tokenizer as ``save_pretrained`` writes them.

    A run's or a checkpoint's directory is named with the model directory inside it; a model
    without tokenizer files is refused here, before training, where transformers would build
    an empty tokenizer from the model's type and every prompt would encode to nothing.
    """
    key = f"rllm.transformers.model={name!r}"
    if (path / "MANIFEST.json").is_file() and (path / "model" / "config.json").is_file():
        raise ConfigError(
            f"{key} is a checkpoint of an rllm run; its model is the directory inside it: "
            f"rllm.transformers.model={str(path / 'model')!r}."
        )
    if (path / "checkpoints").is_dir():
        latest = path / "checkpoints" / "latest"
        step = latest.read_text(encoding="utf-8").strip() if latest.is_file() else ""
        model = path / "checkpoints" / (step or "step_N") / "model"
        raise ConfigError(
            f"{key} is an rllm run's directory; a checkpoint's model is inside it: rllm.transformers.model="
            f"{str(model)!r}{' (the newest)' if step else ''} (or resume the run with rllm train -c "
            f"{str(path / 'config.yaml')!r})."
        )
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"{key} has no config.json: it is not a model directory; give the directory save_pretrained wrote "
            "(config.json, the weights and the tokenizer's files) or 'tiny'."
        )
    if not any((path / file).is_file() for file in TOKENIZER_FILES):
        raise ConfigError(
            f"{key} has a model but no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}); save the tokenizer there "
            "too (tokenizer.save_pretrained(directory))."
        )


GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")
"""What ``save_pretrained`` of a tokenizer built from a ``tokenizers`` object declares (transformers 5, 4)."""


def load_tokenizer(source: str) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained(source)``, except for a directory whose files declare the generic class.

    transformers 5 loads the tokenizer of a ``qwen2`` model directory as ``Qwen2Tokenizer``
    whatever its ``tokenizer_config.json`` says, and that class rebuilds a byte-level tokenizer
    which drops the tiny text tokenizer's spaces and newlines; the generic class reads
    ``tokenizer.json`` as it was saved.
    """
    import json

    from transformers import PreTrainedTokenizerFast

    path = Path(source)
    try:
        declared = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8")).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):  # no such file, or not a JSON object: AutoTokenizer says why
        declared = None
    if declared in GENERIC_TOKENIZERS and (path / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(source)
    return AutoTokenizer.from_pretrained(source)


def set_training(model: torch.nn.Module, mode: bool) -> None:
    """``model.train(mode)``, left out when every module is in ``mode`` already, and without ``train``'s walk where
    no module overrides it: ``nn.Module.train`` sets each module's flag through ``nn.Module.__setattr__``'s type
    checks (175 us a switch for the 33 modules of the tiny model, paid twice a step by sampling); the flag is
    written into each module's ``__dict__``, where ``train`` itself puts it. transformers' models override ``train``
    only to re-kernelize with ``use_kernels``: such a model takes ``train``."""
    modules = list(model.modules())
    if all(module.training == mode for module in modules):
        return
    if not all(_plain_train(module) for module in modules):
        model.train(mode)
        return
    for module in modules:
        module.__dict__["training"] = mode


def _plain_train(module: torch.nn.Module) -> bool:
    """Whether ``module.train(mode)`` would only set its own flag (and recurse into its children)."""
    train = type(module).train
    return train is torch.nn.Module.train or (
        train is PreTrainedModel.train and not getattr(module, "use_kernels", False)
    )


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def checkpoint_activations(model: Any) -> None:
    """``rllm.transformers.gradient_checkpointing``: transformers' own, non-reentrant (it takes keyword arguments
    and leaves the inputs' ``requires_grad`` alone); it acts in training mode only, so sampling is unchanged."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ConfigError(
            f"rllm.transformers.gradient_checkpointing=true, but {type(model).__name__} does not support it "
            "(supports_gradient_checkpointing is false); set it to false."
        )
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
