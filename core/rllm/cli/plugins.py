"""``rllm plugins``: what is installed, who provides which name, and what failed."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rllm.plugins.manager import get_plugin_manager


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("plugins", help="list plugins, their estimators, grouping hooks and backends")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    infos = get_plugin_manager().plugin_infos()
    if args.json:
        print(json.dumps([info.as_dict() for info in infos], indent=2))
        return 0
    for info in infos:
        dist = f"{info.distribution} {info.version}" if info.distribution else "-"
        print(f"{info.name}  [{info.status}]  {dist}  ({info.module})")
        for label, names in (
            ("estimators", info.estimators),
            ("grouping hooks", info.grouping_hooks),
            ("backends", info.backends),
            ("hooks", info.hooks),
        ):
            if names:
                print(f"    {label}: {', '.join(names)}")
        if info.error:
            print(f"    {info.status}: {info.error}")
    return 0
