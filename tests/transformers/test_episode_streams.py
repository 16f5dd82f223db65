"""The transformers engine's per-episode random streams and its snapshot for Ray workers.

An episode's view draws each token with the episode's own generator, so what it samples does
not depend on the other rows of its batches; the snapshot a worker unpickles samples the same
episodes as the engine it was taken from.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Sequence

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import OmegaConf

from rllm.engine import Generation, RolloutEngine
from rllm.tasks import EQUALS, ArithmeticWorkflow
from rllm.trainer.engine import WorkflowCall, instantiate
from rllm_transformers.engine import Sampling, TransformersEngine, draw_rows, sampling_log_probs
from rllm_transformers.model import char_tokenizer, tiny_model
from rllm_transformers.workers import WorkerEngine

EOS = 13


def _engine(max_new_tokens: int = 6, sampling: Sampling | None = None) -> TransformersEngine:
    tokenizer = char_tokenizer()
    torch.manual_seed(0)
    options = OmegaConf.create({"hidden_size": 32, "num_layers": 1})
    model = tiny_model(options, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    generator = torch.Generator().manual_seed(0)
    return TransformersEngine(
        model, tokenizer, torch.device("cpu"), generator, sampling or Sampling(), max_new_tokens, 16, True
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


def test_the_first_token_is_the_race_drawn_with_a_generator_seeded_with_the_episode_seed() -> None:
    """The independent formula: one unpadded forward pass, the sampling distribution, argmax(p / Exp(1))."""
    engine = _engine(sampling=Sampling(temperature=0.7, top_k=5))
    prompt = [5, 1, EQUALS]
    with torch.no_grad():
        logits = engine.model(input_ids=torch.tensor([prompt])).logits[:, -1, :]
    probs = sampling_log_probs(logits, engine.sampling).exp()[0]
    for seed in range(6):
        race = torch.empty_like(probs).exponential_(generator=torch.Generator().manual_seed(seed))
        expected = int((probs / race).argmax())
        assert _alone(engine, seed, prompt, turns=1)[0].response_ids[0] == expected


def test_a_rows_draw_follows_its_distribution() -> None:
    """8,000 rows of p = (0.5, 0.3, 0.15, 0.05, 0), each its own seed: frequencies within 4.5 sigma of p."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    n = 8000
    generators = [torch.Generator().manual_seed(seed) for seed in range(n)]
    tokens = draw_rows(torch.log(p).expand(n, -1), torch.ones(n, dtype=torch.bool), generators, pad=9)
    counts = torch.bincount(tokens, minlength=5).double()
    sigma = (n * p * (1 - p)).double().sqrt()
    assert counts[4] == 0
    assert bool(((counts - n * p).abs()[:4] <= 4.5 * sigma[:4]).all()), counts.tolist()


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


def test_a_finished_row_draws_nothing_from_its_generator() -> None:
    log_p = torch.log(torch.full((2, 4), 0.25))
    gens = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    before = gens[1].get_state()
    token = draw_rows(log_p, torch.tensor([True, False]), gens, pad=9)
    assert int(token[1]) == 9 and torch.equal(gens[1].get_state(), before)
    race = torch.empty(4).exponential_(generator=torch.Generator().manual_seed(1))
    assert int(token[0]) == int((log_p[0].exp() / race).argmax())


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
