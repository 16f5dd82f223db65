"""The built-in weight syncs against a stub server: what they send, and a refused update stopping the run."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stub_server import Stub, stub_server

from rllm.config import load_config
from rllm.engine import DiskWeightSync, MemoryWeightSync, PolicyUpdate, VLLMWeightSync, weight_sync_for
from rllm.errors import ConfigError, WeightSyncError, WeightSyncNotFoundError


@pytest.fixture
def stub() -> Iterator[Stub]:
    with stub_server() as server:

        def reply(path: str, body: Any) -> tuple[int, dict[str, Any]]:
            version = body["weight_version"] if isinstance(body, dict) else int(path.split("=")[-1])
            return 200, {"success": True, "weight_version": version}

        server.reply = reply
        yield server


def _update(tmp_path: Path, version: int, dtypes: list[str | None] | None = None) -> PolicyUpdate:
    """An update writing stand-in weights; ``dtypes`` records the dtype each save or send was asked for."""
    asked = [] if dtypes is None else dtypes

    def save(directory: Path, dtype: str | None = None) -> None:
        asked.append(dtype)
        directory.mkdir(parents=True)
        (directory / "model.safetensors").write_bytes(b"weights")

    def state_bytes(dtype: str | None = None) -> bytes:
        asked.append(dtype)
        return b"raw-weights"

    return PolicyUpdate(version=version, save=save, state_bytes=state_bytes, directory=tmp_path)


def _config(*overrides: str) -> Any:
    return load_config(overrides=["rllm.rollout.openai.weight_sync_timeout=5", *overrides])


def test_disk_saves_posts_each_server_and_keeps_only_the_latest(stub: Stub, tmp_path: Path) -> None:
    sync = weight_sync_for(_config(), [f"{stub.root}/v1", f"{stub.root}/v1/"])
    assert isinstance(sync, DiskWeightSync)
    sync.push(_update(tmp_path, 1))
    sync.push(_update(tmp_path, 2))
    first, latest = tmp_path / "weights_v1", tmp_path / "weights_v2"
    assert stub.seen == [
        ("/update_weights_from_disk", {"model_path": str(first), "weight_version": 1}),
        ("/update_weights_from_disk", {"model_path": str(first), "weight_version": 1}),
        ("/update_weights_from_disk", {"model_path": str(latest), "weight_version": 2}),
        ("/update_weights_from_disk", {"model_path": str(latest), "weight_version": 2}),
    ]
    assert not first.exists() and (latest / "model.safetensors").read_bytes() == b"weights"


def test_memory_posts_the_bytes_with_the_version(stub: Stub, tmp_path: Path) -> None:
    sync = weight_sync_for(_config("rllm.rollout.openai.weight_sync=memory"), [f"{stub.root}/v1"])
    assert isinstance(sync, MemoryWeightSync)
    sync.push(_update(tmp_path, 3))
    assert stub.seen == [("/update_weights_from_safetensors?weight_version=3", b"raw-weights")]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("status", "answer", "said"),
    [
        (400, {"error": {"message": "model_path 'x': no such directory."}}, "refused by"),
        (500, {"detail": "boom"}, "HTTP 500: boom"),
        (200, {"success": False, "message": "shape mismatch"}, "shape mismatch"),
        (200, {"success": True, "weight_version": 9}, "now reports weight_version 9"),
        (200, {"success": True, "weight_version": "v1"}, "answered weight_version = 'v1'; it must be an integer"),
        (200, {"success": True, "weight_version": True}, "answered weight_version = True"),
    ],
)
def test_a_refused_update_is_one_line_naming_the_server(
    stub: Stub, tmp_path: Path, status: int, answer: dict[str, Any], said: str
) -> None:
    stub.reply = lambda path, body: (status, answer)
    with pytest.raises(WeightSyncError) as caught:
        weight_sync_for(_config(), [f"{stub.root}/v1"]).push(_update(tmp_path, 1))
    message = str(caught.value)
    assert said in message and stub.root + "/update_weights_from_disk" in message
    assert "stops before training on stale weights" in message and "\n" not in message


def test_an_unreachable_server_is_one_line_naming_it(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(WeightSyncError, match=rf"did not reach http://127.0.0.1:{port}/update_weights_from_disk: "):
        weight_sync_for(_config(), [f"http://127.0.0.1:{port}/v1"]).push(_update(tmp_path, 1))


def test_an_unknown_sync_is_refused_by_the_config() -> None:
    from rllm.errors import ConfigError

    with pytest.raises((ConfigError, WeightSyncNotFoundError), match=r"rllm\.rollout\.openai\.weight_sync"):
        weight_sync_for(_config("rllm.rollout.openai.weight_sync=carrier_pigeon"), ["http://127.0.0.1:1/v1"])


def test_push_to_sends_one_server_alone(stub: Stub, tmp_path: Path) -> None:
    sync = weight_sync_for(_config("rllm.rollout.openai.weight_sync=memory"), [f"{stub.root}/v1", "http://x:1/v1"])
    sync.push_to(_update(tmp_path, 4), f"{stub.root}/v1/")
    assert stub.seen == [("/update_weights_from_safetensors?weight_version=4", b"raw-weights")]
    assert sync.servers == [f"{stub.root}/v1", "http://x:1/v1"]  # the sync itself still pushes to both


def test_vllm_saves_then_reloads_in_place_and_sets_the_version(stub: Stub, tmp_path: Path) -> None:
    stub.reply = lambda path, body: (200, {"results": [None]} if path == "/collective_rpc" else {"success": True})
    sync = weight_sync_for(_config("rllm.rollout.openai.weight_sync=vllm"), [f"{stub.root}/v1"])
    assert isinstance(sync, VLLMWeightSync)
    sync.push(_update(tmp_path, 2))
    saved = str((tmp_path / "weights_v2").resolve())
    assert stub.seen == [
        ("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": saved}}),
        ("/reset_prefix_cache", {}),
        ("/update_weight_version", {"new_version": "2"}),
    ]


@pytest.mark.parametrize(
    ("sync", "key", "expected"),
    [
        ("vllm", "auto", "bfloat16"),  # vLLM casts to the dtype it serves: half a float32 trainer's bytes
        ("disk", "auto", None),  # rllm serve refuses another dtype than it serves: the trained weights' own
        ("memory", "auto", None),
        ("vllm", "float32", "float32"),
        ("disk", "bfloat16", "bfloat16"),
        ("memory", "float16", "float16"),
    ],
)
def test_each_sync_writes_in_its_serving_dtype(stub: Stub, tmp_path: Path, sync: str, key: str, expected: Any) -> None:
    stub.reply = lambda path, body: (200, {"success": True})
    overrides = (f"rllm.rollout.openai.weight_sync={sync}", f"rllm.rollout.openai.weight_sync_dtype={key}")
    asked: list[str | None] = []
    weight_sync_for(_config(*overrides), [f"{stub.root}/v1"]).push(_update(tmp_path, 1, asked))
    assert asked == [expected]


def test_an_unknown_sync_dtype_is_refused_by_the_config() -> None:
    with pytest.raises(ConfigError) as caught:
        _config("rllm.rollout.openai.weight_sync_dtype=int8")
    assert str(caught.value) == (
        "rllm.rollout.openai.weight_sync_dtype must be one of auto, float32, bfloat16, float16; got 'int8'."
    )
