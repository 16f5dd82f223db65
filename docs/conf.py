"""Sphinx configuration of the docs site: the Markdown guides (MyST) and an API reference from docstrings.

Build strictly (a broken reference, link or docstring fails):
``sphinx-build -E -W --keep-going -n -b html docs /tmp/rllm-docs``.
"""

from __future__ import annotations

import functools
import importlib.util

import rllm

project = "rllm"
release = rllm.__version__
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "tools"]
myst_heading_anchors = 3
# Directives in Markdown use ::: fences, so tests/docs/test_code_blocks.py never mistakes them for code.
myst_enable_extensions = ["colon_fence"]
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": True}
html_theme = "alabaster"
# The site builds from `pip install -e '.[docs]'` alone: libraries that only some pages' modules import (the TRL
# bridge's, the kit's pytest fixtures) are mocked where they are not installed, and left real where they are.
autodoc_mock_imports = [
    name for name in ("pytest", "torch", "accelerate", "trl", "transformers") if importlib.util.find_spec(name) is None
]
if "trl" in autodoc_mock_imports:  # the bridge checks TRL's version on import; documented, a tested one stands in
    import rllm_trl.version

    _check_trl_version = rllm_trl.version.check_trl_version
    rllm_trl.version.check_trl_version = functools.wraps(_check_trl_version)(
        lambda installed=None: _check_trl_version(installed or f"{rllm_trl.version.TESTED[0]}.0")
    )
# No network in CI, so no intersphinx: names from numpy, omegaconf, pluggy and the standard library stay unlinked.
nitpick_ignore_regex = [
    (
        "py:.*",
        r"(numpy|np|omegaconf|pluggy|collections\.abc|typing|pathlib|argparse|asyncio|concurrent|subprocess|os)(\..*)?",
    ),
    ("py:.*", r"(Any|Callable|Sequence|Mapping|Iterable|Iterator|NDArray|ArrayLike|DictConfig|Path|Literal|TypeVar)"),
    (
        "py:.*",
        r"(array|dataclasses\.InitVar|rllm\.estimators\.state\.F|rllm\.plugins\.registry\.E|EstimatorName|LossFn)",
    ),  # numpy's array; type variables; the aliases EstimatorName and LossFn
    ("py:.*", r"(int|float|str|bool|None|dict|list|tuple|type|object|bytes)"),
    ("py:.*", r"(torch|trl|transformers|accelerate)(\..*)?|GRPOConfig|GRPOTrainer"),  # the TRL bridge's libraries
]


def _resolve_short_names(app, env, node, contnode):  # type: ignore[no-untyped-def]
    """Resolve ``rllm.Name`` (a public alias) and short names (``Ragged``) to the one documented object.

    Docstrings name objects as readers import them; Sphinx looks only in the current module. A name
    documented nowhere, or ambiguous, stays unresolved, so the strict build still fails on it.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    domain = env.get_domain("py")
    if target.startswith("rllm.") and target.count(".") == 1:
        module = rllm._EXPORTS.get(target.split(".", 1)[1])
        if module is not None:
            target = f"{module}.{target.split('.', 1)[1]}"
    matches = [name for name in domain.objects if name == target or name.endswith("." + target)]
    if not matches and target.startswith("rllm."):  # a re-export (rllm.types.AgentFlow): where it is defined
        defined = _definition(target)
        matches = [defined] if defined in domain.objects else []
    if len(matches) > 1:  # the same object re-exported (rllm.toolkit.Ragged): keep where it is defined
        matches = [name for name in matches if _defined_at(name)]
    if len(matches) != 1:
        return None
    return (
        domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], matches[0], node, contnode)
        or (domain.resolve_any_xref(env, node["refdoc"], app.builder, matches[0], node, contnode) or [(None, None)])[0][
            1
        ]
    )


def _definition(path: str) -> str | None:
    """The dotted path where the object ``path`` names is defined (``rllm.types.AgentFlow``: ``rllm.agents.flow``'s)."""
    import importlib

    module, _, name = path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None
    defined_in, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{defined_in}.{qualname}" if defined_in and qualname else None


def _defined_at(path: str) -> bool:
    """Whether ``path`` is where its object is defined, not a re-export."""
    import importlib

    module, _, name = path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False
    return getattr(obj, "__module__", None) == module


def setup(app):  # type: ignore[no-untyped-def]
    app.connect("missing-reference", _resolve_short_names)
