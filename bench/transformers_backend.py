"""The transformers backend: the default run's learning curve, and races against TRL's GRPOTrainer.

``python bench/transformers_backend.py`` (needs ``pip install 'rllm[transformers]'``; the TRL part
also needs ``pip install trl``, which is installed for the benchmark only and skipped, saying so,
when absent). ``--steps N`` sets the digit race's length (default 150), ``--text-steps N`` the text
race's (default 60), ``--vocab-steps N`` the vocabulary race's (default 20), ``--tasks digit text
vocab`` which races run, ``--seed N`` both sides' seed in the races (default 0), ``--repeats N``
how many times each side runs, alternating, with the median ratio (default 1), ``--precision
bf16-mixed`` both sides in bf16 autocast (default fp32), ``--trl-as-installed`` TRL with its own
defaults (unequal work), ``--skip-default`` leaves out the first part.

Equal work (every race prints both sides' settings): TRL 1.16's ``GRPOConfig`` turns on bf16
autocast and gradient checkpointing, and without Triton (the CPU) its fused LM head scores every
prompt position too. The races set both sides to fp32 without checkpointing (rllm's default, the
precision its equality tests check; checkpointing only saves memory that is not short here) and make
TRL score completion positions only, as it does on CUDA; one torch thread each.

1. ``rllm train rllm.backend=transformers`` with every default, in a subprocess on this
   machine: wall time and validation pass@1 (greedy) before, after, and where it first reaches 0.9.
2. The races, in this process, one after the other, the same settings on both sides: 16
   prompts x 8 generations per step, lr 1e-3, AdamW, one update per step (TRL's
   ``loss_type="dapo"``, ``beta=0``; rllm's default clipped loss with token-mean and GRPO
   advantages, no reference), one torch thread (the backend's default for a model this small on
   the CPU; on this 2-core machine shared with other jobs, two threads ran these small ops up to
   10x slower).

   - ``digit``: a randomly initialised tiny model (Qwen2-style, hidden 64, 2 layers, tied
     embeddings, the character tokenizer), ``digit_max`` (max of two digits, the 100 prompts),
     one token per generation.
   - ``text``: the warm start (``rllm_transformers.warm_start``, made once, loaded by both sides
     from its directory), ``text_digit_max`` as a chat prompt (the text tokenizer's chat
     template), up to 10 tokens per generation (``Answer: D<|im_end|>`` is 10), scored by
     :func:`rllm.tasks.text_reward`: rLLM's ``SimpleWorkflow`` on rllm's side, TRL's
     conversational dataset and a reward function reading the completion's content on TRL's.
   - ``vocab``: the text race at Qwen2.5's vocabulary, 151,936 (:func:`_vocab_data`: the warm
     start's embedding padded), 4 prompts x 4 generations a step: the LM head, softmax, sampler and
     log-prob passes at a real model's size while the rest stays tiny.

   Each side first runs 3 untimed steps (its own short run): the process's one-off imports and
   compilations would otherwise land in the loop of the side that runs first. Reported: seconds
   per step (the training loop's wall time / steps, and the median step), mean train reward over
   the last 10 steps, and where a step's time goes, per side: generation, log-prob passes
   (old/reference policy), the update (forward, backward and the optimizer), collection (rewards,
   grouping, advantages, packing the batch) and Python overhead (the loop's rest). rllm's parts
   come from the trainer's ``time/*`` metrics and timers this benchmark puts around the backend's
   stage-5 passes; TRL's from timers it wraps around ``_generate``,
   ``_generate_and_score_completions``, ``_get_per_token_logps_and_entropies`` (a log-prob pass
   inside generate-and-score, the update's forward outside it) and ``training_step``, and hooks on
   the optimizer's step. The ratio is rllm's steps per second over TRL's.

   docs/transformers.md ("Figures") has the ratios, the breakdowns and the commands; the digit and
   text figures before 2026-12-06 ran TRL as installed (bf16 autocast and checkpointing).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

PROMPTS, GENERATIONS, LR, TEXT_TOKENS = 16, 8, 1e-3, 10
WARM_UP = 3
"""Untimed steps each side runs first, in this process, so neither side's loop pays the one-off costs."""
REAL_VOCAB = 151_936
"""Qwen2.5's vocabulary: the ``vocab`` race's model has this many rows in its (tied) embedding."""
VOCAB_PROMPTS, VOCAB_GENERATIONS = 4, 4
"""The ``vocab`` race's batch: a step at this vocabulary is ~100x the text race's on one CPU thread."""
PADDED_ROW_NORM = 10.0
"""How far the padded rows point away from the warm start's mean hidden state (see :func:`_vocab_data`)."""


@dataclass(frozen=True)
class Work:
    """The choices that set how much work a step does, printed for each side and equal on both by default."""

    precision: str
    """``fp32`` or ``bf16-mixed`` (float32 weights and AdamW state, the forward under bf16 autocast), rllm's names."""
    checkpointing: bool
    """Activation checkpointing in the update (recomputes the forward in the backward)."""
    scored: str
    """Which positions the log-prob passes and the loss project through the LM head."""
    threads: int
    """torch's intra-op threads."""

    def line(self) -> str:
        checkpointing = "on" if self.checkpointing else "off"
        autocast = "no autocast" if self.precision == "fp32" else "bf16 autocast, fp32 weights"
        return (
            f"{self.precision} ({autocast}), gradient checkpointing {checkpointing}, scores {self.scored}, "
            f"{self.threads} thread"
        )


COMPLETION = "completion positions only"
EQUAL = Work("fp32", False, COMPLETION, 1)
"""Both sides by default (``--precision bf16-mixed`` for the other equal choice). fp32: rllm's default, the
precision its equality tests check, TRL's with ``bf16=False``. Checkpointing only trades time for memory that is not
short here. TRL scores completion positions only where Triton runs (CUDA/XPU); the race turns that on for the CPU."""
TRL_AS_INSTALLED = Work("bf16-mixed", True, "every position (prompt and completion)", 1)
"""TRL 1.16's GRPOConfig defaults on a CPU without Triton (``--trl-as-installed``)."""


def default_run() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", "rllm.backend=transformers"]
        command.append(f"rllm.trainer.output_dir={tmp}/run")
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "Agg"})
        wall = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"rllm train failed:\n{done.stderr}")
        records = [json.loads(line) for line in Path(tmp, "run", "metrics.jsonl").read_text().splitlines()]
    curve = [(r["step"], r["val/digit_max/pass@1"]) for r in records if r["kind"] == "val"]
    first = next((step for step, value in curve if value >= 0.9), None)
    print("1. rllm train rllm.backend=transformers (defaults: digit_max, 20 tasks x 8 rollouts, 50 steps)")
    print(f"   wall time {wall:.1f} s (process, start-up included)")
    print(
        f"   val pass@1 {curve[0][1]:.2f} at step 0 -> {curve[-1][1]:.2f} at step {curve[-1][0]}; "
        f"first >= 0.9 at step {first}"
    )
    print("   curve: " + ", ".join(f"{step}:{value:.2f}" for step, value in curve))


@dataclass
class Timers:
    """Seconds spent in named parts of a training loop, summed over the run (the benchmark's own stopwatch)."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    inside: set[str] = field(default_factory=set)
    """The wrapped methods running now (TRL's log-prob pass counts as scoring inside generate-and-score)."""

    def wrap(self, owner: Any, name: str, part: Callable[[], str] | str) -> None:
        """Time every call of ``owner.name`` into ``part`` (or into the part ``part()`` names at the call)."""
        original = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            key = part if isinstance(part, str) else part()
            self.inside.add(name)
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.inside.discard(name)
                self.seconds[key] += time.perf_counter() - started

        setattr(owner, name, timed)
        self._restore.append((owner, name, original))

    def restore(self) -> None:
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore.clear()

    def __post_init__(self) -> None:
        self._restore: list[tuple[Any, str, Any]] = []

    @contextmanager
    def optimizer_steps(self) -> Iterator[None]:
        """Every ``torch.optim`` step inside the block, timed as ``optimizer`` (AdamW on both sides)."""
        from torch.optim import optimizer

        started: list[float] = []

        def pre(*_: Any) -> None:
            started.append(time.perf_counter())

        def post(*_: Any) -> None:
            self.seconds["optimizer"] += time.perf_counter() - started.pop()

        hooks = (
            optimizer.register_optimizer_step_pre_hook(pre),
            optimizer.register_optimizer_step_post_hook(post),
        )
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()
            self.restore()


@dataclass
class Result:
    """One side of the race: the loop's wall time, its steps and where their time went."""

    loop: float
    steps: int
    median_step: float
    reward: float
    parts: dict[str, float]
    """Seconds over the loop of generation, log-prob passes, update, collection; the rest is overhead."""
    within: dict[str, float]
    """Seconds of some parts' pieces: the model's sampling in generation, the optimizer's steps in the update."""

    @property
    def per_step(self) -> float:
        return self.loop / self.steps

    def line(self) -> str:
        return (
            f"{self.per_step * 1000:.1f} ms/step over the loop ({1 / self.per_step:.1f} steps/s), median step "
            f"{self.median_step * 1000:.1f} ms, reward {self.reward:.2f} (mean of the last 10 steps)"
        )

    def breakdown(self) -> str:
        parts = {**self.parts, "Python overhead (the rest)": self.loop - sum(self.parts.values())}
        ms = {name: seconds / self.steps * 1000 for name, seconds in {**parts, **self.within}.items()}
        main = ", ".join(f"{name} {ms[name]:.1f}" for name in parts)
        return f"ms per step: {main} (of which sampling {ms['sampling']:.1f}, optimizer step {ms['optimizer']:.1f})"


def _text_data(tmp: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The warm start both sides load (made once per race) and the text tasks."""
    from rllm.tasks import TEXT_TASKS
    from rllm_transformers.warm_start import build_warm_start

    warm = tmp / "warm"
    if not warm.exists():
        build_warm_start(warm)
    return warm, TEXT_TASKS["text_digit_max"]()


def _vocab_data(tmp: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The warm start with its tied embedding padded to :data:`REAL_VOCAB` rows, saved with its tokenizer.

    The text tokenizer has 101 tokens; the other 151,835 rows are the vocabulary a real model's
    LM head, softmax, sampler and log-prob passes work through. Zero rows would take most of the
    probability (151,835 logits of 0 against the warm start's ~10), and so did the mean hidden
    state reversed (a third of the sampled tokens): every padded row is the direction that the
    LM head's inputs on every task's prompt and answer lean towards the most (each projects at
    least 2.5 on it), reversed and :data:`PADDED_ROW_NORM` long, so their logits are below -20
    there and the task's reward means what it meant.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from rllm_transformers.model import load_tokenizer

    warm, tasks = _text_data(tmp)
    padded = tmp / "vocab"
    if padded.exists():
        return padded, tasks
    tokenizer = load_tokenizer(str(warm))
    model = AutoModelForCausalLM.from_pretrained(warm)
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": t["question"]}], add_generation_prompt=True, tokenize=False
        )
        + f"Answer: {answer}{tokenizer.eos_token}"
        for t in tasks
        for answer in range(10)
    ]
    encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    seen: list[torch.Tensor] = []  # what the LM head reads: the final norm's output
    hook = model.get_output_embeddings().register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    with torch.no_grad():
        model(**encoded)
    hook.remove()
    hidden = seen[0][encoded["attention_mask"].bool()].detach()
    # the direction all these hidden states lean towards the most (the widest smallest projection, a soft minimum)
    direction = hidden.mean(0).requires_grad_()
    optimizer = torch.optim.Adam([direction], lr=0.05)
    for _ in range(150):
        unit = direction / direction.norm()
        softmin = torch.logsumexp(-4 * (hidden @ unit), 0) / 4
        optimizer.zero_grad()
        softmin.backward()
        optimizer.step()
    with torch.no_grad():
        old = model.get_input_embeddings().weight.shape[0]
        model.resize_token_embeddings(REAL_VOCAB, mean_resizing=False)
        model.get_input_embeddings().weight[old:] = -PADDED_ROW_NORM * direction / direction.norm()
    model.save_pretrained(padded)
    tokenizer.save_pretrained(padded)
    return padded, tasks


def rllm_race(task: str, steps: int, out: Path, seed: int = 0, work: Work = EQUAL) -> Result:
    from simple_workflow import text_reward_function, upstream_simple_workflow

    from rllm.config import load_config
    from rllm.trainer import UnifiedTrainer
    from rllm.trainer.logging import read_metrics
    from rllm_transformers.backend import TransformersBackend
    from rllm_transformers.engine import TransformersEngine

    prompts, generations = batch_of(task)
    overrides = [
        "rllm.backend=transformers",
        "rllm.transformers.device=cpu",
        f"rllm.transformers.lr={LR}",
        f"rllm.transformers.seed={seed}",
        f"rllm.transformers.precision={work.precision}",
        f"rllm.transformers.gradient_checkpointing={str(work.checkpointing).lower()}",
        f"rllm.transformers.num_threads={work.threads}",  # the padded model is over the one-thread size
        f"rllm.data.train_batch_size={prompts}",
        f"rllm.rollout.n={generations}",
        f"rllm.trainer.total_batches={steps}",
        "rllm.trainer.total_epochs=1000",
        "rllm.trainer.test_freq=0",
        "rllm.trainer.val_before_train=false",
        "rllm.trainer.save_freq=0",
        "rllm.trainer.logger=[jsonl]",
        f"rllm.trainer.output_dir={out}",
    ]
    workflow: tuple[Any, ...] = ()
    if task != "digit":  # rLLM's SimpleWorkflow: the chat prompt through get_model_response, text_reward
        warm, tasks = (_text_data if task == "text" else _vocab_data)(out.parent)
        overrides += [f"rllm.transformers.model={warm}", f"rllm.transformers.max_new_tokens={TEXT_TOKENS}"]
        workflow = (upstream_simple_workflow(), tasks, tasks, {"reward_function": text_reward_function})
    timers = Timers()
    timers.wrap(TransformersBackend, "_statistics", "log-prob passes")  # stage 5: the old (and reference) policy
    timers.wrap(TransformersEngine, "sample", "sampling")  # the model's token loop, inside generation
    with timers.optimizer_steps():
        trainer = UnifiedTrainer(None, load_config(overrides=overrides), *workflow, progress=False)
        started = time.perf_counter()
        try:
            trainer.fit()
        finally:
            trainer.shutdown()
        elapsed = time.perf_counter() - started
    records = [r for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"]
    rewards = [next(v for k, v in r.items() if k.startswith("reward/") and k.endswith("/mean")) for r in records]
    stage: dict[str, float] = defaultdict(float)
    for record in records:
        for key, value in record.items():
            if key.startswith("time/"):
                stage[key[len("time/") :]] += value
    logps = timers.seconds["log-prob passes"]
    parts = {
        "generation": stage["generate"],
        "log-prob passes": logps,
        "update": stage["update"],
        "collection": stage["group"] + stage["dynamic_sampling"] + stage["backend_batch"] - logps + stage["advantage"],
    }
    within = {"sampling": timers.seconds["sampling"], "optimizer": timers.seconds["optimizer"]}
    median = statistics.median(r["time/step"] for r in records)
    return Result(elapsed, steps, median, statistics.fmean(rewards[-10:]), parts, within)


def trl_race(task: str, steps: int, out: Path, seed: int = 0, work: Work = EQUAL) -> Result:
    import torch
    from datasets import Dataset
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from rllm.tasks import VOCAB, digit_max_tasks, text_reward
    from rllm_transformers.model import char_tokenizer, load_tokenizer, tiny_model

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    if task == "digit":
        tokenizer = char_tokenizer()
        model = tiny_model(OmegaConf.create({"hidden_size": 64, "num_layers": 2}), len(tokenizer), 14, 13)
        rows = [
            {"prompt": "".join(VOCAB[t] for t in task["prompt"]), "answer": str(task["answers"][0])}
            for task in digit_max_tasks()
        ]
        tokens = 1

        def reward(completions: list[str], answer: list[str], **kwargs: Any) -> list[float]:
            return [float(c.strip() == a) for c, a in zip(completions, answer, strict=True)]

    else:  # conversational: TRL applies the tokenizer's chat template, as rllm's engine does
        warm, tasks = (_text_data if task == "text" else _vocab_data)(out.parent)
        tokenizer = load_tokenizer(str(warm))
        model = AutoModelForCausalLM.from_pretrained(warm)
        rows = [
            {"prompt": [{"role": "user", "content": t["question"]}], "ground_truth": t["ground_truth"]} for t in tasks
        ]
        tokens = TEXT_TOKENS

        def reward(completions: list[Any], ground_truth: list[int], **kwargs: Any) -> list[float]:
            return [
                text_reward({"ground_truth": truth}, completion[-1]["content"])
                for completion, truth in zip(completions, ground_truth, strict=True)
            ]

    tokenizer.padding_side = "left"
    prompts, generations = batch_of(task)
    args = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=work.precision == "bf16-mixed",
        gradient_checkpointing=work.checkpointing,
        per_device_train_batch_size=prompts * generations,
        num_generations=generations,
        max_completion_length=tokens,
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        beta=0.0,
        loss_type="dapo",
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=seed,
        disable_tqdm=True,
    )
    data = Dataset.from_list(rows)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)  # one dict per step on stdout otherwise
    timers = Timers()
    scoring = "_generate_and_score_completions"
    timers.wrap(trainer, "_generate", "generation")
    timers.wrap(trainer, scoring, "generate and score")
    # the old/ref passes run inside generate-and-score; the same method is the update's forward otherwise
    timers.wrap(
        trainer,
        "_get_per_token_logps_and_entropies",
        lambda: "log-prob passes" if scoring in timers.inside else "update forward",
    )
    timers.wrap(trainer, "training_step", "training step")
    with timers.optimizer_steps(), _trl_scores(work):
        started = time.perf_counter()
        trainer.train()
        elapsed = time.perf_counter() - started
    seconds = timers.seconds
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    rewards = [entry["reward"] for entry in logged]
    parts = {
        "generation": seconds["generation"],
        "log-prob passes": seconds["log-prob passes"],
        # forward and backward (the training step without its generate-and-score), and the optimizer step
        "update": seconds["training step"] - seconds["generate and score"] + seconds["optimizer"],
        # rewards, advantages, tokenising and padding: generate-and-score without generation and log-prob passes
        "collection": seconds["generate and score"] - seconds["generation"] - seconds["log-prob passes"],
    }
    within = {"sampling": seconds["generation"], "optimizer": seconds["optimizer"]}
    median = statistics.median(entry["step_time"] for entry in logged)
    return Result(elapsed, steps, median, statistics.fmean(rewards[-10:]), parts, within)


@contextmanager
def _trl_scores(work: Work) -> Iterator[None]:
    """TRL's fused LM head scores completion positions only where Triton runs; at equal work it does so here too.

    ``trl.trainer.utils`` asks ``_use_triton(device)`` whether to project only the positions whose
    label is not -100 (the kernels themselves ask their own module, so the CPU keeps torch's tiles).
    """
    from trl.trainer import utils

    original = utils._use_triton
    if work.scored == COMPLETION:
        utils._use_triton = lambda device: True
    try:
        yield
    finally:
        utils._use_triton = original


def batch_of(task: str) -> tuple[int, int]:
    """Prompts and generations per step in a race (the same on both sides)."""
    return (VOCAB_PROMPTS, VOCAB_GENERATIONS) if task == "vocab" else (PROMPTS, GENERATIONS)


RACES = {
    "digit": "digit_max, {prompts} prompts x {generations} generations of 1 token (the digit tokenizer, prompt ids)",
    "text": (
        "text_digit_max, {prompts} prompts x {generations} generations of up to {tokens} tokens (the text "
        "tokenizer's chat prompt, from the warm start; rLLM's SimpleWorkflow with text_reward on rllm's side)"
    ),
    "vocab": (
        "text_digit_max at vocabulary {vocab}, {prompts} prompts x {generations} generations of up to {tokens} "
        "tokens (the warm start, its embedding padded to {vocab} rows; otherwise as the text race)"
    ),
}


def race(task: str, steps: int, seed: int = 0, repeats: int = 1, work: Work = EQUAL, trl_work: Work = EQUAL) -> None:
    prompts, generations = batch_of(task)
    what = RACES[task].format(prompts=prompts, generations=generations, tokens=TEXT_TOKENS, vocab=REAL_VOCAB)
    print(f"\n2. the race on {what}: lr {LR}, {steps} steps, seed {seed}")
    trl = importlib.util.find_spec("trl") is not None
    print(f"   rllm settings: {work.line()}; {prompts} prompts x {generations} rollouts, lr {LR}, {steps} steps")
    print(f"   TRL settings:  {trl_work.line()}; {prompts} prompts x {generations} rollouts, lr {LR}, {steps} steps")
    if trl_work != work:
        print("   (TRL as installed: unequal work, for comparison with the published ratios only)")
    with tempfile.TemporaryDirectory() as tmp:
        # untimed warm-ups: the process's one-off imports and compilations (transformers' masking code, torch's
        # kernels, numba's loops) would otherwise land in whichever side's loop runs first
        warm_up = 1 if task == "vocab" else WARM_UP  # a step at this vocabulary compiles nothing new
        rllm_race(task, warm_up, Path(tmp, "rllm-warm-up"), work=work)
        if trl:
            trl_race(task, warm_up, Path(tmp, "trl-warm-up"), work=trl_work)
        ratios: list[tuple[float, float, float]] = []
        for run in range(repeats):  # the sides alternate, so a change in the machine's load lands on both
            ours = rllm_race(task, steps, Path(tmp, f"rllm-{run}"), seed, work)
            print(f"   rllm transformers backend: {ours.line()}")
            print(f"      {ours.breakdown()}")
            if not trl:
                print(
                    "   TRL: not installed, skipped (pip install trl to race it; it is needed for this benchmark only)"
                )
                return
            theirs = trl_race(task, steps, Path(tmp, f"trl-{run}"), seed, trl_work)
            print(f"   TRL GRPOTrainer:           {theirs.line()}")
            print(f"      {theirs.breakdown()}")
            ratios.append(
                (theirs.per_step / ours.per_step, theirs.median_step / ours.median_step, ours.reward - theirs.reward)
            )
            print(
                f"   steps/s rllm/TRL: {ratios[-1][0]:.2f} over the loop, {ratios[-1][1]:.2f} at the median step "
                f"(goal >= 1.5); reward rllm - TRL: {ratios[-1][2]:+.2f}"
            )
        if repeats > 1:
            loop, median, reward = (statistics.median(column) for column in zip(*ratios, strict=True))
            print(
                f"   median of {repeats} alternating runs: steps/s rllm/TRL {loop:.2f} over the loop, {median:.2f} "
                f"at the median step; reward rllm - TRL {reward:+.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--text-steps", type=int, default=60)
    parser.add_argument("--skip-default", action="store_true")
    parser.add_argument("--tasks", nargs="+", choices=sorted(RACES), default=sorted(RACES))
    parser.add_argument("--vocab-steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0, help="both sides' seed in the races (default 0)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side per race, alternating (default 1)")
    parser.add_argument(
        "--trl-as-installed", action="store_true", help="TRL with its own defaults (bf16, checkpointing): unequal work"
    )
    parser.add_argument(
        "--precision", choices=["fp32", "bf16-mixed"], default="fp32", help="both sides' precision (default fp32)"
    )
    args = parser.parse_args()
    work = replace(EQUAL, precision=args.precision)
    if not args.skip_default:
        default_run()
    steps = {"digit": args.steps, "text": args.text_steps, "vocab": args.vocab_steps}
    for task in args.tasks:
        race(task, steps[task], args.seed, args.repeats, work, TRL_AS_INSTALLED if args.trl_as_installed else work)


if __name__ == "__main__":
    main()
