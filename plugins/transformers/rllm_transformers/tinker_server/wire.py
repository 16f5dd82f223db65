"""Tinker's wire formats: requests in (JSON, or protobuf with the SDK's own schema, maybe zstd) and answers out.

The SDK sends ``forward_backward`` as ``application/x-protobuf`` from 0.22 on (JSON before) and
asks for protobuf answers (``Accept``) for the two result types it decodes from protobuf,
``ForwardBackwardOutput`` and ``SampleResponse``; SDK 0.38 refuses a JSON answer for them. The
schema is ``tinker.proto.tinker_public_pb2``, so reading protobuf needs the ``tinker`` package.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PROTOBUF = "application/x-protobuf"


class WireError(Exception):
    """A request the server refuses: the route, the field and what to do, as one line; ``status`` is HTTP's."""

    def __init__(self, route: str, where: str, message: str, status: int = 400) -> None:
        self.route, self.where, self.status = route, where, status
        self.line = f"{route}: {where}: {message}" if where else f"{route}: {message}"
        super().__init__(self.line)

    def body(self) -> dict[str, Any]:
        return {"error": self.line, "category": "user", "route": self.route, "field": self.where}


@dataclass
class Datum:
    """One ``Datum``: its input tokens and its ``loss_fn_inputs`` as flat arrays."""

    tokens: list[int]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Batch:
    """A ``forward`` or ``forward_backward`` request, whichever wire it came on."""

    model_id: str
    loss_fn: str
    config: dict[str, float | str]
    data: list[Datum]
    forward_only: bool


def decode_batch(route: str, body: bytes, content_type: str, encoding: str, forward_only: bool) -> Batch:
    """The request body as a :class:`Batch`: protobuf (the SDK from 0.22 on) or JSON (before)."""
    if encoding.strip().lower() == "zstd":
        import zstandard

        try:
            body = zstandard.ZstdDecompressor().decompress(body)
        except zstandard.ZstdError as exc:
            raise WireError(
                route, "body", f"Content-Encoding zstd, but the body does not decompress ({exc})."
            ) from None
    if PROTOBUF in content_type:
        return _batch_from_proto(route, body)
    payload = read_json(route, body)
    key = "forward_input" if "forward_input" in payload else "forward_backward_input"
    section = payload.get(key)
    if not isinstance(section, dict):
        raise WireError(route, key, "missing; the body must hold the data, loss_fn and model_id.")
    data = section.get("data")
    if not isinstance(data, list):
        raise WireError(route, f"{key}.data", "must be a list of Datum objects.")
    config = section.get("loss_fn_config") or {}
    if not isinstance(config, dict):
        raise WireError(route, f"{key}.loss_fn_config", "must be an object of numbers or strings.")
    return Batch(
        _string(route, payload, "model_id"),
        _string(route, section, "loss_fn", f"{key}."),
        config,
        [_datum_from_json(route, f"data[{i}]", item) for i, item in enumerate(data)],
        forward_only or key == "forward_input",
    )


def read_json(route: str, body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WireError(route, "body", f"not valid JSON ({exc}).") from None
    if not isinstance(payload, dict):
        raise WireError(route, "body", "must be a JSON object.")
    return payload


def _string(route: str, payload: dict[str, Any], key: str, prefix: str = "") -> str:
    value = payload.get(key)
    if not isinstance(value, str) or not value:
        raise WireError(route, prefix + key, f"must be a non-empty string, got {value!r}.")
    return value


def _datum_from_json(route: str, where: str, item: Any) -> Datum:
    if not isinstance(item, dict) or not isinstance(item.get("model_input"), dict):
        raise WireError(route, where, "must be a Datum object with model_input and loss_fn_inputs.")
    tokens: list[int] = []
    for j, chunk in enumerate(item["model_input"].get("chunks") or []):
        kind = chunk.get("type", "encoded_text") if isinstance(chunk, dict) else None
        if kind != "encoded_text":
            raise WireError(route, f"{where}.model_input.chunks[{j}]", f"chunk type {kind!r}: only token chunks.")
        tokens.extend(int(t) for t in chunk.get("tokens") or [])
    inputs = {}
    for name, tensor in (item.get("loss_fn_inputs") or {}).items():
        if not isinstance(tensor, dict) or not isinstance(tensor.get("data"), list):
            raise WireError(route, f"{where}.loss_fn_inputs.{name}", "must be a TensorData object with data.")
        dtype = np.int64 if tensor.get("dtype") == "int64" else np.float32
        values = np.asarray(tensor["data"], dtype=dtype)
        crow, col = tensor.get("sparse_crow_indices"), tensor.get("sparse_col_indices")
        if crow is not None:
            values = _dense(values, np.asarray(crow), np.asarray(col or []), tensor.get("shape"))
        inputs[name] = values.reshape(-1)
    return Datum(tokens, inputs)


def _batch_from_proto(route: str, body: bytes) -> Batch:
    from google.protobuf.message import DecodeError
    from tinker.proto import tinker_public_pb2 as pb

    message = pb.ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise WireError(route, "body", f"not a ForwardBackwardRequest protobuf ({exc}).") from None
    config: dict[str, float | str] = dict(message.loss_fn_config)
    for key, value in message.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    data = []
    for i, item in enumerate(message.data):
        tokens: list[int] = []
        for j, chunk in enumerate(item.model_input):
            kind = chunk.WhichOneof("chunk")
            if kind != "encoded_text":
                raise WireError(route, f"data[{i}].model_input[{j}]", f"chunk type {kind!r}: only token chunks.")
            tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
        inputs = {name: _tensor_from_proto(pb, tensor) for name, tensor in item.loss_fn_inputs.items()}
        data.append(Datum(tokens, inputs))
    return Batch(message.model_id, message.loss_fn, config, data, bool(message.forward_only))


def _tensor_from_proto(pb: Any, tensor: Any) -> np.ndarray:
    dtype = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}.get(tensor.dtype)
    if dtype is None:
        dtype = np.float32
    if tensor.WhichOneof("encoding") == "sparse_csr":
        csr = tensor.sparse_csr
        values = np.frombuffer(csr.values, dtype=dtype)
        crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
        col = np.frombuffer(csr.col_indices, dtype=np.int64)
        return _dense(values, crow, col, list(tensor.shape)).reshape(-1)
    return np.frombuffer(tensor.dense, dtype=dtype).copy()


def _dense(values: np.ndarray, crow: np.ndarray, col: np.ndarray, shape: Any) -> np.ndarray:
    """A CSR matrix as its dense form, zero where nothing is listed."""
    rows = len(crow) - 1
    width = int(shape[-1]) if shape else (int(col.max()) + 1 if len(col) else 0)
    dense = np.zeros((rows, width), dtype=values.dtype)
    for row in range(rows):
        span = slice(int(crow[row]), int(crow[row + 1]))
        dense[row, col[span]] = values[span]
    return dense


def forward_output(logprobs: list[np.ndarray], metrics: dict[str, float], proto: bool) -> tuple[bytes, str]:
    """A ``ForwardBackwardOutput``: each datum's ``logprobs`` of its target tokens, and the metrics."""
    if not proto:
        outputs = [{"logprobs": {"data": lp.tolist(), "dtype": "float32", "shape": [len(lp)]}} for lp in logprobs]
        body = {"loss_fn_output_type": "ArrayRecord", "loss_fn_outputs": outputs, "metrics": metrics}
        return json.dumps(body).encode(), "application/json"
    from tinker.proto import tinker_public_pb2 as pb

    message = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", metrics=metrics)
    record = message.loss_fn_outputs.add(num_datums=len(logprobs))
    arrays = [np.asarray(lp, dtype=np.float32) for lp in logprobs]
    offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64)
    column = record.fields["logprobs"]
    column.dtype = pb.DTYPE_FLOAT32
    column.data = b"".join(a.tobytes() for a in arrays)
    column.offsets = offsets.tobytes()
    return message.SerializeToString(), PROTOBUF


@dataclass
class Sequence:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str
    """``stop`` or ``length``."""


def sample_output(sequences: list[Sequence], prompt_logprobs: list[float] | None, proto: bool) -> tuple[bytes, str]:
    """A ``SampleResponse``; a prompt's first position has no log-prob (NaN on protobuf, null in JSON)."""
    if not proto:
        body: dict[str, Any] = {
            "type": "sample",
            "sequences": [
                {"tokens": s.tokens, "logprobs": s.logprobs, "stop_reason": s.stop_reason} for s in sequences
            ],
        }
        if prompt_logprobs is not None:
            body["prompt_logprobs"] = [None if np.isnan(v) else v for v in prompt_logprobs]
        return json.dumps(body).encode(), "application/json"
    from tinker.proto import tinker_public_pb2 as pb

    message = pb.SampleResponse()
    for s in sequences:
        message.sequences.add(
            stop_reason=pb.STOP_REASON_STOP if s.stop_reason == "stop" else pb.STOP_REASON_LENGTH,
            tokens=np.asarray(s.tokens, dtype=np.int32).tobytes(),
            logprobs=np.asarray(s.logprobs, dtype=np.float32).tobytes(),
        )
    if prompt_logprobs is not None:
        message.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    return message.SerializeToString(), PROTOBUF
