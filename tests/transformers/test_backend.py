"""The transformers backend on the tiny model: tokenizer, sampling, engine batching, the update, every
estimator and loss, roles, checkpoints, loading a saved model, and the one-line errors for bad input."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import DictConfig, OmegaConf
from safetensors.torch import load_file, save_file

from rllm.errors import ConfigError, RLLMWarning, TrainerError
from rllm.losses import loss_entry, loss_names
from rllm.plugins.manager import get_plugin_manager
from rllm.tasks import EQUALS, digit_max_tasks
from rllm.trainer import AgentTrainer, UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.types import Episode, Step, TerminationReason, Trajectory
from rllm.workflows import Workflow
from rllm_transformers.engine import Sampling, TransformersEngine, UniformStream, sampling_log_probs
from rllm_transformers.model import char_tokenizer

MakeConfig = Callable[..., DictConfig]


def _fit(config: DictConfig, **kwargs: object) -> tuple[UnifiedTrainer, list[dict]]:
    trainer = UnifiedTrainer(None, config, progress=False, **kwargs)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return trainer, read_metrics(trainer.output_dir / METRICS_FILE)


def _train(records: list[dict]) -> list[dict]:
    return [r for r in records if r["kind"] == "train"]


# -- tokenizer and sampling ----------------------------------------------------------------------
def test_char_tokenizer_gives_the_digit_tasks_own_ids() -> None:
    tokenizer = char_tokenizer()
    assert tokenizer.encode("35=", add_special_tokens=False) == [3, 5, EQUALS]
    assert tokenizer.encode("9+1>", add_special_tokens=False) == [9, 10, 1, 12]
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (13, 14)
    assert tokenizer.decode([4, 2, 13], skip_special_tokens=True) == "42"


def test_sampling_distribution_after_top_k_and_top_p_by_hand() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    # top_p 0.6: 0.5 alone is short of 0.6, so the second token stays; renormalised 0.5/0.8, 0.3/0.8
    nucleus = sampling_log_probs(logits, Sampling(top_p=0.6)).exp()[0]
    assert torch.allclose(nucleus, torch.tensor([0.625, 0.375, 0.0]))
    assert torch.allclose(sampling_log_probs(logits, Sampling(top_k=1)).exp()[0], torch.tensor([1.0, 0.0, 0.0]))
    # temperature 0.5 squares the probabilities before renormalising: .25, .09, .04 over .38
    tempered = sampling_log_probs(logits, Sampling(temperature=0.5)).exp()[0]
    assert torch.allclose(tempered, torch.tensor([0.25, 0.09, 0.04]) / 0.38)


def _engine(max_new_tokens: int = 3) -> TransformersEngine:
    from rllm_transformers.model import tiny_model

    tokenizer = char_tokenizer()
    torch.manual_seed(0)
    options = OmegaConf.create({"hidden_size": 32, "num_layers": 1})
    model = tiny_model(options, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    return TransformersEngine(
        model, tokenizer, torch.device("cpu"), UniformStream(0), Sampling(), max_new_tokens, 8, True
    )


def test_engine_answers_concurrent_calls_in_one_batch_with_the_models_log_probs() -> None:
    engine = _engine()
    batches: list[int] = []
    sample = engine.sample
    engine.sample = lambda requests: batches.append(len(requests)) or sample(requests)  # type: ignore[method-assign]
    prompts = [[1, 2, EQUALS], [7, EQUALS], [3, 4, 5, 6, EQUALS]]

    async def calls() -> list:
        return await asyncio.gather(*(engine.generate(p) for p in prompts))

    generations = asyncio.run(calls())
    assert batches == [3]
    for prompt, generation in zip(prompts, generations, strict=True):
        assert 1 <= len(generation.response_ids) <= 3
        assert generation.finish_reason == ("stop" if generation.response_ids[-1] == 13 else "length")
        # each token's log-prob, recomputed by one unpadded forward pass of the whole sequence
        ids = torch.tensor([prompt + generation.response_ids])
        with torch.no_grad():
            log_p = torch.log_softmax(engine.model(input_ids=ids).logits[0].float(), -1)
        expected = [float(log_p[len(prompt) - 1 + i, t]) for i, t in enumerate(generation.response_ids)]
        assert generation.logprobs == pytest.approx(expected, abs=1e-4)


def test_engine_returns_prompt_length_for_a_prompt_over_the_limit() -> None:
    generation = asyncio.run(_engine().generate(list(range(10))))
    assert (generation.finish_reason, generation.response_ids) == ("prompt_length", [])


# -- training: every estimator, every loss, roles -------------------------------------------------
def _outcome_estimators() -> list[str]:
    registry = get_plugin_manager().estimators
    return [name for name in registry.names() if set(registry.resolve(name).requires) <= {"response_lengths"}]


@pytest.mark.parametrize("estimator", _outcome_estimators())
def test_every_outcome_estimator_trains_two_steps(tiny_config: MakeConfig, estimator: str) -> None:
    extra = ["rllm.algorithm.estimator_options.components='0.5*grpo + 0.5*rloo'"] if estimator == "mix" else []
    _, records = _fit(tiny_config(f"rllm.algorithm.adv_estimator={estimator}", *extra))
    steps = _train(records)
    assert [r["step"] for r in steps] == [1, 2]
    assert all(math.isfinite(r["actor/loss"]) and r["actor/tokens"] > 0 for r in steps)
    assert all(r["workflow/retries"] == 0 for r in steps)  # no rollout failed (a pad token once made them retry)


REQUIRED = {"dro": ["rllm.algorithm.loss_options.dro_beta=0.1"]}
"""Options a loss requires (dro's dro_beta has no default)."""


def _overrides(loss: str) -> list[str]:
    """The loss, its required options, and its aggregation mode when it allows only some (GMPO pins one)."""
    modes = loss_entry(loss).agg_modes
    mode = [f"rllm.algorithm.loss_agg_mode={modes[0]}"] if modes and "token-mean" not in modes else []
    return [f"rllm.algorithm.loss_fn={loss}", *REQUIRED.get(loss, []), *mode]


@pytest.mark.parametrize("loss", loss_names())
def test_every_loss_trains_two_steps_and_moves_the_policy(tiny_config: MakeConfig, loss: str) -> None:
    overrides = _overrides(loss)
    trainer, records = _fit(tiny_config(*overrides))
    fresh = UnifiedTrainer(None, tiny_config(*overrides), progress=False)
    moved = [
        float((a - b).detach().abs().max())
        for a, b in zip(trainer.backend.model.parameters(), fresh.backend.model.parameters(), strict=True)
    ]
    fresh.shutdown()
    assert max(moved) > 0  # same seed, same initialisation: only training moved it
    assert all(math.isfinite(r["actor/grad_norm"]) for r in _train(records))


class TwoRoles(Workflow):
    """Two one-token trajectories per episode, 'first' and 'second', each rewarded for answering max(a, b)."""

    async def run(self, task: dict, uid: str, **kwargs: object) -> Episode:
        trajectories = []
        for name in ("first", "second"):
            reply = await self.rollout_engine.generate(task["prompt"], max_tokens=1)
            reward = float(reply.response_ids[0] == task["answers"][0])
            step = Step(
                prompt_ids=task["prompt"], response_ids=reply.response_ids, logprobs=reply.logprobs, reward=reward
            )
            trajectories.append(Trajectory(name=name, steps=[step]))
        return Episode(termination_reason=TerminationReason.ENV_DONE, is_correct=True, trajectories=trajectories)


def test_loss_fn_map_applies_each_roles_loss(tiny_config: MakeConfig) -> None:
    """One mini-batch, one epoch: the ratio is 1, so ppo's token-mean loss is -mean(A) = 0 over GRPO's one-token
    groups (advantages sum to zero per group), while reinforce's is -mean(A * log p), which is not."""
    config = tiny_config(
        "rllm.algorithm.loss_fn_map={first: ppo, second: reinforce}",
        "rllm.trainer.total_batches=1",
        "rllm.data.train_batch_size=20",
        "rllm.rollout.n=8",
    )
    _, records = _fit(config, workflow_class=TwoRoles)
    (step,) = _train(records)
    assert step["advantage/second/std"] > 0  # some groups were partly solved
    assert abs(step["actor/first/loss"]) < 1e-6
    assert abs(step["actor/second/loss"]) > 1e-3


def test_kl_clip_and_aggregation_keys_are_honoured(tiny_config: MakeConfig) -> None:
    config = tiny_config(
        "rllm.algorithm.use_kl_loss=true",
        "rllm.algorithm.kl_beta=0.1",
        "rllm.algorithm.loss_agg_mode=seq-mean-token-mean",
        "rllm.algorithm.eps_clip=0.01",
        "rllm.transformers.ppo_epochs=2",
        "rllm.transformers.mini_batches=2",
        "rllm.transformers.micro_batches=2",
        "rllm.algorithm.rollout_correction.tis_mode=token",
    )
    trainer, records = _fit(config)
    steps = _train(records)
    assert trainer.backend.reference is not None
    assert all(r["actor/kl_loss"] >= 0 for r in steps)  # k3 is never negative
    assert max(r["actor/pg_clipfrac"] for r in steps) > 0  # later mini-batches are off-policy; 1% clips


@pytest.mark.parametrize(
    ("loss", "mode"), [("geo_mean", ""), ("sapo", ""), ("vanilla", ""), ("vanilla", "prompt-mean")]
)
def test_micro_batches_do_not_change_the_step(tiny_config: MakeConfig, tmp_path: Path, loss: str, mode: str) -> None:
    """Gradient accumulation over 3 micro-batches gives the loss and gradient of the whole mini-batch."""
    runs = []
    for micro in (1, 3):
        config = tiny_config(
            *_overrides(loss),
            *([f"rllm.algorithm.loss_agg_mode={mode}"] if mode else []),
            "rllm.trainer.total_batches=1",
            f"rllm.transformers.micro_batches={micro}",
            f"rllm.trainer.output_dir={tmp_path / f'micro{micro}'}",
        )
        runs.append(_train(_fit(config)[1])[0])
    single, split = runs
    assert split["actor/grad_norm"] == pytest.approx(single["actor/grad_norm"], rel=1e-4)
    assert split["actor/loss"] == pytest.approx(single["actor/loss"], rel=1e-4, abs=1e-6)


def test_a_loss_that_fixes_its_aggregation_trains_with_the_mode_unset(
    tiny_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rllm.losses import registry

    monkeypatch.setattr(registry, "_ANNOUNCED", set())
    with pytest.warns(RLLMWarning, match=r"^Loss 'sapo' .* fixes its own aggregation, seq-mean-token-mean") as caught:
        trainer, records = _fit(tiny_config("rllm.algorithm.loss_fn=sapo", "rllm.trainer.total_batches=1"))
    assert sum("fixes its own aggregation" in str(w.message) for w in caught) == 1
    assert trainer.backend.default_settings.agg_mode == "seq-mean-token-mean"
    assert math.isfinite(_train(records)[0]["actor/grad_norm"])


def test_use_kl_loss_alone_adds_verls_default_kl_term(tiny_config: MakeConfig) -> None:
    """verl's semantics: use_kl_loss=true with kl_loss_coef left at verl's default, 0.001."""
    trainer, records = _fit(tiny_config("rllm.algorithm.use_kl_loss=true"))
    assert trainer.backend.reference is not None
    assert all(r["actor/kl_coef"] == 0.001 and r["actor/kl_loss"] >= 0 for r in _train(records))


def test_kl_loss_keys_without_the_switch_add_no_term_and_are_said(tiny_config: MakeConfig) -> None:
    with pytest.warns(RLLMWarning, match=r"kl_beta=0\.1 has no effect without rllm\.algorithm\.use_kl_loss=true"):
        trainer, records = _fit(tiny_config("rllm.algorithm.kl_beta=0.1"))
    assert trainer.backend.reference is None
    assert not any("actor/kl_loss" in r for r in records)


def test_router_replay_is_refused_by_name(tiny_config: MakeConfig) -> None:
    with pytest.raises(ConfigError, match=r"rllm\.algorithm\.router_replay='R2'"):
        UnifiedTrainer(None, tiny_config("rllm.algorithm.router_replay=R2"), progress=False)


def test_bypass_mode_with_a_changed_sampling_distribution_is_refused(tiny_config: MakeConfig) -> None:
    config = tiny_config("rllm.algorithm.rollout_correction.bypass_mode=true", "rllm.transformers.temperature=0.7")
    with pytest.raises(ConfigError, match="bypass_mode=true"):
        UnifiedTrainer(None, config, progress=False)


def test_bypass_mode_trains_on_the_rollout_log_probs(tiny_config: MakeConfig) -> None:
    _, records = _fit(tiny_config("rllm.algorithm.rollout_correction.bypass_mode=true"))
    assert all(r["actor/rollout_logprob_diff"] == 0.0 for r in _train(records))


# -- the model written at the end -------------------------------------------------------------------
def test_final_model_loads_with_from_pretrained_and_answers_as_validation(tiny_config: MakeConfig) -> None:
    from transformers import AutoModelForCausalLM

    config = tiny_config(
        "rllm.trainer.total_batches=6", "rllm.trainer.test_freq=6", "rllm.trainer.val_before_train=false"
    )
    trainer, records = _fit(config)
    (val,) = [r for r in records if r["kind"] == "val"]
    latest = (trainer.output_dir / "checkpoints" / "latest").read_text().strip()
    model = AutoModelForCausalLM.from_pretrained(trainer.output_dir / "checkpoints" / latest / "model")
    tasks = digit_max_tasks()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([t["prompt"] for t in tasks])).logits[:, -1]
    answers = logits.argmax(-1).tolist()
    accuracy = sum(a == t["answers"][0] for a, t in zip(answers, tasks, strict=True)) / len(tasks)
    assert accuracy == pytest.approx(val["val/digit_max/pass@1"])
    # and the same per task as the trainer's own validation engine
    engine = trainer.backend.engine
    engine.is_validation = True

    async def greedy() -> list:
        return await asyncio.gather(*(engine.generate(t["prompt"], max_tokens=1) for t in tasks))

    assert [g.response_ids[0] for g in asyncio.run(greedy())] == answers


def test_a_saved_model_directory_trains_through_the_path(tiny_config: MakeConfig, tmp_path: Path) -> None:
    trainer = UnifiedTrainer(None, tiny_config(), progress=False)
    trainer.backend.model.save_pretrained(tmp_path / "saved")
    trainer.backend.tokenizer.save_pretrained(tmp_path / "saved")
    trainer.shutdown()
    _, records = _fit(tiny_config(f"rllm.transformers.model={tmp_path / 'saved'}"))
    assert [r["step"] for r in _train(records)] == [1, 2]


# -- resume ------------------------------------------------------------------------------------------
def test_resume_from_a_checkpoint_gives_the_uninterrupted_metrics(tiny_config: MakeConfig, tmp_path: Path) -> None:
    run = ("rllm.trainer.total_batches=4", "rllm.trainer.save_freq=2")
    _, clean = _fit(tiny_config(*run, f"rllm.trainer.output_dir={tmp_path / 'clean'}"))
    _fit(tiny_config("rllm.trainer.total_batches=2", f"rllm.trainer.output_dir={tmp_path / 'split'}"))
    _, resumed = _fit(tiny_config(*run, f"rllm.trainer.output_dir={tmp_path / 'split'}"))

    def comparable(records: list[dict]) -> list[dict]:
        return [
            {k: v for k, v in r.items() if not k.startswith(("time/", "perf/")) and k != "wall_time"} for r in records
        ]

    assert comparable(_train(resumed)) == comparable(_train(clean))


def test_checkpoint_holds_no_pickle(tiny_config: MakeConfig) -> None:
    trainer, _ = _fit(tiny_config())
    step = trainer.output_dir / "checkpoints" / "step_2"
    names = sorted(p.relative_to(step).as_posix() for p in step.rglob("*") if p.is_file())
    assert all(name.endswith((".json", ".safetensors", ".jinja", ".txt")) for name in names), names
    assert "model/model.safetensors" in names and "optimizer.safetensors" in names
    assert json.loads((step / "transformers.json").read_text())["param_groups"][0]["lr"] > 0


def _resign(step: Path) -> None:
    """Rewrite the manifest's sizes and digests, as someone editing a checkpoint by hand would."""
    manifest = json.loads((step / "MANIFEST.json").read_text())
    for name in manifest["files"]:
        data = (step / name).read_bytes()
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (step / "MANIFEST.json").write_text(json.dumps(manifest))


def _edit_weight_decay(step: Path) -> None:
    state = json.loads((step / "transformers.json").read_text())
    state["param_groups"][0]["weight_decay"] = 0.5
    (step / "transformers.json").write_text(json.dumps(state))


def _drop_a_moment(step: Path) -> None:
    tensors = load_file(str(step / "optimizer.safetensors"))
    del tensors["0.exp_avg"]
    save_file(tensors, str(step / "optimizer.safetensors"))


def _torch_generator_for_the_sampling_stream(step: Path) -> None:
    """The sampling state as a checkpoint held it while the engine sampled from a ``torch.Generator``."""
    states = load_file(str(step / "rng.safetensors"))
    states["sample"] = torch.Generator().manual_seed(0).get_state()
    save_file(states, str(step / "rng.safetensors"))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            _torch_generator_for_the_sampling_stream,
            r"holds a 'sample' random state this rllm cannot restore \(a uniform stream's state is 16 bytes "
            r"\(seed, position\), not 5056\); resume it with the rllm version that wrote it",
        ),
        (
            _edit_weight_decay,
            r"weight_decay=0\.5 where this run's settings give 0\.0 \(rllm\.transformers\.weight_decay\)",
        ),
        (_drop_a_moment, r"optimizer state for parameter 0 with no tensor 'exp_avg'; it is incomplete"),
    ],
)
def test_a_resigned_checkpoint_with_an_edited_optimizer_is_refused_and_the_earlier_one_resumed(
    tiny_config: MakeConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: Callable[[Path], None],
    message: str,
) -> None:
    _fit(tiny_config("rllm.trainer.save_freq=1"))
    step = tmp_path / "run" / "checkpoints" / "step_2"
    edit(step)
    _resign(step)  # the manifest vouches for the edited files: only the loader's own checks can tell
    capsys.readouterr()
    _, records = _fit(tiny_config("rllm.trainer.save_freq=1", "rllm.trainer.total_batches=3"))
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert f"resumed from {tmp_path / 'run' / 'checkpoints' / 'step_1'} (step 1)" in err
    assert [r["step"] for r in _train(records)] == [1, 2, 3]


# -- rLLM's entry point ------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["transformers", "embedded"])
def test_agent_trainer_trains_with_a_registered_backend_name(tmp_path: Path, backend: str) -> None:
    config = {
        "rllm.trainer.output_dir": str(tmp_path / backend),
        "rllm.trainer.logger": ["jsonl"],
        "rllm.trainer.total_batches": 2,
        "rllm.trainer.test_freq": 0,
        "rllm.data.train_batch_size": 4,
    }
    tasks = digit_max_tasks()[:8]
    from rllm.tasks import ArithmeticWorkflow

    AgentTrainer(
        workflow_class=ArithmeticWorkflow, config=config, train_dataset=tasks, val_dataset=tasks, backend=backend
    ).train()
    records = read_metrics(tmp_path / backend / METRICS_FILE)
    assert [r["step"] for r in _train(records)] == [1, 2]
    assert [r["kind"] for r in records].count("val") == 1  # test_freq 0: before training only


def test_agent_trainer_refuses_agent_and_env_classes() -> None:
    with pytest.raises(ConfigError, match=r"AgentTrainer\(agent_class=\.\.\.\)"):
        AgentTrainer(agent_class=object, config=[])


# -- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("width", [6, 12])
def test_a_width_the_heads_cannot_share_evenly_is_refused_at_every_door(
    tiny_config: MakeConfig, capsys: pytest.CaptureFixture[str], width: int
) -> None:
    from rllm.cli.main import main

    message = f"rllm.transformers.hidden_size must be an integer >= 8, a multiple of 8; got {width}"
    with pytest.raises(ConfigError, match=re.escape(message)):
        UnifiedTrainer(None, tiny_config(f"rllm.transformers.hidden_size={width}"), progress=False)
    assert main(["config", "rllm.backend=transformers", f"rllm.transformers.hidden_size={width}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


class OutOfVocabulary(Workflow):
    """Answers with a token id no model has."""

    async def run(self, task: dict, uid: str, **kwargs: object) -> Episode:
        step = Step(prompt_ids=task["prompt"], response_ids=[10**6], reward=1.0)
        return Episode(
            termination_reason=TerminationReason.ENV_DONE, trajectories=[Trajectory(name="solver", steps=[step])]
        )


def test_a_token_id_outside_the_vocabulary_names_the_workflow_and_the_id(tiny_config: MakeConfig) -> None:
    from rllm.errors import WorkflowError

    with pytest.raises(WorkflowError) as caught:
        _fit(tiny_config(), workflow_class=OutOfVocabulary)
    message = str(caught.value)
    assert message.startswith("Workflow OutOfVocabulary produced token id 1000000 in the response of a step of group")
    assert "outside the model's vocabulary (ids 0 to " in message and "\n" not in message


def _packed(prompt: list, response: list) -> object:
    from rllm.types import TrajectoryGroup
    from rllm_transformers.batch import pack_rows

    steps = [Step(prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.5]), Step(prompt_ids=prompt, response_ids=response)]
    group = TrajectoryGroup.for_task("t", "solver", [Trajectory(name="solver", steps=[step]) for step in steps])
    return pack_rows([group], {"solver": "vanilla"}, 0, torch.device("cpu"), 10, "Workflow W")


@pytest.mark.parametrize(
    ("prompt", "response", "bad", "part"),
    [([4], [10], "10", "response"), ([-1], [4], "-1", "prompt"), ([4], [2.0], "2.0", "response"),
     (["7"], [4], "'7'", "prompt"), ([4], [2**70], str(2**70), "response"), ([4, None], [4], "None", "prompt")],
)  # fmt: skip
def test_every_kind_of_bad_token_id_is_named_with_its_part(prompt: list, response: list, bad: str, part: str) -> None:
    """The batch's ids are checked at once; an id numpy rejects or that falls outside 0..9 is found and named."""
    from rllm.errors import WorkflowError

    with pytest.raises(WorkflowError) as caught:
        _packed(prompt, response)
    expected = f"Workflow W produced token id {bad} in the {part} of a step of group 't:solver'"
    assert str(caught.value).startswith(expected)


def test_a_step_without_a_response_is_not_blamed_for_another_steps_bad_id() -> None:
    """A response-less step is left out of the rows, so its ids are not checked: the error names the packed culprit."""
    from rllm.errors import WorkflowError
    from rllm.types import TrajectoryGroup
    from rllm_transformers.batch import pack_rows

    steps = [Step(prompt_ids=[None], response_ids=[]), Step(prompt_ids=[4], response_ids=[2.0])]
    group = TrajectoryGroup.for_task("t", "solver", [Trajectory(name="solver", steps=steps)])
    with pytest.raises(WorkflowError, match=r"produced token id 2\.0 in the response of a step"):
        pack_rows([group], {"solver": "vanilla"}, 0, torch.device("cpu"), 10, "Workflow W")


def test_ids_of_numpys_integer_types_pack_as_python_ints_do() -> None:
    """Row 2's prompt and response as numpy integers: the rows, mask and sampling log-probs of plain ints (the
    response at position 1, a step without log-probs NaN there)."""
    import numpy as np

    plain = _packed([5, 6], [7])
    typed = _packed([np.int64(5), np.int32(6)], [np.uint8(7)])
    for batch in (plain, typed):
        assert batch.ids.tolist() == [[1, 2, 3], [5, 6, 7]]
        assert batch.mask.tolist() == [[0.0, 1.0], [0.0, 1.0]]
        assert batch.rollout_logps[0].tolist() == [0.0, -0.5] and math.isnan(batch.rollout_logps[1, 1])


def test_a_model_directory_that_does_not_exist(tiny_config: MakeConfig, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"rllm\.transformers\.model='.*nowhere': no such directory"):
        UnifiedTrainer(None, tiny_config(f"rllm.transformers.model={tmp_path / 'nowhere'}"), progress=False)


def _model_files(directory: Path, tokenizer: bool = True) -> Path:
    """What save_pretrained leaves (the check reads only which files are there)."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text('{"model_type": "qwen2"}')
    (directory / "model.safetensors").write_bytes(b"")
    if tokenizer:
        (directory / "tokenizer.json").write_text("{}")
        (directory / "tokenizer_config.json").write_text("{}")
    return directory


def test_a_run_or_checkpoint_directory_names_the_model_directory_inside_it(
    tiny_config: MakeConfig, tmp_path: Path
) -> None:
    run = tmp_path / "runs" / "rllm" / "tf"
    step = run / "checkpoints" / "step_3"
    _model_files(step / "model")
    (step / "MANIFEST.json").write_text("{}")
    (run / "checkpoints" / "latest").write_text("step_3")
    expected = {
        run: f"is an rllm run's directory; a checkpoint's model is inside it: rllm.transformers.model="
        f"'{step / 'model'}' (the newest) (or resume the run with rllm train -c '{run / 'config.yaml'}').",
        step: f"is a checkpoint of an rllm run; its model is the directory inside it: rllm.transformers.model="
        f"'{step / 'model'}'.",
        run / "checkpoints": "has no config.json: it is not a model directory;",
    }
    for given, message in expected.items():
        with pytest.raises(ConfigError) as caught:
            UnifiedTrainer(None, tiny_config(f"rllm.transformers.model={given}"), progress=False)
        assert str(caught.value).startswith(f"rllm.transformers.model='{given}' {message}")
        assert "\n" not in str(caught.value)


def test_a_model_directory_without_tokenizer_files_is_refused_before_training(
    tiny_config: MakeConfig, tmp_path: Path
) -> None:
    bare = _model_files(tmp_path / "bare", tokenizer=False)
    with pytest.raises(ConfigError, match=r"^rllm\.transformers\.model='.*bare' has a model but no tokenizer files"):
        UnifiedTrainer(None, tiny_config(f"rllm.transformers.model={bare}"), progress=False)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("metrics.jsonl"))


def test_a_hub_id_without_network(tiny_config: MakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    # what an unreachable hub amounts to, without waiting for its connection timeouts (read at import, so patched)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match=r"rllm\.transformers\.model='some-org/no-such-model'.*hub could not be"):
        UnifiedTrainer(None, tiny_config("rllm.transformers.model=some-org/no-such-model"), progress=False)


def test_a_tokenizer_without_pad_token_pads_with_eos_and_warns(tiny_config: MakeConfig, tmp_path: Path) -> None:
    trainer = UnifiedTrainer(None, tiny_config(), progress=False)
    trainer.backend.model.save_pretrained(tmp_path / "saved")
    tokenizer = trainer.backend.tokenizer
    trainer.shutdown()
    tokenizer.pad_token = None
    tokenizer.save_pretrained(tmp_path / "saved")
    with pytest.warns(RLLMWarning, match="has no pad token; padding with its EOS token"):
        trainer = UnifiedTrainer(None, tiny_config(f"rllm.transformers.model={tmp_path / 'saved'}"), progress=False)
    assert trainer.backend.tokenizer.pad_token_id == trainer.backend.tokenizer.eos_token_id
    trainer.shutdown()
    tokenizer.eos_token = None
    tokenizer.save_pretrained(tmp_path / "saved")
    with pytest.raises(ConfigError, match="neither a pad token nor an EOS token"):
        UnifiedTrainer(None, tiny_config(f"rllm.transformers.model={tmp_path / 'saved'}"), progress=False)


def test_prompts_over_the_limit_end_with_a_termination_reason(tiny_config: MakeConfig) -> None:
    config = tiny_config(
        "rllm.transformers.max_prompt_length=2",
        "rllm.transformers.tasks=[digit_max,digit_sum]",
        "rllm.data.train_batch_size=200",
        "rllm.trainer.total_batches=1",
        "rllm.compact_filtering.enable=true",
        "rllm.compact_filtering.mask_max_prompt_length_exceeded=true",
        "rllm.trainer.require_update=false",
    )
    with pytest.warns(RLLMWarning) as caught:  # every rollout was masked: the step and the run's end say so
        _, records = _fit(config)
    messages = [str(w.message) for w in caught]
    assert any("step 1: nothing to train on" in m for m in messages), messages
    assert any("1 of this run's steps trained nothing" in m for m in messages), messages
    (step,) = _train(records)
    # digit_max prompts have 3 tokens, digit_sum's 4: every one is over the limit
    assert step["batch/termination_reason/max_prompt_length_exceeded"] == 1.0
    assert step["batch/updated"] == 0.0


def test_a_nan_loss_names_the_step_and_writes_no_checkpoint(tiny_config: MakeConfig) -> None:
    config = tiny_config("rllm.trainer.total_batches=3", "rllm.trainer.save_freq=1")
    trainer = UnifiedTrainer(None, config, progress=False)
    backend = trainer.backend
    original = backend.update_policy

    async def poisoned(state):  # the third step's advantages are NaN, as a broken estimator would give
        if state.global_step == 3:
            for group in state.trajectory_groups:
                for trajectory in group.trajectories:
                    for step in trajectory.steps:
                        step.advantage = float("nan")
        await original(state)

    backend.update_policy = poisoned  # type: ignore[method-assign]
    before = [p.detach().clone() for p in backend.model.parameters()]
    with pytest.raises(TrainerError, match=r"Step 3: the policy loss vanilla is nan"):
        try:
            trainer.fit()
        finally:
            trainer.shutdown()
    checkpoints = sorted(p.name for p in (trainer.output_dir / "checkpoints").iterdir())
    assert checkpoints == ["latest", "step_1", "step_2"]
    assert any(float((a - b).detach().abs().max()) > 0 for a, b in zip(before, backend.model.parameters(), strict=True))


def test_cuda_requested_where_there_is_none(tiny_config: MakeConfig) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(ConfigError, match=r"rllm\.transformers\.device=cuda, but torch sees no CUDA device"):
        UnifiedTrainer(None, tiny_config("rllm.transformers.device=cuda"), progress=False)


def test_the_plugin_registers_the_backends_path_and_selecting_it_gives_the_implementation() -> None:
    """Registered as ``"module:Class"`` (no torch at registration), not a stand-in class that swaps itself."""
    from rllm.config import load_config
    from rllm.trainer.components import resolve_backend
    from rllm_transformers.backend import TransformersBackend

    assert get_plugin_manager().backends.resolve("transformers").target == (
        "rllm_transformers.backend:TransformersBackend"
    )
    assert resolve_backend("transformers", load_config()) is TransformersBackend
    assert "__new__" not in vars(TransformersBackend)


def test_without_the_extra_selecting_the_backend_is_one_line_naming_it(tmp_path: Path) -> None:
    """torch made unimportable in a fresh process, as where the extra is not installed."""
    code = (
        "import sys; sys.modules['torch'] = None; sys.argv = ['rllm', 'train', 'rllm.backend=transformers', "
        f"'rllm.trainer.output_dir={tmp_path / 'run'}']; from rllm.cli.main import main; sys.exit(main())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "rllm train: error: rllm.backend=transformers needs torch: pip install 'rllm[transformers]' "
        "(on a machine without a GPU, install torch's CPU build first)."
    )
