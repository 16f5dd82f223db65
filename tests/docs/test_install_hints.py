"""Every ``rllm[extra]`` the project names (docs, error messages, skip reasons) is an extra pyproject.toml declares."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HINT = re.compile(r"rllm\[([A-Za-z0-9_,\- ]+)\]")
SOURCES = ("README.md", "docs", "core", "plugins", "tests", "bench", ".ci")


def _extras() -> set[str]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return set(project["optional-dependencies"])


def _files() -> list[Path]:
    found: list[Path] = []
    for name in SOURCES:
        path = ROOT / name
        if path.is_file():
            found.append(path)
        else:
            found += [p for p in path.rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".rst", ".toml", ""}]
    return [p for p in found if "__pycache__" not in p.parts and p != Path(__file__).resolve()]


def test_every_extra_named_exists() -> None:
    extras = _extras()
    unknown = []
    for path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in HINT.finditer(line):
                for extra in (e.strip() for e in match.group(1).split(",")):
                    if extra not in extras:
                        unknown.append(f"{path.relative_to(ROOT)}:{number}: rllm[{extra}]")
    assert not unknown, f"extras pyproject.toml does not declare ({', '.join(sorted(extras))}): {unknown}"


def test_the_check_notices_an_unknown_extra() -> None:
    assert [m.group(1) for m in HINT.finditer("pip install 'rllm[torch]' or rllm[serve,test]")] == [
        "torch",
        "serve,test",
    ]
    assert "torch" not in _extras() and "serve" in _extras()
