"""A package's public names, written once: the imports under its ``if TYPE_CHECKING:``.

Type checkers and readers see those imports; at run time they never execute, and
:func:`lazy_exports` reads them from the package's source instead, so ``__getattr__`` can
import each name on first use and ``__all__`` lists them (the idea of scientific Python's
``lazy_loader.attach_stub``). ``import rllm`` therefore imports nothing it exports.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from importlib import import_module
from pathlib import Path
from typing import Any


def _type_checking_imports(source: str) -> dict[str, str]:
    """Each name imported under the module's top-level ``if TYPE_CHECKING:``, with its module."""
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    found.update({alias.asname or alias.name: statement.module for alias in statement.names})
    return found


def lazy_exports(
    namespace: Mapping[str, Any], submodules: tuple[str, ...] = ()
) -> tuple[dict[str, str], Callable[[str], Any]]:
    """The package's exports (name -> module) and the ``__getattr__`` that imports them, and ``submodules``, on use.

    ``namespace`` is the package's ``globals()``; an imported name is cached there.
    """
    package = namespace["__name__"]
    exports = _type_checking_imports(Path(namespace["__file__"]).read_text(encoding="utf-8"))

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(import_module(exports[name]), name)
        elif name in submodules:
            value = import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value  # type: ignore[index]
        return value

    return exports, __getattr__
