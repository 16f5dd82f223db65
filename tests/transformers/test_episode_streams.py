"""The transformers engine's per-episode random streams and its snapshot for Ray workers.

An episode's view draws its random numbers from the episode's own stream, so what it samples
does not depend on the other rows of its batches; the snapshot a worker unpickles samples the same
episodes as the engine it was taken from.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Sequence
from contextlib import nullcontext

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import OmegaConf

from rllm.engine import Generation, RolloutEngine
from rllm.errors import RLLMWarning
from rllm.tasks import EQUALS, ArithmeticWorkflow
from rllm.trainer.engine import WorkflowCall, instantiate
from rllm_transformers.draws import uniforms_at
from rllm_transformers.engine import (
    Sampling,
    TransformersEngine,
    UniformStream,
    draw_rows,
    row_uniforms,
    sampling_log_probs,
)
from rllm_transformers.model import char_tokenizer, tiny_model
from rllm_transformers.precision import precision_of
from rllm_transformers.workers import WorkerEngine

EOS = 13


def _engine(max_new_tokens: int = 6, sampling: Sampling | None = None) -> TransformersEngine:
    tokenizer = char_tokenizer()
    torch.manual_seed(0)
    options = OmegaConf.create({"hidden_size": 32, "num_layers": 1})
    model = tiny_model(options, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    return TransformersEngine(
        model, tokenizer, torch.device("cpu"), UniformStream(0), sampling or Sampling(), max_new_tokens, 16, True
    )


async def _episode(engine: object, seed: int, prompt: Sequence[int], turns: int) -> list[Generation]:
    """An episode of ``turns`` calls, each continuing the last, on the episode's view of ``engine``."""
    view = engine.for_episode(seed)  # type: ignore[attr-defined]
    context, out = list(prompt), []
    for _ in range(turns):
        generation = await view.generate(context, max_tokens=3)
        out.append(generation)
        context += generation.response_ids or [EQUALS]
    return out


def _alone(engine: TransformersEngine, seed: int, prompt: Sequence[int], turns: int) -> list[Generation]:
    return asyncio.run(_episode(engine, seed, prompt, turns))


def _ids(generations: Sequence[Generation]) -> list[list[int]]:
    return [g.response_ids for g in generations]


def test_a_rows_draws_do_not_depend_on_its_batch_neighbours() -> None:
    """Seed 7's episode alone, then batched with neighbours of other lengths that stop at other times."""
    engine = _engine()
    prompt = [3, 8, EQUALS]
    alone = _alone(engine, 7, prompt, turns=3)
    neighbours = [([1, EQUALS], 1, 1), ([9, 9, 9, 9, 9, EQUALS], 2, 2), ([4, 2, EQUALS], 3, 4), (prompt, 4, 3)]
    batches: list[int] = []
    sample = engine.sample
    engine.sample = lambda requests: batches.append(len(requests)) or sample(requests)  # type: ignore[method-assign]

    async def crowd() -> list[list[Generation]]:
        jobs = [_episode(engine, 7, prompt, 3), *(_episode(engine, s, p, t) for p, s, t in neighbours)]
        return list(await asyncio.gather(*jobs))

    crowded = asyncio.run(crowd())[0]
    assert batches[0] == 5 and max(batches) > 1  # it really shared its batches
    assert _ids(crowded) == _ids(alone)
    for a, b in zip(alone, crowded, strict=True):
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)


def _inverse_cdf(probs: Sequence[float], u: float) -> int:
    """The first token whose running total of probability exceeds ``u`` times the whole (plain Python floats)."""
    target, running = u * sum(probs), 0.0
    for token, p in enumerate(probs):
        running += p
        if running > target:
            return token
    return len(probs) - 1


def test_the_first_token_is_the_inverse_cdf_at_the_first_uniform_of_the_episode_seed() -> None:
    """The independent formula: one unpadded forward pass, the sampling distribution, the seed's first uniform."""
    engine = _engine(sampling=Sampling(temperature=0.7, top_k=5))
    prompt = [5, 1, EQUALS]
    with torch.no_grad():
        logits = engine.model(input_ids=torch.tensor([prompt])).logits[:, -1, :]
    probs = sampling_log_probs(logits, engine.sampling).exp()[0].tolist()
    firsts = set()
    for seed in range(12):
        u = _splitmix_uniform(seed, 0)
        expected = _inverse_cdf(probs, u)
        firsts.add(expected)
        assert _alone(engine, seed, prompt, turns=1)[0].response_ids[0] == expected
    assert len(firsts) > 1  # the seeds really drew different tokens


def test_a_rows_draw_follows_its_distribution() -> None:
    """8,000 rows of p = (0.5, 0.3, 0.15, 0.05, 0), each its own seed: frequencies within 4.5 sigma of p."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    n = 8000
    uniforms = row_uniforms([UniformStream(seed) for seed in range(n)], [1] * n, torch.device("cpu"))[:, 0]
    tokens = draw_rows(torch.log(p).expand(n, -1), uniforms)
    counts = torch.bincount(tokens, minlength=5).double()
    sigma = (n * p * (1 - p)).double().sqrt()
    assert counts[4] == 0
    assert bool(((counts - n * p).abs()[:4] <= 4.5 * sigma[:4]).all()), counts.tolist()


def test_a_draw_across_blocks_follows_its_distribution() -> None:
    """2,500 tokens (two whole blocks of 1,024 and a shorter last one), mass on both sides of each block boundary."""
    p = torch.zeros(2500)
    p[[5, 1023, 1024, 2047, 2048, 2499]] = torch.tensor([0.1, 0.25, 0.2, 0.05, 0.15, 0.25])
    n = 8000
    uniforms = row_uniforms([UniformStream(seed) for seed in range(n)], [1] * n, torch.device("cpu"))
    tokens = draw_rows(torch.log(p).expand(n, -1), uniforms[:, 0])
    counts = torch.bincount(tokens, minlength=2500).double()
    kept = p > 0
    assert counts[~kept].sum() == 0
    sigma = (n * p * (1 - p)).double().sqrt()
    assert bool(((counts - n * p).abs()[kept] <= 4.5 * sigma[kept]).all()), counts[kept].tolist()


def test_the_edges_of_the_unit_interval_never_pick_a_token_cut_away() -> None:
    """u = 0 takes the first kept token, u just below 1 the last kept one, past any zeros on either side."""
    p = torch.tensor([[0.0, 0.25, 0.0, 0.75, 0.0, 0.0]] * 2)
    uniforms = torch.tensor([0.0, 1.0 - 2.0**-53], dtype=torch.float64)
    assert draw_rows(torch.log(p), uniforms).tolist() == [1, 3]


def test_a_call_advances_each_rows_stream_by_its_own_max_tokens_whenever_it_stops() -> None:
    """Two rows of one batch, 2 and 5 tokens at most: each stream moved by exactly that many uniforms."""
    engine = _engine(max_new_tokens=8)
    rows = [(UniformStream(11), 2), (UniformStream(12), 5)]

    async def both() -> list[Generation]:
        return list(await asyncio.gather(*(engine.submit([3, 4, EQUALS], n, g) for g, n in rows)))

    asyncio.run(both())
    assert [(stream.seed, stream.position) for stream, _ in rows] == [(11, 2), (12, 5)]


_MASK = 2**64 - 1


def _splitmix_uniform(seed: int, i: int) -> float:
    """Uniform ``i`` of ``seed``'s stream from the published SplitMix64 in plain Python integers: its output function
    on the seed gives the starting state, the i-th next state's output the 53 bits of the uniform."""

    def output(z: int) -> int:
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    state = output(seed & _MASK)
    return (output((state + (i + 1) * 0x9E3779B97F4A7C15) & _MASK) >> 11) / 2.0**53


@pytest.mark.parametrize("seed", [0, 1, 7, 2**63 - 25, 2**64 - 1, -3])
def test_a_streams_uniforms_are_splitmix64s_and_continue_across_calls(seed: int) -> None:
    """Drawn in calls of 2 and 3, then 4 at once from another stream of the seed: the reference's first nine."""
    expected = [_splitmix_uniform(seed, i) for i in range(9)]
    stream = UniformStream(seed)
    got = [row_uniforms([stream], [count], torch.device("cpu"))[0].tolist() for count in (2, 3, 4)]
    assert [u for call in got for u in call] == expected
    assert stream.position == 9
    restored = UniformStream(0)
    restored.set_state(stream.get_state())  # what a checkpoint keeps: the next call goes on from position 9
    assert row_uniforms([restored], [1], torch.device("cpu"))[0].tolist() == [_splitmix_uniform(seed, 9)]
    assert all(0.0 <= u < 1.0 for u in expected)


def test_neighbouring_seeds_give_uniform_and_uncorrelated_streams() -> None:
    """200 seeds x 500 uniforms: the mean, variance and lag-one and seed-to-seed correlations of U(0, 1) draws, each
    within 5 standard errors of its value for independent uniforms (mean 1/2, variance 1/12, correlation 0)."""
    u = uniforms_at(list(range(200)), [0] * 200, 500)
    n = u.size
    assert abs(u.mean() - 0.5) <= 5 * (1 / 12 / n) ** 0.5
    assert abs(u.var() - 1 / 12) <= 5 * (1 / 180 / n) ** 0.5  # the variance of (U - 1/2)**2 is 1/180
    centred = u - 0.5
    for a, b in ((centred[:, 1:], centred[:, :-1]), (centred[1:], centred[:-1])):
        correlation = float((a * b).mean() * 12)
        assert abs(correlation) <= 5 / a.size**0.5


def test_a_state_of_another_length_is_refused() -> None:
    """A checkpoint holding torch's generator state where the stream's 16 bytes belong (an older format)."""
    with pytest.raises(ValueError, match="16 bytes"):
        UniformStream(0).set_state(torch.Generator().get_state())


def test_rollouts_of_one_prompt_differ_by_seed_and_repeat_for_the_same_seed() -> None:
    engine = _engine()

    async def group(seeds: Sequence[int]) -> list[list[list[int]]]:
        done = await asyncio.gather(*(_episode(engine, s, [2, 6, EQUALS], 2) for s in seeds))
        return [_ids(g) for g in done]

    first = asyncio.run(group(range(8)))
    assert len({str(ids) for ids in first}) > 1
    assert asyncio.run(group(range(8))) == first


def test_greedy_validation_ignores_the_episode_seed() -> None:
    engine = _engine()
    engine.is_validation = True
    answers = {str(_ids(_alone(engine, seed, [7, 3, EQUALS], 2))) for seed in range(5)}
    assert len(answers) == 1


def test_a_worker_snapshot_samples_the_engines_episodes_and_batches_them() -> None:
    engine = _engine()
    before_update = [_alone(engine, s, [4, 6, EQUALS], 2) for s in range(4)]
    snapshot = engine.for_workers()
    with torch.no_grad():  # an update after the snapshot does not reach it
        for parameter in engine.model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(3)))
    after_update = [_alone(engine, s, [4, 6, EQUALS], 2) for s in range(4)]

    worker = pickle.loads(pickle.dumps(snapshot))  # what a Ray worker unpickles
    assert isinstance(worker, WorkerEngine)
    assert all(isinstance(e, RolloutEngine) for e in (engine, engine.for_episode(1), worker, worker.for_episode(1)))
    batches: list[int] = []
    live = worker.engine()
    sample = live.sample
    live.sample = lambda requests: batches.append(len(requests)) or sample(requests)  # type: ignore[method-assign]

    async def episodes() -> list[list[Generation]]:
        return list(await asyncio.gather(*(_episode(worker, s, [4, 6, EQUALS], 2) for s in range(4))))

    remote = asyncio.run(episodes())
    assert batches[0] == 4
    assert [_ids(g) for g in remote] == [_ids(g) for g in before_update]
    assert [_ids(g) for g in remote] != [_ids(g) for g in after_update]
    assert worker.engine() is live and pickle.loads(pickle.dumps(worker))._engine is None


@pytest.mark.parametrize("precision", ["bf16-mixed", "fp16-mixed", "bf16-pure"])
def test_a_worker_samples_in_the_runs_precision(precision: str) -> None:
    """The worker's model computes as the trainer's (weights' dtype, forward's autocast): the same tokens and the
    same log-probs, which the float32 model's differ from (so the precision is what makes them agree)."""
    engine, plain = _engine(), _engine()  # the same weights (one seed); the first in the run's precision
    with pytest.warns(RLLMWarning) if precision == "bf16-pure" else nullcontext():
        precision_of(OmegaConf.create({"precision": precision})).prepare(engine.model, torch.device("cpu"))
    prompt = [4, 6, EQUALS]
    trainers = [_alone(engine, s, prompt, 2) for s in range(4)]
    worker = pickle.loads(pickle.dumps(engine.for_workers()))  # what a Ray worker unpickles
    workers = [asyncio.run(_episode(worker, s, prompt, 2)) for s in range(4)]
    float32 = [_alone(plain, s, prompt, 2) for s in range(4)]

    def logprobs(episodes: list[list[Generation]]) -> list[list[float]]:
        return [g.logprobs for generations in episodes for g in generations]

    assert [_ids(g) for g in workers] == [_ids(g) for g in trainers]
    assert logprobs(workers) == logprobs(trainers)
    assert logprobs(float32) != logprobs(trainers)


def test_a_snapshot_taken_while_validating_answers_greedily_in_the_worker() -> None:
    engine = _engine()
    engine.is_validation = True
    worker = pickle.loads(pickle.dumps(engine.for_workers()))
    expected = _ids(_alone(engine, 0, [8, 1, EQUALS], 2))
    assert {str(_ids(asyncio.run(_episode(worker, seed, [8, 1, EQUALS], 2)))) for seed in range(4)} == {str(expected)}


def test_the_workflow_engine_hands_each_episode_a_seeded_view() -> None:
    engine = _engine()
    task = {"uid": "t", "prompt": [6, 2, EQUALS], "answers": [6]}

    def run(seed: int) -> list[int]:
        call = WorkflowCall(ArithmeticWorkflow, {}, engine, task, "t:0", seed)
        episode = asyncio.run(instantiate(call, engine).run(task, "t:0"))
        return list(episode.trajectories[0].steps[0].response_ids)

    assert [run(s) for s in range(6)] == [run(s) for s in range(6)]
