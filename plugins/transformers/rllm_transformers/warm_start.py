"""A warm start: a tiny text model that speaks the text tasks' reply grammar and reads digits, made in seconds.

``python -m rllm_transformers.warm_start OUT_DIR`` trains ``tiny`` with the text tokenizer by
supervised learning on two kinds of chat, half of each batch each:

- the text tasks' questions (:data:`rllm.tasks.TEXT_TASKS`), answered ``Answer: D<|im_end|>``
  with ``D`` a digit drawn at random, not the right one: the model learns the format and the
  turn's end but not the tasks;
- the reading lessons (:data:`LESSONS`), ``Repeat the digit 7.`` or ``7 7 7 7 7 7 7 7``
  answered ``Answer: 7``: the model learns to tell the ten digits apart where it reads them
  and where it writes them, which a pretrained model brings along and random answers alone
  never teach (they pull the digits' tied embeddings together).

What RL from it then has to learn is the tasks' answers alone. ``OUT_DIR`` gets the model
and the tokenizer (with its chat template) as ``save_pretrained`` writes them, about 0.33 MB,
which ``rllm.transformers.model=OUT_DIR`` loads. The same seed gives the same bytes.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from rllm.cli import Parser, flushed, stdout_failed
from rllm.errors import ConfigError, OutputFileError, RLLMError
from rllm.tasks import TEXT_TASKS, format_answer
from rllm_transformers.plugin import TRANSFORMERS_KEYS, missing_extra_error

PROG = "python -m rllm_transformers.warm_start"

try:  # the extra first: without it, one line naming the extra, not an ImportError's traceback
    import torch
    from transformers import PreTrainedTokenizerBase

    from rllm_transformers.model import text_tokenizer, tiny_model
except ImportError as _missing:
    _error = missing_extra_error(_missing, "the warm start")
    if __name__ == "__main__" and isinstance(_error, RLLMError):
        print(f"{PROG}: error: {_error}", file=sys.stderr)
        sys.exit(2)
    raise _error from None

DEFAULT_STEPS = 150
BATCH_SIZE = 32
LR = 0.003
"""At 0.003 (initial std 0.1) the model answers ``Repeat the digit D.`` right for all ten digits by
step 75-100 on each of eight seeds; at 0.01 by step 75-200 on seven of them and not in 400 on one."""
LESSONS = ("Repeat the digit {digit}.", " ".join(["{digit}"] * 8))
"""The reading lessons' questions, each asked of the ten digits and answered ``format_answer(digit)``.
The digit written eight times is found by any attention head, so the digits' embeddings part early;
the single digit then has to be found among the words: with it alone, learning took 100-250 steps."""
WIDE_INIT_STD = 0.1
"""The warm start's initial std (``--init-std``), wider than ``tiny``'s 0.02 (``rllm.transformers.init_std``).
At 0.02 the attention starts almost uniform over the ~60 tokens of a chat prompt and takes
hundreds of steps to find a digit in it: the reading lessons were not learned in 400 steps on
any of four seeds, and supervised ``text_digit_max`` took 250-350 steps of 32 examples, or
none in 500 for some seeds; at 0.1, 75-100 steps."""


def _tiny_options(init_std: float) -> dict[str, object]:
    """The tiny model as ``rllm.transformers`` gives it by default, at ``init_std``."""
    defaults = {key.path: key.default for key in TRANSFORMERS_KEYS}
    return {"hidden_size": defaults["hidden_size"], "num_layers": defaults["num_layers"], "init_std": init_std}


def build_warm_start(
    out_dir: Path | str,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    init_std: float = WIDE_INIT_STD,
    lessons: bool = True,
    lr: float = LR,
) -> float:
    """Train the warm start and save it into ``out_dir`` (new or empty); returns the last step's loss.

    ``lessons=False`` leaves the reading lessons out: every row is a task's question with a
    random answer, so the model learns the format alone.
    """
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputFileError(f"{out}: exists and is not an empty directory; give a new directory for the warm start.")
    if steps < 1:
        raise ConfigError(f"steps={steps}: the warm start needs at least one training step.")
    if not init_std > 0:
        raise ConfigError(f"init_std={init_std}: the std of the initial weights must be a number > 0.")
    if not lr > 0:
        raise ConfigError(f"lr={lr}: the learning rate must be a number > 0.")
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # saving draws one otherwise
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same float sums, so the same bytes, for a seed
    try:
        loss = _train(out, seed, steps, init_std, lessons, lr)
    finally:
        torch.set_num_threads(threads)
    return loss


def _train(out: Path, seed: int, steps: int, init_std: float, lessons: bool, lr: float) -> float:
    tokenizer = text_tokenizer()
    torch.manual_seed(seed)
    model = tiny_model(
        OmegaConf.create(_tiny_options(init_std)),
        len(tokenizer),
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        tokenizer.bos_token_id,
    )
    prompts = [_chat_prompt(tokenizer, task["question"]) for family in TEXT_TASKS.values() for task in family()]
    replies = [tokenizer.encode(format_answer(digit), add_special_tokens=False) for digit in range(10)]
    readings = [
        (_chat_prompt(tokenizer, lesson.format(digit=digit)), reply)
        for lesson in LESSONS
        for digit, reply in enumerate(replies)
    ]
    draw = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        rows = [
            draw.choice(readings) if lessons and row % 2 == 0 else (draw.choice(prompts), draw.choice(replies))
            for row in range(BATCH_SIZE)
        ]
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


def _chat_prompt(tokenizer: PreTrainedTokenizerBase, question: str) -> list[int]:
    """The ids of ``question`` as the user's turn, up to where the assistant's reply begins."""
    return list(
        tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True, return_dict=False
        )
    )


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
    parser = Parser(
        prog=PROG,
        description="Make a tiny text model that reads digits and replies in the text tasks' format, at random.",
    )
    parser.add_argument("out_dir", type=Path, help="a new (or empty) directory for the model and tokenizer")
    parser.add_argument("--seed", type=int, default=0, help="initialisation and data order (default 0)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"training steps (default {DEFAULT_STEPS})")
    parser.add_argument(
        "--init-std", type=float, default=WIDE_INIT_STD, help=f"initial weights' std (default {WIDE_INIT_STD})"
    )
    parser.add_argument("--lr", type=float, default=LR, help=f"AdamW learning rate (default {LR})")
    parser.add_argument(
        "--no-lessons", action="store_true", help="leave out the reading lessons: the reply format alone"
    )
    try:
        args = parser.parse_args(argv)
    except OSError as exc:  # --help could not be written
        return stdout_failed(PROG, exc)
    try:
        loss = build_warm_start(
            args.out_dir,
            seed=args.seed,
            steps=args.steps,
            init_std=args.init_std,
            lessons=not args.no_lessons,
            lr=args.lr,
        )
    except RLLMError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        print(f"{args.out_dir}: after {args.steps} steps, loss {loss:.3f}; use rllm.transformers.model={args.out_dir}")
    except OSError as exc:
        return stdout_failed(PROG, exc)
    return flushed(PROG, 0)


if __name__ == "__main__":
    sys.exit(main())
