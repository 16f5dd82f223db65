"""``rllm plugins``: what is installed, who provides which name, what failed, and what is slow.

It loads plugins with strict mode off, so ``RLLM_STRICT_PLUGINS=1`` never keeps it from
reporting; under strict mode it says which failures would stop other commands.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rllm.plugins.hook_kinds import HOOK_KINDS
from rllm.plugins.manager import SLOW_PLUGIN_SECONDS, get_plugin_manager, strict_from_env


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "plugins", help="list plugins, their estimators, grouping hooks, backends and kernels, and load times"
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    manager = get_plugin_manager(strict=False)
    infos = manager.plugin_infos()
    if manager.failures and strict_from_env():
        names = ", ".join(info.name for info in infos if info.status == "failed")
        print(f"rllm plugins: RLLM_STRICT_PLUGINS is set, so other commands stop on: {names}", file=sys.stderr)
    if args.json:
        print(json.dumps([info.as_dict() for info in infos], indent=2))
        return 0
    for info in infos:
        dist = f"{info.distribution} {info.version}" if info.distribution else "-"
        took = f"  {info.load_seconds:.2f} s{' (slow)' if info.slow else ''}" if info.status != "blocked" else ""
        print(f"{info.name}  [{info.status}]  {dist}  ({info.module}){took}")
        for kind in HOOK_KINDS:
            names = getattr(info, kind.attribute)
            if names:
                print(f"    {kind.attribute.replace('_', ' ')}: {', '.join(names)}")
        if info.hooks:
            print(f"    hooks: {', '.join(info.hooks)}")
        if info.error:
            print(f"    {info.status}: {info.error}")
    slow = [f"{info.name} ({info.load_seconds:.2f} s)" for info in infos if info.slow]
    if slow:
        print(
            f"slow to load (over {SLOW_PLUGIN_SECONDS} s, paid by every rllm command): {', '.join(slow)}; "
            "disable with RLLM_DISABLED_PLUGINS if unused"
        )
    return 0
