"""``rllm serve --tinker``: the Tinker REST API (``/api/v1/...``) over the transformers backend (see docs/tinker.md).

The routes are those the official ``tinker`` SDK's training, sampling and checkpoint paths call;
their request and answer shapes are the SDK's own types. FastAPI, uvicorn and ``tinker`` (for its
protobuf schema) are the ``tinker`` extra.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rllm.errors import ConfigError
from rllm_transformers.plugin import _installed

_ABSENT = [name for name in ("fastapi", "uvicorn", "tinker") if not _installed(name)]
if _ABSENT:  # the extra first: one line naming it, not an ImportError
    raise ConfigError(f"rllm serve --tinker needs {', '.join(_ABSENT)}: pip install 'rllm[tinker]'.")

from fastapi import FastAPI, Request  # noqa: E402  (after the extra's check)
from fastapi.responses import JSONResponse, Response  # noqa: E402

from rllm_transformers.model import load_policy, use_threads  # noqa: E402
from rllm_transformers.serve import listen  # noqa: E402
from rllm_transformers.tinker_server.service import SNAPSHOTS_KEPT, TinkerService  # noqa: E402
from rllm_transformers.tinker_server.trainer import TinkerTrainer  # noqa: E402
from rllm_transformers.tinker_server.wire import PROTOBUF, WireError, decode_batch, read_json  # noqa: E402

API = "/api/v1"
CLIENT_CONFIG = {
    "parallel_fwdbwd_chunks": False,
    "proto_compress_fwdbwd": False,
    "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False,
    "sample_join_sampling_session": False,
    "use_pyqwest_transport": True,
}
"""The SDK's feature flags as this server serves them: chunks of one ``forward_backward`` sent in turn (the queue
runs in arrival order), uncompressed bodies (zstd is still read), per-request polling, custom losses client-side,
and the SDK's default (pyqwest) transport, faster than httpx's for the many small ``asample`` calls."""


def build_app(service: TinkerService, client_config: dict[str, Any] | None = None) -> FastAPI:
    app = FastAPI(title="rllm serve --tinker")
    flags = {**CLIENT_CONFIG, **(client_config or {})}

    @app.exception_handler(WireError)
    async def refused(request: Request, exc: WireError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    async def body_of(request: Request) -> dict[str, Any]:
        return read_json(request.url.path, await request.body())

    @app.get(f"{API}/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @app.post(f"{API}/client/config")
    async def client_config_route(request: Request) -> dict[str, Any]:
        return flags

    @app.get(f"{API}/get_server_capabilities")
    async def capabilities() -> dict[str, Any]:
        model = {"model_name": service.model_name, "max_context_length": service.trainer.context_limit}
        return {"supported_models": [{**model, "trainable": True, "sampleable": True}]}

    @app.post(f"{API}/telemetry")
    async def telemetry(request: Request) -> dict[str, Any]:
        return {"status": "accepted"}

    @app.post(f"{API}/create_session")
    async def create_session(request: Request) -> dict[str, Any]:
        await body_of(request)
        return {"type": "create_session", "session_id": service.create_session()}

    @app.post(f"{API}/session_heartbeat")
    async def heartbeat(request: Request) -> dict[str, Any]:
        service.heartbeat(request.url.path, (await body_of(request)).get("session_id"))
        return {"type": "session_heartbeat"}

    @app.post(f"{API}/sessions/{{session_id}}/finish")
    async def finish(session_id: str) -> Response:
        service.finish(session_id)
        return Response(status_code=200, content=b"null", media_type="application/json")

    @app.post(f"{API}/create_model")
    async def create_model(request: Request) -> dict[str, Any]:
        return service.create_model(request.url.path, await body_of(request))

    @app.post(f"{API}/get_info")
    async def get_info(request: Request) -> dict[str, Any]:
        return service.info(request.url.path, await body_of(request))

    async def batch_route(request: Request, forward_only: bool) -> dict[str, Any]:
        route = request.url.path
        headers = request.headers
        batch = decode_batch(
            route,
            await request.body(),
            headers.get("content-type", ""),
            headers.get("content-encoding", ""),
            forward_only,
        )
        return service.forward_backward(route, batch)

    @app.post(f"{API}/forward_backward")
    async def forward_backward(request: Request) -> dict[str, Any]:
        return await batch_route(request, False)

    @app.post(f"{API}/forward")
    async def forward(request: Request) -> dict[str, Any]:
        return await batch_route(request, True)

    @app.post(f"{API}/optim_step")
    async def optim_step(request: Request) -> dict[str, Any]:
        return service.optim_step(request.url.path, await body_of(request))

    @app.post(f"{API}/save_weights")
    async def save_weights(request: Request) -> dict[str, Any]:
        return service.save_weights(request.url.path, await body_of(request))

    @app.post(f"{API}/save_weights_for_sampler")
    async def save_for_sampler(request: Request) -> dict[str, Any]:
        return service.save_for_sampler(request.url.path, await body_of(request))

    @app.post(f"{API}/load_weights")
    async def load_weights(request: Request) -> dict[str, Any]:
        return service.load_weights(request.url.path, await body_of(request))

    @app.post(f"{API}/create_sampling_session")
    async def create_sampling_session(request: Request) -> dict[str, Any]:
        return service.create_sampling_session(request.url.path, await body_of(request))

    @app.get(f"{API}/samplers/{{sampler_id}}")
    async def sampler(request: Request, sampler_id: str) -> dict[str, Any]:
        return service.sampler(request.url.path, sampler_id)

    @app.post(f"{API}/weights_info")
    async def weights_info(request: Request) -> dict[str, Any]:
        return service.weights_info(request.url.path, await body_of(request))

    @app.post(f"{API}/asample")
    async def asample(request: Request) -> dict[str, Any]:
        return service.sample(request.url.path, await body_of(request))

    @app.post(f"{API}/retrieve_future")
    async def retrieve_future(request: Request) -> Response:
        answer = await service.retrieve(request.url.path, (await body_of(request)).get("request_id"))
        content, media = answer(PROTOBUF in request.headers.get("accept", ""))
        return Response(content=content, media_type=media)

    return app


def serve_tinker(
    config: DictConfig,
    host: str,
    port: int,
    model_name: str | None,
    checkpoint_dir: str | None,
    snapshots: int | None = None,
    reproducible: bool = False,
) -> int:
    """Load the model ``rllm.transformers`` names and answer the Tinker API until interrupted, keeping ``snapshots``
    unnamed sampler snapshots (None: :data:`SNAPSHOTS_KEPT`); ``reproducible`` samples each request alone."""
    import uvicorn

    sock = listen(host, port)
    options = config.rllm.transformers
    policy = load_policy(options)
    use_threads(options, policy.model, policy.device)
    name = model_name or str(options.model)
    root = Path(checkpoint_dir) if checkpoint_dir else Path(tempfile.mkdtemp(prefix="rllm-tinker-"))
    root.mkdir(parents=True, exist_ok=True)
    kept = SNAPSHOTS_KEPT if snapshots is None else snapshots
    service = TinkerService(TinkerTrainer(policy, int(options.seed)), name, root, kept, batched=not reproducible)
    sampling = "each sample request alone (reproducible)" if reproducible else "concurrent sample requests batched"
    print(
        f"rllm serve --tinker: {name} on http://{host}:{port} (TINKER_BASE_URL), checkpoints in {root}; "
        f"full-weight training (a LoRA rank is taken as full weights); the newest {kept} sampler snapshots kept; "
        f"{sampling}",
        flush=True,
    )
    uvicorn.Server(uvicorn.Config(build_app(service), log_level="warning")).run(sockets=[sock])
    return 0
