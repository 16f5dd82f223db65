"""The Tinker server's queue in process (no HTTP): concurrent ``asample`` requests are sampled in batches, and a
request's numbers are those it gets when sent alone; snapshots of sampler weights are pruned."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without
from serving import TINY_TEXT

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[tinker,test]'")

import numpy as np

from rllm.config import load_config
from rllm_transformers.model import load_policy
from rllm_transformers.tinker_server.service import SNAPSHOTS_KEPT, TinkerService
from rllm_transformers.tinker_server.trainer import TinkerTrainer
from rllm_transformers.tinker_server.wire import WireError

ROUTE = "/api/v1/asample"
NAME = "tiny"


@pytest.fixture(scope="module")
def trainer() -> TinkerTrainer:
    return TinkerTrainer(load_policy(load_config(overrides=list(TINY_TEXT)).rllm.transformers), 0)


def _service(trainer: TinkerTrainer, root: Path, batched: bool = True) -> tuple[TinkerService, list[int]]:
    """A service over ``trainer`` whose engine records the rows of each batched call it makes."""
    service = TinkerService(trainer, NAME, root, batched=batched)
    rows: list[int] = []
    engine = trainer.engine
    sample = type(engine).sample

    def counted(requests: Any) -> Any:
        rows.append(len(requests))
        return sample(engine, requests)

    engine.sample = counted  # type: ignore[method-assign]
    return service, rows


def _body(prompt: list[int], seed: int | None, max_tokens: int, count: int = 1, temperature: float = 1.0) -> dict:
    params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature, "seed": seed}
    return {
        "base_model": NAME,
        "prompt": {"chunks": [{"tokens": prompt, "type": "encoded_text"}]},
        "num_samples": count,
        "sampling_params": params,
    }


async def _answers(service: TinkerService, bodies: list[dict]) -> list[dict]:
    """Every body queued before the worker's first turn, then each one's answer."""
    ids = [service.sample(ROUTE, body)["request_id"] for body in bodies]
    answers = []
    for request_id in ids:
        content, _ = (await service.retrieve("/api/v1/retrieve_future", request_id))(False)
        answers.append(json.loads(content))
    return answers


BODIES = [
    _body([3, 5, 7], 11, 8, count=2),
    _body([4, 9, 2, 6, 1, 8], 12, 5),
    _body([7], 13, 8, count=3),
    _body([3, 5, 7], 11, 4),  # the first request's seed and prompt, fewer tokens: the first 4 of its first sequence
    _body([2, 2, 4, 6], None, 6, temperature=0.0),  # greedy: a batch of its own
    _body([8, 1], 14, 7),
]


def test_concurrent_samples_are_one_batch_with_the_numbers_each_gets_alone(
    trainer: TinkerTrainer, tmp_path: Path
) -> None:
    service, rows = _service(trainer, tmp_path)
    together = asyncio.run(_answers(service, BODIES))
    assert rows == [2 + 1 + 3 + 1 + 1, 1]  # the seeded rows in one call, the greedy one in another
    rows.clear()
    alone = [asyncio.run(_answers(service, [body]))[0] for body in BODIES]
    assert rows == [2, 1, 3, 1, 1, 1]
    lengths = []
    for batched, single, body in zip(together, alone, BODIES, strict=True):
        assert len(batched["sequences"]) == len(single["sequences"]) == body["num_samples"]
        for one, other in zip(batched["sequences"], single["sequences"], strict=True):
            assert one["tokens"] == other["tokens"]
            assert np.allclose(one["logprobs"], other["logprobs"], rtol=0, atol=1e-5)
            lengths.append(len(one["tokens"]))
    assert max(lengths) > 1
    # a seed's stream is the request's own: the first request's two sequences differ, the shorter one is a prefix
    first, shorter = together[0]["sequences"], together[3]["sequences"][0]["tokens"]
    assert first[0]["tokens"] != first[1]["tokens"]
    assert first[0]["tokens"][: len(shorter)] == shorter


def test_unbatched_each_request_is_sampled_alone_and_its_numbers_repeat_bit_for_bit(
    trainer: TinkerTrainer, tmp_path: Path
) -> None:
    """``--reproducible``: requests queued together are still sampled one call each, so their log-probs are
    exactly (not only to rounding) those of the same request sent alone."""
    service, rows = _service(trainer, tmp_path, batched=False)
    together = asyncio.run(_answers(service, BODIES))
    assert rows == [body["num_samples"] for body in BODIES]
    seeded = [i for i, body in enumerate(BODIES) if body["sampling_params"]["seed"] is not None]
    alone = {i: asyncio.run(_answers(service, [BODIES[i]]))[0] for i in seeded}
    for i in seeded:
        assert together[i]["sequences"] == alone[i]["sequences"]


def test_a_bad_sample_request_is_refused_when_it_arrives(trainer: TinkerTrainer, tmp_path: Path) -> None:
    service, rows = _service(trainer, tmp_path)

    async def refused(body: dict) -> WireError:
        with pytest.raises(WireError) as caught:
            service.sample(ROUTE, body)
        return caught.value

    bad = {**_body([3, 5], 1, 4), "num_samples": 0}
    assert asyncio.run(refused(bad)).line == f"{ROUTE}: num_samples: must be a positive integer, got 0."
    bad = _body([3, 5], 1, 4)
    bad["sampling_params"]["seed"] = "7"
    assert asyncio.run(refused(bad)).where == "sampling_params.seed"
    assert rows == []


async def _answer(service: TinkerService, queued: dict) -> dict:
    content, _ = (await service.retrieve("/api/v1/retrieve_future", queued["request_id"]))(False)
    return json.loads(content)


def test_snapshots_past_the_newest_few_are_deleted_unless_a_queued_sample_reads_them(
    trainer: TinkerTrainer, tmp_path: Path
) -> None:
    """save_weights_and_get_sampling_client once per step: the server keeps the newest SNAPSHOTS_KEPT snapshots
    (and one a queued sample still reads) on disk, and a named save_weights_for_sampler for good."""
    service, rows = _service(trainer, tmp_path)
    save = "/api/v1/save_weights_for_sampler"

    async def run() -> tuple[list[str], dict, str, dict]:
        session = service.create_session()
        created = service.create_model("/api/v1/create_model", {"session_id": session, "base_model": NAME})
        model_id = (await _answer(service, created))["model_id"]

        def snapshot(i: int) -> dict:
            return service.save_for_sampler(save, {"model_id": model_id, "sampling_session_seq_id": i})

        sessions = [(await _answer(service, snapshot(0)))["sampling_session_id"]]
        named = await _answer(service, service.save_for_sampler(save, {"model_id": model_id, "path": "kept"}))
        # queued behind more snapshots than are kept: a sample of the first one, which must still find it
        queued = [snapshot(i) for i in range(1, SNAPSHOTS_KEPT + 3)]
        body = {**_body([3, 5, 7], 5, 3), "sampling_session_id": sessions[0]}
        del body["base_model"]
        late = service.sample(ROUTE, body)
        sessions += [(await _answer(service, q))["sampling_session_id"] for q in queued]
        sampled = await _answer(service, late)
        sessions.append((await _answer(service, snapshot(SNAPSHOTS_KEPT + 3)))["sampling_session_id"])
        return sessions, sampled, named["path"], body

    sessions, sampled, named, body = asyncio.run(run())
    assert len(sampled["sequences"]) == 1 and rows == [1]
    root = next(tmp_path.iterdir()) / "sampler_weights"
    on_disk = sorted(p.name for p in root.iterdir())
    newest = [s.split(":sample:")[1] for s in sessions[-SNAPSHOTS_KEPT:]]
    assert on_disk == sorted([*newest, "kept"])
    assert named.endswith("/sampler_weights/kept")
    with pytest.raises(WireError) as caught:
        asyncio.run(_refuse(service, body))
    assert (caught.value.status, caught.value.where) == (404, "sampling_session_id")
    assert f"{SNAPSHOTS_KEPT} newer ones exist" in caught.value.line


async def _refuse(service: TinkerService, body: dict) -> None:
    service.sample(ROUTE, body)
