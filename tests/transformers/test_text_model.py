"""The tiny model's text tokenizer and chat template, and the warm start made from the text tasks.

The warm start is checked through the backend's own door for a model directory
(``rllm.transformers.model=DIR``): it answers the text tasks in their grammar where the
untrained tiny model does not, and it still trains.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

from omegaconf import DictConfig

from rllm.cli.main import main
from rllm.engine.chat import render_chatml
from rllm.errors import ConfigError, OutputFileError
from rllm.tasks import TEXT_TASKS, parse_answer, text_reward
from rllm.trainer import AgentTrainer, UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm_transformers.model import text_tokenizer
from rllm_transformers.warm_start import LESSONS, build_warm_start
from rllm_transformers.warm_start import main as warm_start_main

MakeConfig = Callable[..., DictConfig]
PRINTABLE = "".join(chr(code) for code in range(0x20, 0x7F))
SPECIALS = {"<|pad|>": 0, "<|bos|>": 1, "<|im_end|>": 2, "<|unk|>": 3, "<|im_start|>": 4}
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 1+1?"},
    {"role": "assistant", "content": "Answer: 2"},
    {"role": "user", "content": "And 2+2?"},
]


# -- the tokenizer -----------------------------------------------------------------------------------
def test_every_printable_ascii_character_is_one_token_and_decodes_back() -> None:
    tokenizer = text_tokenizer()
    assert len(tokenizer) == 5 + 1 + 95  # specials, newline, space to '~'
    for char in PRINTABLE:
        ids = tokenizer.encode(char, add_special_tokens=False)
        assert ids == [ord(char) - 0x20 + 6], char  # ids 6-100, in character order
        assert tokenizer.decode(ids) == char
    assert tokenizer.encode("\n", add_special_tokens=False) == [5]
    text = PRINTABLE + "\n" + PRINTABLE[::-1] + "  two  spaces "
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_special_tokens_are_single_ids_and_skipped_on_request() -> None:
    tokenizer = text_tokenizer()
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (
        0,
        1,
        2,
        3,
    )
    for token, index in SPECIALS.items():
        assert tokenizer.encode(token, add_special_tokens=False) == [index]
    ids = tokenizer.encode("<|im_start|>Hi<|im_end|>", add_special_tokens=False)
    assert ids == [4, ord("H") - 26, ord("i") - 26, 2]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "Hi"
    assert tokenizer.decode(ids) == "<|im_start|>Hi<|im_end|>"
    # a character outside printable ASCII (a tab, an accent) is the unknown token, not an error
    assert tokenizer.encode("a\tb\u00e9", add_special_tokens=False) == [ord("a") - 26, 3, ord("b") - 26, 3]


def test_chat_template_renders_chatml_by_hand() -> None:
    tokenizer = text_tokenizer()
    rendered = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 1+1?<|im_end|>\n"
        "<|im_start|>assistant\nAnswer: 2<|im_end|>\n<|im_start|>user\nAnd 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer.apply_chat_template(CHAT[1:2], add_generation_prompt=True, return_dict=False)
    text = [ord(c) - 26 for c in "What is 1+1?"]
    assert ids == [4, *(ord(c) - 26 for c in "user"), 5, *text, 2, 5, 4, *(ord(c) - 26 for c in "assistant"), 5]
    without = tokenizer.apply_chat_template(CHAT[1:2], add_generation_prompt=False, tokenize=False)
    assert without == "<|im_start|>user\nWhat is 1+1?<|im_end|>\n"
    tool = tokenizer.apply_chat_template([{"role": "tool", "content": "42"}], tokenize=False)
    assert tool == "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"


@pytest.mark.parametrize(
    "messages",
    [
        CHAT,
        CHAT[1:2],
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "  padded  "},
            {"role": "tool", "content": "r"},
        ],
    ],
)
def test_chat_template_is_the_engines_chatml(messages: list[dict]) -> None:
    """The same text as rllm.engine.chat.render_chatml, which splits completions at the same <|im_end|>."""
    tokenizer = text_tokenizer()
    for prompt in (True, False):
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=prompt, tokenize=False)
        assert rendered == render_chatml(messages, add_generation_prompt=prompt)


def test_a_reply_ending_in_eos_extends_the_prompt_into_the_next_turns_history() -> None:
    """What the model samples after the generation prompt (reply + EOS) starts the next turn's rendering of it."""
    tokenizer = text_tokenizer()
    prompt = tokenizer.apply_chat_template(CHAT[:2], add_generation_prompt=True, return_dict=False)
    reply = [*tokenizer.encode("Answer: 2", add_special_tokens=False), tokenizer.eos_token_id]
    history = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, return_dict=False)
    assert history[: len(prompt) + len(reply)] == prompt + reply


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([{"role": "robot", "content": "hi"}], "role robot is not one of system, user, assistant, tool"),
        ([{"role": "user", "content": None}], "the content of a user message is not a string"),
        ([{"role": "user", "content": "hi"}], "this template renders no tools"),
    ],
)
def test_chat_template_refuses_what_it_cannot_render(messages: list[dict], message: str) -> None:
    from jinja2 import TemplateError

    tools = [{"type": "function", "function": {"name": "f"}}] if "tools" in message else None
    with pytest.raises(TemplateError, match=message):
        text_tokenizer().apply_chat_template(messages, tools=tools, tokenize=False)


def test_saved_tokenizer_reloads_with_auto_tokenizer_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants
    from transformers import AutoTokenizer

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    tokenizer = text_tokenizer()
    tokenizer.save_pretrained(tmp_path / "tok")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    text = PRINTABLE + "\n<|im_start|>x<|im_end|>"
    assert loaded.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)
    assert (loaded.pad_token, loaded.bos_token, loaded.eos_token, loaded.unk_token) == (
        "<|pad|>",
        "<|bos|>",
        "<|im_end|>",
        "<|unk|>",
    )
    assert loaded.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False) == (
        tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    )


def test_a_tiny_text_model_directory_loads_with_its_tokenizer_as_saved(tiny_config: MakeConfig, tmp_path: Path) -> None:
    """transformers would load a qwen2 directory's tokenizer as Qwen2Tokenizer, dropping spaces and newlines."""
    trainer = UnifiedTrainer(None, tiny_config("rllm.transformers.tokenizer=text"), progress=False)
    trainer.backend.model.save_pretrained(tmp_path / "saved")
    trainer.backend.tokenizer.save_pretrained(tmp_path / "saved")
    trainer.shutdown()
    loaded = UnifiedTrainer(None, tiny_config(f"rllm.transformers.model={tmp_path / 'saved'}"), progress=False)
    try:
        tokenizer = loaded.backend.tokenizer
        text = PRINTABLE + "\n" + PRINTABLE
        assert tokenizer.encode(text, add_special_tokens=False) == text_tokenizer().encode(
            text, add_special_tokens=False
        )
        assert tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False) == render_chatml(
            CHAT, add_generation_prompt=True
        )
    finally:
        loaded.shutdown()


@pytest.mark.parametrize("std", [0.02, 0.1])
def test_init_std_is_the_std_of_tinys_initial_weights(tiny_config: MakeConfig, std: float) -> None:
    trainer = UnifiedTrainer(None, tiny_config(f"rllm.transformers.init_std={std}"), progress=False)
    try:
        weight = trainer.backend.model.model.layers[0].mlp.up_proj.weight.detach()  # 128 x 64 normal draws
        assert weight.std().item() == pytest.approx(std, rel=0.05)
        assert abs(weight.mean().item()) < std / 10  # the mean of 8192 draws is within std / 90 of 0 per sigma
    finally:
        trainer.shutdown()


# -- selecting it ------------------------------------------------------------------------------------
def test_tokenizer_text_builds_tiny_with_it_and_trains_the_digit_tasks(tiny_config: MakeConfig) -> None:
    """The digit tasks are re-encoded through the text tokenizer, as for any model without the digit ids."""
    trainer = UnifiedTrainer(None, tiny_config("rllm.transformers.tokenizer=text"), progress=False)
    try:
        assert len(trainer.backend.tokenizer) == 101
        assert trainer.backend.model.config.vocab_size == 101
        assert trainer.backend.model.config.bos_token_id == 1
        trainer.fit()
        (task, *_) = trainer.backend.builtin_task().train_dataset
        assert task["prompt"] == [ord("0") - 26, ord("0") - 26, ord("=") - 26]  # "0 0 =" as characters
    finally:
        trainer.shutdown()
    records = read_metrics(trainer.output_dir / METRICS_FILE)
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2]


def test_an_unknown_tokenizer_is_one_line_at_rllm_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "rllm.backend=transformers", "rllm.transformers.tokenizer=words"]) == 2
    assert capsys.readouterr().err.strip() == (
        "rllm config: error: rllm.transformers.tokenizer must be one of digits, text; got 'words'."
    )


def test_tokenizer_text_with_a_model_directory_is_refused_at_every_door(
    tiny_config: MakeConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text_tokenizer().save_pretrained(tmp_path / "model")  # never read: the refusal comes first
    overrides = [f"rllm.transformers.model={tmp_path / 'model'}", "rllm.transformers.tokenizer=text"]
    message = "rllm.transformers.tokenizer=text applies to model=tiny only"
    with pytest.raises(ConfigError, match=message):
        UnifiedTrainer(None, tiny_config(*overrides), progress=False)
    with pytest.raises(ConfigError, match=message):
        AgentTrainer(config=[*overrides, f"rllm.trainer.output_dir={tmp_path / 'run'}"], backend="transformers").train()
    assert main(["train", "rllm.backend=transformers", f"rllm.trainer.output_dir={tmp_path / 'cli'}", *overrides]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"rllm train: error: {message}; ")
    assert not (tmp_path / "cli").exists() and not (tmp_path / "run").exists()


# -- the warm start ----------------------------------------------------------------------------------
def _replies(config: DictConfig, questions: list[str]) -> list[str]:
    """The greedy reply to each question from the backend's own engine, as its validation would sample."""
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        engine = trainer.backend.init_rollout_engine()
        engine.is_validation = True

        async def ask() -> list:
            return await asyncio.gather(*(engine.chat([{"role": "user", "content": q}]) for q in questions))

        return [generation.text for generation in asyncio.run(ask())]
    finally:
        trainer.shutdown()


def test_the_warm_start_answers_in_the_format_where_untrained_tiny_does_not(
    tiny_config: MakeConfig, tmp_path: Path
) -> None:
    out = tmp_path / "warm"
    assert warm_start_main([str(out), "--seed", "3"]) == 0
    files = sorted(path.name for path in out.iterdir())
    assert "model.safetensors" in files and "tokenizer.json" in files and "chat_template.jinja" in files
    assert sum(path.stat().st_size for path in out.iterdir()) < 2_000_000

    tasks = [task for build in TEXT_TASKS.values() for task in build()]
    questions = [task["question"] for task in tasks]
    warm = _replies(tiny_config(f"rllm.transformers.model={out}"), questions)
    untrained = _replies(tiny_config("rllm.transformers.tokenizer=text"), questions)
    parsed = [sum(parse_answer(reply) is not None for reply in replies) / len(tasks) for replies in (warm, untrained)]
    assert parsed[0] >= 0.95 and parsed[1] <= 0.05, parsed
    assert all(reply.startswith("Answer: ") for reply in warm if parse_answer(reply) is not None)
    # it learned the grammar, not the answers (they were drawn at random): RL has them all to learn
    accuracy = sum(text_reward(task, reply) for task, reply in zip(tasks, warm, strict=True)) / len(tasks)
    assert accuracy <= 0.3
    # but it reads digits: the reading lessons' questions, for each digit, get that digit back
    lessons = [(lesson.format(digit=digit), digit) for lesson in LESSONS for digit in range(10)]
    read = _replies(tiny_config(f"rllm.transformers.model={out}"), [question for question, _ in lessons])
    assert [parse_answer(reply) for reply in read] == [digit for _, digit in lessons], read

    # and the directory trains through the backend's model-directory path
    trainer = UnifiedTrainer(None, tiny_config(f"rllm.transformers.model={out}"), progress=False)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    records = read_metrics(trainer.output_dir / METRICS_FILE)
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2]


def test_the_warm_start_is_the_same_bytes_for_a_seed(tmp_path: Path) -> None:
    build_warm_start(tmp_path / "a", seed=1, steps=5)
    build_warm_start(tmp_path / "b", seed=1, steps=5)
    build_warm_start(tmp_path / "c", seed=2, steps=5)
    weights = [(tmp_path / name / "model.safetensors").read_bytes() for name in "abc"]
    assert weights[0] == weights[1]
    assert weights[0] != weights[2]


def test_the_warm_start_takes_an_initial_std(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoModelForCausalLM

    def std(name: str) -> float:
        model = AutoModelForCausalLM.from_pretrained(tmp_path / name)
        return float(model.model.layers[0].mlp.up_proj.weight.detach().std())

    # one AdamW step of lr 0.003 moves each weight by at most 0.003
    assert warm_start_main([str(tmp_path / "default"), "--steps", "1"]) == 0
    assert std("default") == pytest.approx(0.1, rel=0.05)
    assert warm_start_main([str(tmp_path / "narrow"), "--steps", "1", "--init-std", "0.04"]) == 0
    assert std("narrow") == pytest.approx(0.04, rel=0.1)
    assert warm_start_main([str(tmp_path / "zero"), "--init-std", "0"]) == 2
    assert "init_std=0.0: the std of the initial weights must be a number > 0" in capsys.readouterr().err
    assert not (tmp_path / "zero").exists()


def test_the_warm_start_refuses_a_directory_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(OutputFileError, match="exists and is not an empty directory"):
        build_warm_start(tmp_path / "used")
    assert warm_start_main([str(tmp_path / "used")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("python -m rllm_transformers.warm_start: error: ")
    assert sorted(p.name for p in (tmp_path / "used").iterdir()) == ["notes.txt"]
    assert warm_start_main([str(tmp_path / "new"), "--steps", "0"]) == 2
    assert "steps=0: the warm start needs at least one training step" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    assert warm_start_main([str(tmp_path / "new"), "--lr", "0"]) == 2
    assert "lr=0.0: the learning rate must be a number > 0" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_without_the_extra_the_warm_start_command_is_one_line_naming_it(tmp_path: Path) -> None:
    """torch made unimportable in a fresh process, as where the extra is not installed."""
    code = (
        "import runpy, sys; sys.modules['torch'] = None; "
        f"sys.argv = ['warm_start', {str(tmp_path / 'warm')!r}]; "
        "runpy.run_module('rllm_transformers.warm_start', run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "python -m rllm_transformers.warm_start: error: the warm start needs torch: pip install "
        "'rllm[transformers]' (on a machine without a GPU, install torch's CPU build first)."
    )
    assert not (tmp_path / "warm").exists()


@pytest.mark.parametrize("argv", [["OUT", "--steps", "1"], ["--help"]])
def test_the_warm_start_on_a_full_device_is_one_line(tmp_path: Path, argv: list[str]) -> None:
    """Its last line (or --help) to /dev/full: one error line and status 1, not "Exception ignored" and 120."""
    argv = [str(tmp_path / "warm") if word == "OUT" else word for word in argv]
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [sys.executable, "-m", "rllm_transformers.warm_start", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    err = done.stderr.decode()
    assert done.returncode == 1 and "Exception ignored" not in err, err
    assert err.strip() == (
        "python -m rllm_transformers.warm_start: error: Could not write standard output: No space left on device."
    )
