"""``rllm.backend=tinker`` against ``rllm serve --tinker`` (the official SDK on both sides, no mock), on 127.0.0.1.

The server serves the trainer's own tiny digit model; the datum transform is checked against
upstream rLLM's merging rule written out by hand; the sampled log-probs against the server's
``forward``; the API key against every file of the run directory and the run's output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without
from serving import SERVED, TINY_TEXT, running, step_versions

skip_module_without(
    "torch", "transformers", "safetensors", "fastapi", "uvicorn", "tinker", install="pip install 'rllm[tinker,test]'"
)

import numpy as np
from tinker import types

from rllm import AlgorithmConfig
from rllm.config import load_config
from rllm.errors import ConfigError
from rllm.types import Step, Trajectory
from rllm_tinker.backend import TinkerBackend, check_snapshots_kept
from rllm_tinker.engine import TinkerEngine, TinkerSampling
from rllm_tinker.transform import to_datum, trajectory_sequences

MODEL = "tiny-digits"
HEALTH = "/api/v1/healthz"
SECRET = "tml-never-on-disk-5c1f"
KEY_VARIABLE = "RLLM_TEST_TINKER_KEY"
LEAD_3 = (
    "rllm.async_training.enable=true",
    "rllm.async_training.staleness_threshold=3",
    "rllm.async_training.max_batches_ahead=3",
)


def _serve(tmp_path_factory: pytest.TempPathFactory, *options: str) -> Iterator[str]:
    checkpoints = tmp_path_factory.mktemp("tinker-states")
    words = ("--tinker", *SERVED, "--served-model-name", MODEL, "--checkpoint-dir", str(checkpoints), *options)
    with running(*words, health=HEALTH) as root:
        yield root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve(tmp_path_factory)


@pytest.fixture(scope="module")
def reproducible_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server that samples each request alone: a seeded run's numbers do not depend on which requests the server
    happened to batch together (batched, log-probs round differently, and AdamW turns rounding into real steps)."""
    yield from _serve(tmp_path_factory, "--reproducible")


def _words(root: str, run_dir: Path, *extra: str) -> list[str]:
    return [
        "rllm.backend=tinker",
        f"rllm.tinker.base_url={root}",
        f"rllm.tinker.base_model={MODEL}",
        "rllm.trainer.logger=[jsonl]",
        f"rllm.trainer.output_dir={run_dir}",
        *extra,
    ]


def _backend(*words: str) -> TinkerBackend:
    config = load_config(overrides=list(words))
    return TinkerBackend(config, algorithm=AlgorithmConfig.from_config(config))


# -- the datum transform: upstream's rule -------------------------------------------------------------------


def _step(prompt: list[int], reply: list[int], logprobs: list[float], advantage: float | list[float]) -> Step:
    return Step(prompt_ids=prompt, response_ids=reply, logprobs=logprobs, advantage=advantage)


def test_steps_that_extend_the_sequence_merge_and_a_break_starts_a_datum() -> None:
    """Upstream's example: (O1, A1), (O1+A1+O2, A2), (O3, A3) -> two datums; the prompt and observation tokens get
    log-prob 0, advantage 0, mask 0. Expected lists written out by hand from the rule."""
    o1, a1, o2, a2, o3, a3 = [1, 2], [3], [4, 5], [6, 7], [8], [9]
    trajectory = Trajectory(
        steps=[
            _step(o1, a1, [-0.5], 1.0),
            _step(o1 + a1 + o2, a2, [-0.25, -0.75], [2.0, 3.0]),
            _step(o3, a3, [-0.125], -1.0),
        ]
    )
    first, second = trajectory_sequences(trajectory)
    assert first.tokens == [1, 2, 3, 4, 5, 6, 7]
    assert first.logprobs == [0.0, 0.0, -0.5, 0.0, 0.0, -0.25, -0.75]
    assert first.advantages == [0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 3.0]
    assert first.mask == [0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    assert (second.tokens, second.logprobs, second.advantages, second.mask) == (
        [8, 9],
        [0.0, -0.125],
        [0.0, -1.0],
        [0.0, 1.0],
    )
    datum = to_datum(first)
    assert datum.model_input.to_ints() == [1, 2, 3, 4, 5, 6]
    inputs = {name: value.tolist() for name, value in datum.loss_fn_inputs.items()}
    assert inputs == {
        "target_tokens": [2, 3, 4, 5, 6, 7],
        "logprobs": [0.0, -0.5, 0.0, 0.0, -0.25, -0.75],
        "advantages": [0.0, 1.0, 0.0, 0.0, 2.0, 3.0],
    }  # the mask is not sent: Tinker's losses do not take it


def test_a_multi_turn_digit_chain_is_one_datum() -> None:
    """The digit_chain workflow's turns each see the conversation so far: three steps, one datum."""
    prompt = [3, 10, 4, 12]
    steps = [
        _step(prompt, [7], [-0.1], 1.0),
        _step([*prompt, 7], [1], [-0.2], 1.0),
        _step([*prompt, 7, 1], [5], [-0.3], 1.0),
    ]
    (only,) = trajectory_sequences(Trajectory(steps=steps))
    assert only.tokens == [3, 10, 4, 12, 7, 1, 5] and only.mask == [0.0] * 4 + [1.0] * 3


# -- refusals before anything is trained ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (
            ("rllm.algorithm.loss_fn=vanilla",),
            "rllm.algorithm.loss_fn='vanilla' is not a Tinker loss; the tinker backend trains with one of",
        ),
        (
            ("rllm.tinker.server_losses=[importance_sampling]",),
            "rllm.algorithm.loss_fn='ppo' is not among the server's losses (rllm.tinker.server_losses: "
            "importance_sampling)",
        ),
        (
            ("rllm.algorithm.use_kl_loss=true",),
            "rllm.algorithm.use_kl_loss=True is not supported by the tinker backend: the server computes Tinker's loss",
        ),
        (
            ("rllm.algorithm.rollout_correction.tis_mode=token",),
            "rllm.algorithm.rollout_correction.tis_mode='token' is not supported by the tinker backend",
        ),
        (
            ("rllm.algorithm.loss_options.clip_ratio_c=3.0",),
            "rllm.algorithm.loss_options.clip_ratio_c is not supported by the tinker backend",
        ),
        (
            (*LEAD_3, "rllm.async_training.allow_uncorrected=true"),
            "rllm.async_training lead 3 (the smaller of staleness_threshold and max_batches_ahead) needs 4 sampler "
            "snapshots kept on the server, and rllm.tinker.server_snapshots=3: start rllm serve --tinker with "
            "--tinker-snapshots 4",
        ),
        (
            (f"rllm.tinker.api_key={SECRET}",),
            "rllm.tinker.api_key holds a literal key, which config.yaml would keep",
        ),
        ((), "Tinker server http://127.0.0.1:9: not reachable"),  # no server there: now, not the SDK's retries
    ],
)
def test_refused_by_name_before_training(tmp_path: Path, words: tuple[str, ...], message: str) -> None:
    overrides = _words("http://127.0.0.1:9", tmp_path, *words)
    with pytest.raises(ConfigError) as caught:
        _backend(*overrides)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "words",
    [
        (*LEAD_3, "rllm.tinker.server_snapshots=4"),
        ("rllm.async_training.enable=true", "rllm.async_training.staleness_threshold=2"),  # max_batches_ahead 1: lead 1
        ("rllm.async_training.enable=true", "rllm.async_training.max_batches_ahead=2", *LEAD_3[1:2]),  # lead 2
    ],
)
def test_a_lead_the_servers_snapshots_serve_passes_the_check(words: tuple[str, ...]) -> None:
    """Lead + 1 <= rllm.tinker.server_snapshots is not refused (the check the backend runs before the server)."""
    check_snapshots_kept(load_config(overrides=[*words, "rllm.async_training.allow_uncorrected=true"]))


@pytest.mark.parametrize(
    ("words", "expected"),
    [((), None), (("rllm.algorithm.eps_clip=0.1",), (0.9, 1.1)), (("rllm.algorithm.eps_clip_high=0.28",), (0.8, 1.28))],
)
def test_eps_clip_becomes_the_clip_thresholds(words: tuple[str, ...], expected: tuple[float, float] | None) -> None:
    """PPO's and CISPO's clip thresholds are 1 - eps_clip and 1 + eps_clip_high; at the defaults none is sent."""
    backend = TinkerBackend.__new__(TinkerBackend)
    backend.config = load_config(overrides=list(words))
    sent = backend._clip_config()
    if expected is None:
        assert sent is None
    else:
        assert sent is not None
        assert (sent["clip_low_threshold"], sent["clip_high_threshold"]) == pytest.approx(expected)


def test_no_key_is_one_line_naming_the_variable(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    with pytest.raises(ConfigError) as caught:
        _backend(*_words(server, tmp_path))
    message = str(caught.value)
    assert message.startswith(f"Tinker server {server}: create_lora_training_client") and "\n" not in message
    assert "TINKER_API_KEY" in message


def test_grpo_routes_to_ppo_and_other_estimators_to_importance_sampling(tmp_path: Path) -> None:
    """Upstream's default routing, read before the server is contacted (a loss refused here names the route)."""
    for estimator, loss in (("grpo", "ppo"), ("rloo", "importance_sampling")):
        words = _words("http://127.0.0.1:9", tmp_path, f"rllm.algorithm.adv_estimator={estimator}")
        words.append("rllm.tinker.server_losses=[cross_entropy]")
        with pytest.raises(ConfigError, match=f"rllm.algorithm.loss_fn='{loss}' is not among the server's losses"):
            _backend(*words)


# -- against the server --------------------------------------------------------------------------------------


def test_sampled_log_probs_equal_the_servers_forward(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an update (the sampler holds the new weights): each sampled token's log-prob is the server's ``forward``
    log-prob of it (<= 1e-5), and an episode's samples depend on its seed only."""
    import asyncio

    monkeypatch.setenv("TINKER_API_KEY", "tml-rllm-test")  # the SDK's variable (the server checks none)
    backend = _backend(*_words(server, tmp_path), "rllm.tinker.max_new_tokens=6")
    try:
        engine = backend.init_rollout_engine()
        check = types.Datum(
            model_input=types.ModelInput.from_ints([1, 2, 11, 2]),
            loss_fn_inputs={"target_tokens": np.array([2, 11, 2, 13], dtype=np.int64), "weights": np.ones(4)},
        )
        backend.training.forward_backward([check], "cross_entropy").result()
        backend.training.optim_step(types.AdamParams(learning_rate=0.05)).result()
        backend.rollout_weights.load(None)  # what the policy channel does after an update
        engine.weight_version = 1

        async def sample() -> list:
            prompts = [[a, b, 11] for a, b in ((1, 2), (7, 3), (5, 5), (0, 9))]
            return [await engine.for_episode(seed).generate(p) for seed, p in enumerate(prompts)]

        first, again = asyncio.run(sample()), asyncio.run(sample())
        assert [g.response_ids for g in first] == [g.response_ids for g in again]
        for generation in first:
            assert generation.weight_version == 1 and len(generation.response_ids) >= 1
            whole = generation.prompt_ids + generation.response_ids
            datum = types.Datum(
                model_input=types.ModelInput.from_ints(whole[:-1]),
                loss_fn_inputs={"target_tokens": np.array(whole[1:], dtype=np.int64)},
            )
            out = backend.training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
            forward = np.asarray(out[len(generation.prompt_ids) - 1 :])
            assert np.abs(np.asarray(generation.logprobs) - forward).max() <= 1e-5
    finally:
        backend.shutdown()


def test_a_snapshot_samples_the_weights_it_was_taken_of_while_training_goes_on(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asynchronous training's contract: a snapshot taken off the event loop while it samples (as on the update
    thread) keeps sampling the same ids and log-probs after an update; a snapshot taken after the update does not."""
    import asyncio

    monkeypatch.setenv("TINKER_API_KEY", "tml-rllm-test")
    backend = _backend(*_words(server, tmp_path), "rllm.tinker.max_new_tokens=4")
    weights = backend.rollout_weights
    try:
        engine = backend.init_rollout_engine()

        async def sample() -> list[tuple[list[int], list[float]]]:
            prompts = [[a, b, 11] for a, b in ((1, 2), (7, 3), (5, 5), (0, 9))]
            answers = [await engine.for_episode(seed).generate(p) for seed, p in enumerate(prompts)]
            return [(g.response_ids, g.logprobs) for g in answers]

        async def sample_while_snapshotting() -> Any:
            return (await asyncio.gather(sample(), asyncio.to_thread(weights.snapshot)))[1]

        assert weights.overlaps
        old = asyncio.run(sample_while_snapshotting())
        weights.load(old)
        before = asyncio.run(sample())
        check = types.Datum(
            model_input=types.ModelInput.from_ints([1, 2, 11, 2]),
            loss_fn_inputs={"target_tokens": np.array([2, 11, 2, 13], dtype=np.int64), "weights": np.ones(4)},
        )
        backend.training.forward_backward([check], "cross_entropy").result()
        backend.training.optim_step(types.AdamParams(learning_rate=0.05)).result()
        new = weights.snapshot()
        assert asyncio.run(sample()) == before  # the engine still samples the old snapshot
        weights.load(new)
        trained = asyncio.run(sample())
        weights.load(old)
        assert asyncio.run(sample()) == before
    finally:
        backend.shutdown()
    assert trained != before  # the update changed what the new snapshot samples


@pytest.mark.parametrize(
    "words",
    [("rllm.algorithm.loss_fn=dro", "rllm.algorithm.loss_options.dro_beta=0.5"), ("rllm.algorithm.eps_clip=0.1",)],
)
def test_an_update_sends_the_losses_settings(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, words: tuple[str, ...]
) -> None:
    """dro's beta and PPO's clip thresholds reach the server (it refuses dro without a beta, and checks the
    thresholds), and one update runs: forward_backward, then optim_step with the scheduled learning rate, the
    optim_step sent before forward_backward's answer is awaited (one wait per update, not one per call)."""
    import asyncio

    from rllm.trainer import TrainerState

    monkeypatch.setenv("TINKER_API_KEY", "tml-rllm-test")
    backend = _backend(*_words(server, tmp_path), "rllm.tinker.lr=0.01", *words)
    calls: list[str] = []
    backend.training = _Recording(backend.training, calls)
    try:
        steps = [_step([1, 2, 11], [2], [-2.0], 1.0), _step([1, 2, 11, 2], [13], [-1.5], 0.5)]
        state = TrainerState(global_step=1, total_steps=10)
        state.backend_batch = {"solver": [Trajectory(steps=steps)]}
        asyncio.run(backend.update_policy(state))
    finally:
        backend.shutdown()
    loss = "dro" if "dro" in " ".join(words) else "ppo"
    assert state.metrics["actor/lr"] == pytest.approx(0.01) and f"actor/{loss}/loss:sum" in state.metrics
    assert state.metrics["actor/tokens"] == 2.0 and state.metrics["batch/steps_per_row"] == 2.0
    assert calls == ["forward_backward", "optim_step", "await forward_backward", "await optim_step"]


class _Awaited:
    """An SDK future that notes when it is awaited."""

    def __init__(self, future: Any, name: str, calls: list[str]) -> None:
        self.future, self.name, self.calls = future, name, calls

    def __await__(self) -> Any:
        self.calls.append(f"await {self.name}")
        return self.future.__await__()


class _Recording:
    """A training client that notes the order of its update calls and of the waits on their answers."""

    def __init__(self, training: Any, calls: list[str]) -> None:
        self.training, self.calls = training, calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self.training, name)

    def forward_backward(self, *args: Any) -> _Awaited:
        self.calls.append("forward_backward")
        return _Awaited(self.training.forward_backward(*args), "forward_backward", self.calls)

    def optim_step(self, *args: Any) -> _Awaited:
        self.calls.append("optim_step")
        return _Awaited(self.training.optim_step(*args), "optim_step", self.calls)


def _train(root: str, run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    words = _words(root, run_dir, f"rllm.tinker.api_key=${{oc.env:{KEY_VARIABLE}}}", *extra)
    env = {**os.environ, KEY_VARIABLE: SECRET}
    env.pop("TINKER_API_KEY", None)
    command = [sys.executable, "-m", "rllm.cli.main", "train", *words]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def _records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


def test_rllm_train_runs_steps_resumes_and_never_writes_the_key(server: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    small = (
        "rllm.data.train_batch_size=4",
        "rllm.rollout.n=4",
        "rllm.trainer.test_freq=0",
        "rllm.trainer.val_before_train=false",
        "rllm.trainer.save_freq=1",
        "rllm.tinker.lr=0.003",
    )
    done = _train(server, run_dir, *small, "rllm.trainer.total_batches=2")
    assert done.returncode == 0, done.stderr[-3000:]
    records = _records(run_dir)
    assert [r["step"] for r in records] == [1, 2]
    assert all("actor/ppo/loss:sum" in r and r["actor/lr"] == pytest.approx(0.003) for r in records)
    state = json.loads((run_dir / "checkpoints" / "step_2" / "tinker_state.json").read_text())
    assert state["state_path"].startswith("tinker://")
    assert json.loads((run_dir / "checkpoints" / "step_2" / "policy.json").read_text())["policy_version"] == 2
    resumed = _train(server, run_dir, *small, "rllm.trainer.total_batches=3")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in _records(run_dir)][-1] == 3
    assert json.loads((run_dir / "checkpoints" / "step_3" / "policy.json").read_text())["policy_version"] == 3
    config = (run_dir / "config.yaml").read_text()
    assert f"${{oc.env:{KEY_VARIABLE}}}" in config
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(files) > 5
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path
    for run in (done, resumed):
        assert SECRET not in run.stdout and SECRET not in run.stderr


ASYNC_RUN = (
    "rllm.data.train_batch_size=4",
    "rllm.rollout.n=4",
    "rllm.trainer.total_batches=4",
    "rllm.trainer.test_freq=2",
    "rllm.trainer.val_before_train=false",
    "rllm.tinker.lr=0.003",
    "rllm.episode_logging.log_episodes=true",
)


def _numbers(run_dir: Path) -> list[dict]:
    """Every record a run computed (training and validation), less the clocks and the asynchronous run's own."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [
        {k: v for k, v in r.items() if k != "wall_time" and not k.startswith(("time/", "perf/", "async/"))}
        for r in map(json.loads, lines)
    ]


@pytest.mark.slow
def test_staleness_0_gives_exactly_the_synchronous_runs_metrics(reproducible_server: str, tmp_path: Path) -> None:
    """Overlapped at staleness 0, each batch still samples the newest weights: a snapshot client of the same state."""
    synchronous = _train(reproducible_server, tmp_path / "sync", *ASYNC_RUN)
    assert synchronous.returncode == 0, synchronous.stderr[-3000:]
    overlapped = _train(reproducible_server, tmp_path / "async", *ASYNC_RUN, "rllm.async_training.enable=true")
    assert overlapped.returncode == 0, overlapped.stderr[-3000:]
    sync, run = _numbers(tmp_path / "sync"), _numbers(tmp_path / "async")
    assert [r["kind"] for r in sync] == ["train", "train", "val", "train", "train", "val"]
    assert run == sync
    assert [r["rollout/staleness/max"] for r in run if r["kind"] == "train"] == [0.0] * 4
    assert step_versions(tmp_path / "async") == {u: {u - 1} for u in range(1, 5)}


@pytest.mark.slow
def test_staleness_1_samples_the_snapshot_two_steps_back(server: str, tmp_path: Path) -> None:
    """The server's losses take the sampler's log-probs as the old policy's, so the run trains uncorrected."""
    run_dir = tmp_path / "run"
    done = _train(
        server,
        run_dir,
        *ASYNC_RUN,
        "rllm.async_training.enable=true",
        "rllm.async_training.staleness_threshold=1",
        "rllm.async_training.allow_uncorrected=true",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # batch u samples the weights trained up to step u - 2 (the first two batches, the initial weights)
    assert step_versions(run_dir) == {u: {max(0, u - 2)} for u in range(1, 5)}
    trained = _records(run_dir)
    assert [r["rollout/staleness/max"] for r in trained] == [0.0, 1.0, 1.0, 1.0]
    assert [r["rollout/staleness/count_1"] for r in trained] == [0.0, 16.0, 16.0, 16.0]  # 4 tasks x 4 rollouts


@pytest.mark.slow
def test_rllm_train_through_the_server_learns_the_digit_task(server: str, tmp_path: Path) -> None:
    """60 steps of 20 tasks x 8 rollouts at lr 2e-3 (about 30 s on 2 cores): greedy validation pass@1 from chance
    (<= 0.3) to >= 0.9 (0.0 -> 0.78 -> 0.84 -> 0.96 at steps 0, 20, 40 and 60, seed 0, measured)."""
    run_dir = tmp_path / "learn"
    done = _train(
        server,
        run_dir,
        "rllm.tinker.lr=0.002",
        "rllm.data.train_batch_size=20",
        "rllm.rollout.n=8",
        "rllm.trainer.total_batches=60",
        "rllm.trainer.test_freq=20",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    curve = [r["val/digit_max/pass@1"] for r in map(json.loads, lines) if r["kind"] == "val"]
    assert curve[0] <= 0.3 and curve[-1] >= 0.9, curve


def test_the_episodes_of_one_engine_render_a_shared_prompt_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rollouts of a task render the same messages: the engine's episodes share its chat parser's cache."""
    import asyncio
    from types import SimpleNamespace

    from rllm_transformers.model import load_policy

    tokenizer = load_policy(load_config(overrides=list(TINY_TEXT)).rllm.transformers).tokenizer
    sent: list[list[int]] = []

    class Sampler:  # stands in for the SDK's sampling client: one token back, whatever the prompt
        async def sample(self, model_input: Any, count: int, params: Any) -> Any:
            sent.append(model_input.to_ints())
            return SimpleNamespace(sequences=[SimpleNamespace(tokens=[5], logprobs=[-0.5], stop_reason="length")])

    engine = TinkerEngine(Sampler(), tokenizer, TinkerSampling(1.0, 1.0, 0, 4, None, False), 0)
    rendered: list[int] = []
    template = tokenizer.apply_chat_template
    monkeypatch.setattr(tokenizer, "apply_chat_template", lambda *a, **k: rendered.append(1) or template(*a, **k))
    messages = [{"role": "user", "content": "What is 3+4?"}]
    for seed in range(3):
        asyncio.run(engine.for_episode(seed).get_model_response(messages))
    assert len(rendered) == 1
    assert len(sent) == 3 and sent[0] and sent[0] == sent[1] == sent[2]
