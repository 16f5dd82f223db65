"""Every hook, and every argument of every hook, is documented for plugin authors."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

import pytest

from rllm.plugins import hookspecs

HOOKS = [
    fn
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
    if name.startswith("rllm_") and hasattr(fn, "rllm_spec")
]
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def test_there_are_hooks() -> None:
    assert {fn.__name__ for fn in HOOKS} >= {
        "rllm_register_estimators",
        "rllm_register_grouping_hooks",
        "rllm_register_backends",
    }


@pytest.mark.parametrize("hook", HOOKS, ids=lambda fn: fn.__name__)
def test_hook_docstring_documents_each_argument_and_has_an_example(hook: object) -> None:
    doc = inspect.getdoc(hook) or ""
    signature = inspect.signature(hook)  # type: ignore[arg-type]
    for name, parameter in signature.parameters.items():
        assert f":param {name}:" in doc, f"{hook.__name__} does not document {name}"  # type: ignore[attr-defined]
        assert parameter.annotation is not inspect.Parameter.empty
    assert "Example::" in doc and "@rllm.hookimpl" in doc


def guide_section(hook_name: str) -> str:
    """The text of the plugin guide's ``### `hook(...)` `` section, up to the next heading."""
    guide = GUIDE.read_text(encoding="utf-8")
    match = re.search(rf"^### `{hook_name}\(.*?(?=^##)", guide, flags=re.MULTILINE | re.DOTALL)
    assert match, f"docs/plugins.md has no section for {hook_name}"
    return match.group(0)


@pytest.mark.parametrize("hook", HOOKS, ids=lambda fn: fn.__name__)
def test_plugin_guide_covers_each_hook_and_argument(hook: object) -> None:
    section = guide_section(hook.__name__)  # type: ignore[attr-defined]
    for name in inspect.signature(hook).parameters:  # type: ignore[arg-type]
        assert f"`{name}`" in section or f"({name})" in section
    registrar = typing.get_type_hints(hook)["register"]
    keywords = [
        p.name
        for p in inspect.signature(registrar.__call__).parameters.values()
        if p.default is not inspect.Parameter.empty
    ]
    for keyword in keywords:
        assert f"`{keyword}`" in section or f"{keyword}=" in section, (
            f"docs/plugins.md does not document register(..., {keyword}=...)"
        )


def test_every_keyword_of_the_estimator_registrar_is_documented() -> None:
    doc = inspect.getdoc(hookspecs.rllm_register_estimators) or ""
    keywords = inspect.signature(hookspecs.EstimatorRegistrar.__call__).parameters
    for name in keywords:
        if name != "self":
            assert f"``{name}``" in doc, f"register(..., {name}=...) is not documented"
