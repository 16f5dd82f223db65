"""``rllm serve``: an OpenAI-compatible HTTP server over the transformers backend's model (see docs/serve.md).

Requests arriving within a short window are sampled together by :class:`TransformersEngine`'s
batched sampler (one call per distinct sampling setting), in a worker thread so the server keeps
accepting requests meanwhile. Token ids and log-probs use vLLM's field names; the weight update
is SGLang's ``/update_weights_from_disk``. FastAPI and uvicorn are the ``serve`` extra.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import socket
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from rllm.engine import Generation, openai_api
from rllm.errors import ConfigError
from rllm_transformers.checkpoint import ADAPTER_CONFIG, MODEL_DIR
from rllm_transformers.engine import SampleRequest, Sampling, TransformersEngine, UniformStream
from rllm_transformers.lora import lora_settings
from rllm_transformers.model import Policy, load_policy, use_threads
from rllm_transformers.plugin import _installed
from rllm_transformers.weights import load_checked

Choice, Params, RequestError = openai_api.Choice, openai_api.Params, openai_api.RequestError

_ABSENT = [name for name in ("fastapi", "uvicorn") if not _installed(name)]
if _ABSENT:  # the extra first: one line naming it, not an ImportError
    raise ConfigError(f"rllm serve needs {', '.join(_ABSENT)}: pip install 'rllm[serve]'.")

from fastapi import FastAPI, Request  # noqa: E402  (after the extra's check)
from fastapi.responses import JSONResponse  # noqa: E402

WINDOW_SECONDS = 0.01
"""How long the first request of a batch waits for others to join it."""


class Server:
    """The model, its weight version and the pending requests of the next batch (``batched``: requests that arrive
    together are sampled together; else each request's samples alone, so its log-probs do not depend, even in
    rounding, on what arrived with it)."""

    def __init__(self, policy: Policy, model_name: str, seed: int, batched: bool = True) -> None:
        self.policy = policy
        self.batched = batched
        self.model_name = model_name
        self.weight_version = 0
        self.start_id = uuid.uuid4().hex
        """New at every start: a restarted server (back on its initial weights) is told apart by it on /health."""
        self.context_limit = int(getattr(policy.model.config, "max_position_embeddings", 2048))
        self.stream = UniformStream(seed)
        self.generate_calls = 0
        self.requests = 0
        self._pending: list[tuple[SampleRequest, Params, int]] = []
        """Each sample waiting for the next batch, with its request and that request's number."""
        self._flush: asyncio.Task[None] | None = None
        self._model_lock = asyncio.Lock()
        limit = self.context_limit
        self.engine = TransformersEngine(
            policy.model, policy.tokenizer, policy.device, self.stream, Sampling(), limit, limit, True
        )

    def check_model(self, body: dict[str, Any]) -> None:
        name = body.get("model")
        if name != self.model_name:
            raise RequestError(
                f"The model {name!r} does not exist; this server serves {self.model_name!r} (see /v1/models).",
                "model",
                404,
                "model_not_found",
            )

    def completion_prompt(self, body: dict[str, Any]) -> list[int]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            return list(self.policy.tokenizer.encode(prompt, add_special_tokens=False))
        vocab = len(self.policy.tokenizer)
        if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            bad = [t for t in prompt if not 0 <= t < vocab]
            if bad:
                raise RequestError(f"prompt token id {bad[0]} is outside the vocabulary (0..{vocab - 1}).", "prompt")
            return list(prompt)
        raise RequestError("prompt must be a string or a list of token ids (one prompt per request).", "prompt")

    def chat_prompt(self, body: dict[str, Any]) -> list[int]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise RequestError("messages must be a non-empty list of {role, content} objects.", "messages")
        if getattr(self.policy.tokenizer, "chat_template", None) is None:
            raise RequestError("this model's tokenizer has no chat template; use /v1/completions.", "messages")
        try:
            return self.engine.chat_ids(messages)
        except Exception as exc:  # the template's own raise_exception, or a message it cannot render
            raise RequestError(f"the chat template refused the messages: {exc}", "messages") from None

    async def generate(self, params: Params) -> list[Generation]:
        """``params.n`` samples of the prompt, batched with whatever else arrives in the window."""
        loop = asyncio.get_running_loop()
        stream = self.stream if params.seed is None else UniformStream(params.seed)
        futures = []
        for _ in range(params.n):
            future: asyncio.Future[Generation] = loop.create_future()
            self._pending.append(
                (SampleRequest(params.prompt_ids, params.max_tokens, future, stream), params, self.requests)
            )
            futures.append(future)
        self.requests += 1
        if self._flush is None or self._flush.done():
            self._flush = asyncio.ensure_future(self._run_batches())
        return [apply_stop(await future, params.stop, self.policy.tokenizer) for future in futures]

    async def _run_batches(self) -> None:
        await asyncio.sleep(WINDOW_SECONDS)
        while self._pending:
            pending, self._pending = self._pending, []
            groups: dict[tuple[Sampling, bool, int], list[SampleRequest]] = defaultdict(list)
            for request, params, number in pending:
                alone = -1 if self.batched else number
                groups[(Sampling(params.temperature, params.top_p, params.top_k), params.greedy, alone)].append(request)
            async with self._model_lock:
                for (sampling, greedy, _), requests in groups.items():
                    # the engine's greedy path (is_validation): argmax, log-probs of the untempered distribution
                    self.engine.sampling, self.engine.is_validation = sampling, greedy
                    self.generate_calls += 1
                    try:
                        generations = await asyncio.to_thread(self.engine.sample, requests)
                    except Exception as exc:  # answered as a 500 per request, the server carries on
                        for request in requests:
                            request.future.set_exception(exc)
                        continue
                    for request, generation in zip(requests, generations, strict=True):
                        request.future.set_result(generation)

    async def update_weights(self, body: dict[str, Any]) -> dict[str, Any]:
        """SGLang's ``/update_weights_from_disk``: load ``model_path`` (a save_pretrained or checkpoint directory)."""
        path = body.get("model_path")
        if not isinstance(path, str) or not path:
            raise RequestError("model_path must name a directory save_pretrained or rllm train wrote.", "model_path")
        directory = Path(path).expanduser()
        if (directory / MODEL_DIR).is_dir():
            directory = directory / MODEL_DIR  # an rllm train checkpoint: its model part
        if not directory.is_dir():
            raise RequestError(f"model_path {path!r}: no such directory.", "model_path")
        load = functools.partial(self._from_disk, directory, path)
        return await self._swap(load, body.get("weight_version"), f"loaded {path}", "model_path")

    async def update_weights_in_memory(self, data: bytes, version: str | None) -> dict[str, Any]:
        """``/update_weights_from_safetensors``: the state dict in the body, as ``safetensors.torch.save`` wrote it."""
        return await self._swap(functools.partial(self._from_bytes, data), version, f"loaded {len(data)} bytes", "body")

    async def _swap(self, load: Any, version: Any, message: str, field: str) -> dict[str, Any]:
        """Load new weights between batches (no request samples from half-loaded ones) and set the version; weights
        that do not fit the served model are refused whole (:func:`load_checked`), the served ones kept."""
        if version is not None:
            try:
                version = int(version)
            except (TypeError, ValueError):
                raise RequestError(f"weight_version must be an integer, got {version!r}.", "weight_version") from None
        async with self._model_lock:
            state = await asyncio.to_thread(load)
            await asyncio.to_thread(load_checked, self.policy.model, state, lambda problem: _refused(field, problem))
            self.weight_version = self.weight_version + 1 if version is None else version
        return {"success": True, "message": message, "weight_version": self.weight_version}

    def _from_disk(self, directory: Path, path: str) -> dict[str, torch.Tensor]:
        from transformers import AutoModelForCausalLM

        if (directory / ADAPTER_CONFIG).is_file():
            raise RequestError(
                f"model_path {path!r} holds a LoRA adapter (a LoRA run's checkpoint), not whole weights; a server "
                "takes merged weights, which the run's weight sync sends (docs/transformers.md, LoRA).",
                "model_path",
            )
        try:  # safetensors, or a pickle torch refuses to unpickle (weights_only): a 400 either way
            return AutoModelForCausalLM.from_pretrained(str(directory)).state_dict()  # type: ignore[no-any-return]
        except Exception as exc:  # whatever the directory holds, it is the request's directory that is unusable
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise RequestError(
                f"model_path {path!r}: no model could be loaded there ({first}).", "model_path"
            ) from None

    @staticmethod
    def _from_bytes(data: bytes) -> dict[str, torch.Tensor]:
        from safetensors import SafetensorError
        from safetensors.torch import load

        try:
            return load(data)  # type: ignore[no-any-return]
        except (SafetensorError, ValueError) as exc:
            raise RequestError(f"the body is not a safetensors state dict ({exc}).", "body") from None

    def tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``/tokenize``: the prompt's ids (``add_special_tokens`` as vLLM, default true) and the context."""
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise RequestError("prompt must be a string.", "prompt")
        special = body.get("add_special_tokens", True)
        ids = list(self.policy.tokenizer.encode(prompt, add_special_tokens=bool(special)))
        return {"count": len(ids), "max_model_len": self.context_limit, "tokens": ids}

    def detokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``/detokenize``: the text of ``tokens`` (special tokens kept)."""
        tokens = body.get("tokens")
        vocab = len(self.policy.tokenizer)
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise RequestError("tokens must be a list of token ids.", "tokens")
        bad = [t for t in tokens if not 0 <= t < vocab]
        if bad:
            raise RequestError(f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1}).", "tokens")
        return {"prompt": self.policy.tokenizer.decode(tokens, skip_special_tokens=False)}

    def answer_body(self, params: Params, generations: list[Generation], chat: bool) -> dict[str, Any]:
        return openai_api.answer_body(
            chat,
            self.model_name,
            params.prompt_ids,
            _choices(generations),
            self._decode,
            params.logprobs,
            params.return_token_ids,
            self.weight_version,
        )

    def _decode(self, ids: list[int]) -> str:
        return str(self.policy.tokenizer.decode(ids))


def _refused(field: str, problem: str) -> RequestError:
    return RequestError(
        f"the new weights do not fit the served model: {problem}; the served weights stay as they were.", field
    )


def _choices(generations: list[Generation]) -> list[Choice]:
    return [Choice(g.text, g.response_ids, g.logprobs, g.finish_reason) for g in generations]


def apply_stop(generation: Generation, stop: list[str], tokenizer: Any) -> Generation:
    """Cut at the first stop string: the text before it, the tokens up to the one completing it."""
    if not stop:
        return generation
    ids = generation.response_ids
    for length in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:length], skip_special_tokens=True)
        hits = [text.find(s) for s in stop if s in text]
        if hits:
            cut = min(hits)
            logprobs = generation.logprobs[:length]
            return Generation(ids[:length], logprobs, text[:cut], "stop", generation.prompt_ids)
    return generation


def build_app(server: Server) -> FastAPI:
    """The FastAPI app: the routes and their OpenAI-shaped errors."""
    app = FastAPI(title="rllm serve")

    async def read(request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(f"the request body is not valid JSON ({exc}).") from None
        except RecursionError:  # the standard parser recurses once per level: a 400, not the server's 500
            raise RequestError("the request body is nested too deeply to be read; send a flat JSON object.") from None
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object.")
        return body

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> JSONResponse:  # OpenAI's error shape, not plain text
        first = (str(exc).strip().splitlines() or [""])[0]
        error = RequestError(f"rllm serve failed on this request ({type(exc).__name__}: {first}).", None, 500)
        return JSONResponse(error.body(), status_code=500)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "weight_version": server.weight_version,
            "start_id": server.start_id,
            "requests": server.requests,
            "generate_calls": server.generate_calls,
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": server.model_name, "object": "model", "created": 0, "owned_by": "rllm"}
        return {"object": "list", "data": [{**card, "max_model_len": server.context_limit}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> dict[str, Any]:
        body = await read(request)
        server.check_model(body)
        params = openai_api.parse(body, server.completion_prompt(body), False, server.context_limit)
        return server.answer_body(params, await server.generate(params), chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        body = await read(request)
        server.check_model(body)
        params = openai_api.parse(body, server.chat_prompt(body), True, server.context_limit)
        return server.answer_body(params, await server.generate(params), chat=True)

    @app.post("/update_weights_from_disk")
    async def update_weights(request: Request) -> dict[str, Any]:
        return await server.update_weights(await read(request))

    @app.post("/update_weights_from_safetensors")
    async def update_weights_in_memory(request: Request) -> dict[str, Any]:
        return await server.update_weights_in_memory(await request.body(), request.query_params.get("weight_version"))

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        body = await read(request)
        server.check_model(body)
        return server.tokenize(body)

    @app.post("/detokenize")
    async def detokenize(request: Request) -> dict[str, Any]:
        body = await read(request)
        server.check_model(body)
        return server.detokenize(body)

    return app


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the model loads: a port in use is one line, not uvicorn's traceback."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only then (else ~40 ms per answer)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be listened on ({exc.strerror})"
        raise ConfigError(
            f"--host {host} --port {port}: the address {reason}; stop what listens there or give another --port."
        ) from None
    sock.listen(2048)
    return sock


def serve(config: DictConfig, host: str, port: int, model_name: str | None = None, reproducible: bool = False) -> int:
    """Load the model ``rllm.transformers`` names and answer HTTP requests until interrupted; ``reproducible``
    samples each request alone."""
    import uvicorn

    lora_settings(config)  # the lora keys checked as training checks them; servers hold merged weights
    sock = listen(host, port)
    options = config.rllm.transformers
    policy = load_policy(options)
    use_threads(options, policy.model, policy.device)
    name = model_name or str(options.model)
    server = Server(policy, name, int(options.seed), batched=not reproducible)
    sampling = "each request sampled alone (reproducible)" if reproducible else "concurrent requests batched"
    context = server.context_limit
    print(f"rllm serve: {name} on http://{host}:{port}/v1 (context {context} tokens); {sampling}", flush=True)
    uvicorn.Server(uvicorn.Config(build_app(server), log_level="warning")).run(sockets=[sock])
    return 0
