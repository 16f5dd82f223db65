"""``rllm serve``: an OpenAI-compatible HTTP server over the transformers backend's model."""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from rllm.cli.args import add_config_arguments, command_parser, split_words
from rllm.errors import ConfigError

BACKEND = "transformers"
"""The backend whose model is served: its ``rllm.transformers`` keys say which model."""
SERVE_EXTRA = ("torch", "transformers", "safetensors", "fastapi", "uvicorn")
"""What ``pip install 'rllm[serve]'`` installs (pyproject.toml's ``serve`` extra), checked before anything loads."""


def add_parser(sub: Any) -> None:
    parser = command_parser(
        sub,
        "serve",
        "serve the transformers backend's model over an OpenAI-compatible HTTP API",
        "Serve /v1/completions, /v1/chat/completions, /v1/models, /health and SGLang's\n"
        "/update_weights_from_disk for the model the rllm.transformers keys name (tiny, a\n"
        "save_pretrained directory or a hub id). Token ids and log-probs use vLLM's field names\n"
        "(return_token_ids). Needs the serve extra: pip install 'rllm[serve]'.\n"
        "With --tinker, serve the Tinker API (/api/v1/...) instead, for the official tinker SDK:\n"
        "training (full weights), sampling and checkpoints; needs pip install 'rllm[tinker]' (docs/tinker.md).",
        [
            "rllm serve rllm.transformers.model=tiny rllm.transformers.tokenizer=text --port 8000",
            "rllm serve --tinker rllm.transformers.model=tiny rllm.transformers.tokenizer=text --port 8000",
            "rllm serve rllm.transformers.model=runs/rllm/transformers/checkpoints/step_50/model --port 8000",
        ],
    )
    add_config_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    parser.add_argument(
        "--served-model-name", metavar="NAME", help="the model's name in requests (default: rllm.transformers.model)"
    )
    parser.add_argument(
        "--tinker", action="store_true", help="serve the Tinker API for the tinker SDK instead of OpenAI's"
    )
    parser.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="with --tinker: where saved weights go (default: a new temporary directory, printed at start)",
    )
    parser.add_argument(
        "--tinker-snapshots",
        metavar="N",
        type=int,
        help="with --tinker: unnamed sampler snapshots kept (default 3); an asynchronous client of lead L needs L+1",
    )
    parser.add_argument(
        "--reproducible",
        action="store_true",
        help="sample each request alone (slower), so a seeded run repeats bit for bit; batched (the default), "
        "log-probs round differently with what arrives together",
    )
    parser.set_defaults(run=run)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules cannot be imported either
        return False


def run(args: argparse.Namespace) -> int:
    from rllm.trainer.components import resolve_backend

    missing = [name for name in SERVE_EXTRA if not _installed(name)]
    if missing:  # the serve extra by name, not the transformers backend's (which lacks fastapi and uvicorn)
        raise ConfigError(f"rllm serve needs {', '.join(missing)}: pip install 'rllm[serve]'.")
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port} is not a TCP port; give 1-65535.")
    tinker_only = {
        "--checkpoint-dir": bool(args.checkpoint_dir),
        "--tinker-snapshots": args.tinker_snapshots is not None,
    }
    for flag, given in tinker_only.items():
        if given and not args.tinker:
            raise ConfigError(f"{flag} applies to --tinker only; add --tinker or leave it out.")
    if args.tinker_snapshots is not None and args.tinker_snapshots < 1:
        raise ConfigError(f"--tinker-snapshots {args.tinker_snapshots}: keep at least 1 (the newest sampler weights).")
    config = split_words(args).load()
    backend = resolve_backend(BACKEND, config)
    if args.tinker:
        return int(
            backend.serve_tinker(  # type: ignore[attr-defined]
                config,
                args.host,
                args.port,
                args.served_model_name,
                args.checkpoint_dir,
                args.tinker_snapshots,
                args.reproducible,
            )
        )
    return int(backend.serve(config, args.host, args.port, args.served_model_name, args.reproducible))  # type: ignore[attr-defined]
