"""A warm start: a tiny text model that already speaks the text tasks' reply grammar, made here in seconds.

``python -m rllm_transformers.warm_start OUT_DIR`` trains ``tiny`` with the text tokenizer by
supervised learning on chats of the text tasks (:data:`rllm.tasks.TEXT_TASKS`): the user asks
a task's question, the assistant replies ``Answer: D<|im_end|>``. ``D`` is a digit drawn at
random, not the right one, so the model learns the format and the turn's end but not the
tasks: what RL from it then has to learn is the answers alone. ``OUT_DIR`` gets the model
and the tokenizer (with its chat template) as ``save_pretrained`` writes them, about 0.4 MB,
which ``rllm.transformers.model=OUT_DIR`` loads. The same seed gives the same bytes.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from omegaconf import OmegaConf

from rllm.errors import ConfigError, OutputFileError, RLLMError
from rllm.tasks import TEXT_TASKS, format_answer
from rllm_transformers.model import text_tokenizer, tiny_model
from rllm_transformers.plugin import TRANSFORMERS_KEYS

DEFAULT_STEPS = 100
BATCH_SIZE = 32
LR = 0.01
WIDE_INIT_STD = 0.1
"""An initial std that helps RL on the text tasks (``--init-std``; the default is ``tiny``'s 0.02).
At 0.02 the attention starts almost uniform over the ~60 tokens of a chat prompt and takes
hundreds of steps to find the two digits a question is about (supervised on
``text_digit_max``: 250-350 steps of 32 examples, or none in 500 for some seeds); at 0.1, about
75 steps on three seeds. It is not the default: a student distilled from a warm start built at
0.1 moves away from it (reverse KL 7.0 -> 8.7 nats in tests/transformers/test_distillation.py's
run, which brings it from 5.6 to 3.1 at 0.02)."""


def _tiny_options(init_std: float | None) -> dict[str, object]:
    """The tiny model as ``rllm.transformers`` gives it by default, at ``init_std`` when one is given."""
    defaults = {key.path: key.default for key in TRANSFORMERS_KEYS}
    std = defaults["init_std"] if init_std is None else init_std
    return {"hidden_size": defaults["hidden_size"], "num_layers": defaults["num_layers"], "init_std": std}


def build_warm_start(
    out_dir: Path | str, seed: int = 0, steps: int = DEFAULT_STEPS, init_std: float | None = None
) -> float:
    """Train the warm start and save it into ``out_dir`` (new or empty); returns the last step's loss."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputFileError(f"{out}: exists and is not an empty directory; give a new directory for the warm start.")
    if steps < 1:
        raise ConfigError(f"steps={steps}: the warm start needs at least one training step.")
    if init_std is not None and not init_std > 0:
        raise ConfigError(f"init_std={init_std}: the std of the initial weights must be a number > 0.")
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # saving draws one otherwise
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same float sums, so the same bytes, for a seed
    try:
        loss = _train(out, seed, steps, init_std)
    finally:
        torch.set_num_threads(threads)
    return loss


def _train(out: Path, seed: int, steps: int, init_std: float | None) -> float:
    tokenizer = text_tokenizer()
    torch.manual_seed(seed)
    model = tiny_model(
        OmegaConf.create(_tiny_options(init_std)),
        len(tokenizer),
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        tokenizer.bos_token_id,
    )
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": task["question"]}], add_generation_prompt=True, return_dict=False
        )
        for family in TEXT_TASKS.values()
        for task in family()
    ]
    replies = [tokenizer.encode(format_answer(digit), add_special_tokens=False) for digit in range(10)]
    draw = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        rows = [(draw.choice(prompts), draw.choice(replies)) for _ in range(BATCH_SIZE)]
        ids, attention, labels = _batch(rows, int(tokenizer.pad_token_id), int(tokenizer.eos_token_id))
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return float(loss.detach())


def _batch(rows: Sequence[tuple[list[int], list[int]]], pad: int, eos: int) -> tuple[torch.Tensor, ...]:
    """Right-padded prompt + reply + EOS rows; the loss is on the reply and its EOS only."""
    width = max(len(prompt) + len(reply) + 1 for prompt, reply in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for row, (prompt, reply) in enumerate(rows):
        sequence = [*prompt, *reply, eos]
        ids[row, : len(sequence)] = torch.tensor(sequence)
        attention[row, : len(sequence)] = 1
        labels[row, len(prompt) : len(sequence)] = torch.tensor([*reply, eos])
    return ids, attention, labels


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rllm_transformers.warm_start",
        description="Make a tiny text model that answers the text tasks in their format (not correctly).",
    )
    parser.add_argument("out_dir", type=Path, help="a new (or empty) directory for the model and tokenizer")
    parser.add_argument("--seed", type=int, default=0, help="initialisation and data order (default 0)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"training steps (default {DEFAULT_STEPS})")
    parser.add_argument(
        "--init-std", type=float, default=None, help=f"initial weights' std (default tiny's; {WIDE_INIT_STD} helps RL)"
    )
    args = parser.parse_args(argv)
    try:
        loss = build_warm_start(args.out_dir, seed=args.seed, steps=args.steps, init_std=args.init_std)
    except RLLMError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out_dir}: after {args.steps} steps, loss {loss:.3f}; use rllm.transformers.model={args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
