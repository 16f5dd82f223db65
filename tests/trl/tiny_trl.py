"""A tiny causal LM, its character tokenizer, a prompt dataset and a reward, for GRPOTrainer runs on CPU in seconds.

Built from configs (no hub): a one-layer Qwen2 of width 16 over 13 tokens (``<pad>``, ``<eos>``,
``a``-``j``, space), seeded so that two builds are equal.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import torch

CHARACTERS = "abcdefghij "


def tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(CHARACTERS)}}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<pad>")


def model(seed: int = 0) -> Any:
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=len(CHARACTERS) + 2,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def dataset(prompts: int = 4) -> Any:
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [CHARACTERS[i % 10] * 2 for i in range(prompts)]})


def count_a(completions: list[str], **_: Any) -> list[float]:
    """Reward: how many ``a`` the completion holds (TRL reward-function signature)."""
    return [float(text.count("a")) for text in completions]


def length_reward(completions: list[str], **_: Any) -> list[float | None]:
    """A second reward function: the completion's length, None (unscorable) for an empty one."""
    return [float(len(text)) if text else None for text in completions]


def scored_sometimes(completions: list[str], **_: object) -> list[float | None]:
    """The number of ``a``, None (unscorable by this function) for completions whose length is a multiple of 3."""
    return [None if len(text) % 3 == 0 else float(text.count("a")) for text in completions]


def length_sometimes(completions: list[str], **_: object) -> list[float | None]:
    """Half the length, None for lengths that are multiples of 3 or hold a ``b``: some go unscored by both."""
    return [None if len(text) % 3 == 0 or "b" in text else len(text) / 2 for text in completions]


REWARDS = [scored_sometimes, length_sometimes]


def recorded(trainer):
    """The trainer with its advantages (per generation batch) and losses (per micro-batch) recorded."""
    trainer.seen = {"advantages": [], "rewards": [], "loss": []}
    generate, compute = trainer._generate_and_score_completions, trainer._compute_loss
    score = trainer._calculate_rewards

    def generate_and_score(inputs):
        output = generate(inputs)
        trainer.seen["advantages"].append(output["advantages"].detach().clone())
        return output

    def calculate_rewards(*args):
        rewards = score(*args)
        trainer.seen["rewards"].append(rewards.detach().clone())
        return rewards

    def compute_loss(model, inputs):
        loss = compute(model, inputs)
        trainer.seen["loss"].append(float(loss.detach()))
        return loss

    trainer._generate_and_score_completions = generate_and_score
    trainer._calculate_rewards = calculate_rewards
    trainer._compute_loss = compute_loss
    return trainer


def config(output_dir: Path, **overrides: Any) -> Any:
    """A GRPOConfig for two quick steps on CPU: 4 prompts x 4 generations of at most 6 tokens, nothing saved."""
    from trl import GRPOConfig

    settings: dict[str, Any] = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "bf16": False,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 6,
        "max_steps": 2,
        "learning_rate": 1e-2,
        "report_to": [],
        "logging_steps": 1,
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
    }
    settings.update(overrides)
    return GRPOConfig(**settings)


def train(trainer: Any) -> None:
    """``trainer.train()``, with the objects alive so far frozen out of the garbage collector first.

    accelerate ends every ``train()`` with ``gc.collect()``, which in a test session holding many
    objects took most of a tiny run (0.7 of 1.1 seconds); frozen objects are not scanned.
    """
    gc.freeze()
    trainer.train()
