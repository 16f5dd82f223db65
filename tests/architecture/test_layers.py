"""The house's import rules: layers run one way, and shipped plugins use only rllm's public names.

The layers are declared in pyproject.toml (``[tool.importlinter]``) and explained in
docs/architecture.md. Plugins shipped in this repository must be writable by a third party,
so they may import only names that rllm's public modules list in ``__all__``.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = (  # a name is public if the module's __all__ lists it (or, without __all__, has no leading _)
    "rllm",
    "rllm.toolkit",
    "rllm.config",
    "rllm.engine",
    "rllm.errors",
    "rllm.types",
    "rllm.plugins",
    "rllm.trainer",
    "rllm.rollouts",
    "rllm.workflows",
    "rllm.losses",
    "rllm.tasks",
    "rllm.cli",
)
SHIPPED_PLUGINS = sorted(
    path for path in (ROOT / "plugins").glob("*/*") if path.is_dir() and (path / "__init__.py").exists()
)


CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
LINTER = CONFIG["tool"]["importlinter"]
SHIPPED = {name for name in CONFIG["tool"]["setuptools"]["packages"]["find"]["include"] if "." not in name}


def test_layers_and_forbidden_imports_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(LINTER['contracts'])} kept, 0 broken" in result.stdout


def test_core_is_forbidden_every_plugin_package_the_distribution_ships() -> None:
    plugins = SHIPPED - {"rllm"}
    forbidden = next(c for c in LINTER["contracts"] if c["type"] == "forbidden" and c["source_modules"] == ["rllm"])
    assert plugins and set(forbidden["forbidden_modules"]) == plugins
    assert set(LINTER["root_packages"]) == SHIPPED


def test_every_shipped_plugin_is_independent_of_the_others() -> None:
    """A plugin that imports another shipped one could not be installed, or written by a third party, alone."""
    independence = [c for c in LINTER["contracts"] if c["type"] == "independence"]
    assert [set(c["modules"]) for c in independence] == [SHIPPED - {"rllm"}]


def rllm_imports(package: Path) -> list[tuple[str, int, str, str]]:
    """``(file, line, module, name)`` of every ``from rllm... import name`` in a package."""
    found = []
    for path in sorted(package.rglob("*.py")):
        where = str(path.relative_to(package.parent))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "rllm":
                found += [
                    (str(path.relative_to(package.parent)), node.lineno, node.module, alias.name)
                    for alias in node.names
                ]
            elif isinstance(node, ast.Import):
                found += [
                    (where, node.lineno, alias.name, "") for alias in node.names if alias.name.split(".")[0] == "rllm"
                ]
    return found


@pytest.mark.parametrize("package", SHIPPED_PLUGINS, ids=lambda p: p.name)
def test_shipped_plugins_use_only_public_names(package: Path) -> None:
    imports = rllm_imports(package)
    assert imports, f"{package} imports nothing from rllm: is the scan looking at the right folder?"
    private = []
    for where, line, module, name in imports:
        if module not in PUBLIC_MODULES:
            private.append(f"{where}:{line}: module {module} is not public (use one of {', '.join(PUBLIC_MODULES)})")
            continue
        loaded = importlib.import_module(module)
        exported = getattr(loaded, "__all__", None)
        public = name.startswith("_") is False and (exported is None or name in exported)
        if name and not public:
            private.append(f"{where}:{line}: {module}.{name} is not a public name of {module}")
    assert not private, "\n".join(private)


def test_the_public_names_check_catches_a_private_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from rllm.estimators.batch import GroupLayout\nfrom rllm import _private\n")
    found = rllm_imports(package)
    assert [(module, name) for _, _, module, name in found] == [
        ("rllm.estimators.batch", "GroupLayout"),
        ("rllm", "_private"),
    ]


def _allowed_in_a_shim(node: ast.stmt) -> bool:
    """A docstring, ``from __future__`` or ``__all__``: statements that define nothing."""
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Constant)
    if isinstance(node, ast.ImportFrom):
        return node.module == "__future__"
    return isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]


def only_reexports(path: Path) -> bool:
    """Whether a module's body is imports of rllm names plus statements that define nothing (a shim)."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    imports = [n for n in body if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("rllm.")]
    return bool(imports) and all(n in imports or _allowed_in_a_shim(n) for n in body)


PUBLIC_FACES = {"rllm.toolkit", "rllm.plugins.hookspecs"}  # hookspecs: the plugin author's reference
"""Modules that re-export on purpose as a curated public API, not for an old path."""


def test_every_shim_is_listed_in_the_architecture_guide() -> None:
    guide = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    shims = guide.split("## Shims", 1)[1].split("\n## ", 1)[0]
    core = ROOT / "core"
    found = sorted(
        ".".join(path.relative_to(core).with_suffix("").parts)
        for path in core.rglob("*.py")
        if path.name != "__init__.py" and (only_reexports(path) or "become_plugin_module(__name__" in path.read_text())
    )
    found = [name for name in found if name not in PUBLIC_FACES]
    assert "rllm.trainer.protocol" in found  # the scan sees shims
    missing = [name for name in found if f"| `{name}` |" not in shims]
    assert not missing, f"shims missing from docs/architecture.md: {missing}"
