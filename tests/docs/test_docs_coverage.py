"""The docs name every hook, hook argument, registrar keyword, CLI command and config key.

``undocumented(text)`` lists what a documentation text leaves out; the tests run it on
docs/*.md, and on copies with one entry removed, to show it notices.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

from rllm.cli.main import COMMANDS
from rllm.config.schema import CORE_KEYS
from rllm.plugins import hookspecs

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
HOOKS = [fn for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(fn, "rllm_spec")]
REGISTRARS = [hookspecs.EstimatorRegistrar, hookspecs.NamedRegistrar, hookspecs.ConfigSectionRegistrar]


def _keywords() -> list[str]:
    names = [
        p.name
        for registrar in REGISTRARS
        for p in inspect.signature(registrar.__call__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    return sorted(set(names))


def undocumented(text: str) -> list[str]:
    """Every documented-API entry that ``text`` does not name, as ``kind name``."""
    missing = []
    for hook in HOOKS:
        if f"`{hook.__name__}(" not in text:
            missing.append(f"hook {hook.__name__}")
        missing += [
            f"hook argument {hook.__name__}({a})" for a in inspect.signature(hook).parameters if f"`{a}`" not in text
        ]
    missing += [f"registrar keyword {k}=" for k in _keywords() if not re.search(rf"\b{k}=", text)]
    missing += [f"command rllm {c}" for c in COMMANDS if f"rllm {c}" not in text]
    missing += [f"config key {k.path}" for k in CORE_KEYS if f"`{k.path}`" not in text]
    return missing


def _docs() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in DOCS)


def test_the_docs_name_every_hook_argument_keyword_command_and_config_key() -> None:
    assert len(HOOKS) >= 6 and {"options", "numerics", "requires", "replace", "style"} <= set(_keywords())
    assert undocumented(_docs()) == []


def test_the_config_key_page_is_current() -> None:
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "docs" / "tools" / "config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "config-keys.md").read_text(encoding="utf-8") == module.render(), (
        "docs/config-keys.md is out of date: run python docs/tools/config_reference.py"
    )


@pytest.mark.parametrize(
    ("removed", "reported"),
    [
        ("`rllm_register_batch_fields(", "hook rllm_register_batch_fields"),
        ("numerics=", "registrar keyword numerics="),
        ("`register`", "hook argument rllm_register_estimators(register)"),
        ("rllm config", "command rllm config"),
        ("`rllm.trainer.total_batches`", "config key rllm.trainer.total_batches"),
    ],
)
def test_removing_one_entry_is_reported(removed: str, reported: str) -> None:
    text = _docs()
    assert removed in text
    assert reported in undocumented(text.replace(removed, "(removed)"))
