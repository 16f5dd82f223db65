"""``rllm config``: print the merged configuration, or list every key with its type and meaning."""

from __future__ import annotations

import argparse
from typing import Any

from omegaconf import OmegaConf

from rllm.cli.args import add_config_arguments, command_parser, split_words
from rllm.config import current_schema


def add_parser(sub: Any) -> None:
    parser = command_parser(
        sub,
        "config",
        "print the merged configuration, or list the keys (--keys)",
        "Print the configuration that `rllm train` or `rllm advantages` would use with the same\n"
        "files and overrides, after every check. --keys lists each key with its type, allowed\n"
        "values, default and meaning, including the sections installed plugins declare.",
        [
            "rllm config my_run.yaml rllm.trainer.total_batches=50",
            "rllm config --resolve rllm.trainer.experiment_name=rloo",
            "rllm config --keys",
        ],
    )
    add_config_arguments(parser)
    parser.add_argument("--keys", action="store_true", help="list the keys with types, defaults and docs")
    parser.add_argument("--resolve", action="store_true", help="replace ${...} interpolations by their values")
    parser.set_defaults(run=run)


def _keys_table() -> str:
    schema = current_schema()
    lines = []
    for key in schema.keys:
        default = "null" if key.default is None else key.default
        lines.append(f"{key.path}\n    {key.describe()}; default: {default}\n    {key.doc}")
    lines += [f"{path}.*\n    any keys (declared by a plugin)" for path in sorted(schema.open_sections)]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    words = split_words(args)
    if args.keys:
        print(_keys_table())
        return 0
    config = words.load()
    print(OmegaConf.to_yaml(config, resolve=args.resolve), end="")
    return 0
