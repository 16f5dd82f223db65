"""Every fenced code block in README.md and docs/*.md runs as written, or says it is an illustration.

Rules, so that documentation cannot rot:

- Every fence has a language: ``python``; ``bash`` (``sh``, ``shell``, ``console``); or one
  that is not run (``yaml``, ``toml``, ``json``, ``text``, ...).
- A python or shell block runs unless the line before its fence is
  ``<!-- illustration -->`` or ``<!-- illustration: why -->`` (it needs files or services
  the reader provides, changes the reader's shell, or takes minutes).
- Python blocks of one document run in order in one fresh interpreter, sharing their
  names, like a notebook. A block in doctest form (``>>>`` lines) has its shown output
  checked (``...`` matches anything).
- Shell blocks of one document run in order with ``bash -e`` in one scratch folder, with
  the test environment's ``bin`` first on ``PATH`` (as after activating it). In a block
  whose lines start with ``$ ``, each command's output (stdout and stderr) must equal the
  lines shown under it (a line ``...`` matches any lines); otherwise every line must succeed.
- The scratch folder holds ``rollouts.jsonl`` (the bundled sample rollouts), the input
  file the examples name, and ``runs/rllm/default``, the run of the README's first command
  (``rllm train``): every example must run after it, as in a reader's folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest
from extras import missing

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON = {"python", "py", "pycon"}
SHELL = {"bash", "sh", "shell", "console"}
MARKER = re.compile(r"^<!--\s*illustration\b.*-->\s*$")
NEEDS = re.compile(r"^<!--\s*needs:\s*([\w, ]+?)\s*-->\s*$")
"""``<!-- needs: torch, transformers -->`` before a fence: the block runs where those are installed (CI)."""
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
HOW_TO_FIX = (
    "make it run as written, or put '<!-- illustration: why -->' on the line before its fence "
    "(see tests/docs/test_code_blocks.py)"
)


@dataclass(frozen=True)
class Block:
    document: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    illustration: bool
    needs: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks(document: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with their language and marker."""
    lines = document.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        indent, fence, language = match.groups()
        start = index
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index][len(indent) :] if lines[index].startswith(indent) else lines[index])
            index += 1
        previous = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "").strip()
        needs = NEEDS.match(previous)
        modules = tuple(name.strip() for name in needs.group(1).split(",")) if needs else ()
        code = "\n".join(body) + "\n"
        found.append(Block(document, start + 1, language.lower(), code, bool(MARKER.match(previous)), modules))
        index += 1
    return found


ALL_BLOCKS = [block for document in DOCUMENTS for block in blocks(document)]


def _ids(document: Path) -> str:
    return str(document.relative_to(ROOT))


def test_documents_are_found() -> None:
    assert ROOT / "README.md" in DOCUMENTS and len(DOCUMENTS) >= 4
    assert sum(1 for b in ALL_BLOCKS if b.language in PYTHON | SHELL and not b.illustration) >= 10


def test_every_fence_names_its_language() -> None:
    unnamed = [block.where for block in ALL_BLOCKS if not block.language]
    assert not unnamed, (
        f"fenced block(s) without a language at {', '.join(unnamed)}: write ```python, ```bash or ```text "
        "(python and bash blocks are run by tests/docs/test_code_blocks.py)"
    )


# -- python -----------------------------------------------------------------------------------
RUNNER = textwrap.dedent(
    """
    import doctest, json, sys, traceback
    namespace = {"__name__": "__docs__"}
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    for block in json.load(sys.stdin):
        where, code = block["where"], block["code"]
        try:
            if any(line.lstrip().startswith(">>>") for line in code.splitlines()):
                test = doctest.DocTestParser().get_doctest(code, namespace, where, where, 0)
                runner = doctest.DocTestRunner(optionflags=flags)
                output = []
                runner.run(test, out=output.append, clear_globs=False)
                if runner.failures:
                    print(f"{where}: shown output differs:\\n" + "".join(output))
                    sys.exit(1)
            else:
                exec(compile(code, where, "exec"), namespace)
        except SystemExit:
            raise
        except BaseException:
            print(f"{where}: raised:\\n" + traceback.format_exc())
            sys.exit(1)
    """
)


@pytest.fixture(scope="session")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder in which the README's first command, ``rllm train``, ran: it holds ``runs/rllm/default``."""
    folder = tmp_path_factory.mktemp("first-run")
    command = [sys.executable, "-c", "import sys; from rllm.cli.main import main; sys.exit(main())", "train"]
    done = subprocess.run(
        [*command, "--no-progress"], cwd=folder, env=_environment(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def _scratch(tmp_path: Path, first_run: Path) -> Path:
    sample = resources.files("rllm.data").joinpath("sample_rollouts.jsonl").read_text(encoding="utf-8")
    (tmp_path / "rollouts.jsonl").write_text(sample, encoding="utf-8")
    shutil.copytree(first_run / "runs", tmp_path / "runs")
    return tmp_path


def _environment() -> dict[str, str]:
    """As after activating the test environment: its bin folder first on PATH."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(Path(sys.executable).parent.parent)
    env.pop("PYTHONPATH", None)
    return env


def _runnable(document: Path, languages: set[str]) -> tuple[list[Block], list[Block]]:
    """The document's blocks in ``languages`` that run here, and those whose ``needs`` are not installed."""
    candidates = [b for b in blocks(document) if b.language in languages and not b.illustration]
    return [b for b in candidates if not missing(*b.needs)], [b for b in candidates if missing(*b.needs)]


def _skip_unmet(unmet: list[Block]) -> None:
    """Say which blocks did not run (after the others passed): a skipped block is not a passing one."""
    if unmet:
        where = ", ".join(block.where for block in unmet)
        absent = sorted({name for block in unmet for name in missing(*block.needs)})
        pytest.skip(f"{where} need {', '.join(absent)}, not installed here")


@pytest.mark.parametrize("document", DOCUMENTS, ids=_ids)
def test_python_blocks_run(document: Path, tmp_path: Path, first_run: Path) -> None:
    runnable, unmet = _runnable(document, PYTHON)
    if not runnable:
        _skip_unmet(unmet)
        return
    payload = json.dumps([{"where": b.where, "code": b.code} for b in runnable])
    result = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=payload,
        capture_output=True,
        text=True,
        cwd=_scratch(tmp_path, first_run),
        env=_environment(),
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"{result.stdout}{result.stderr[-3000:]}\nTo fix: {HOW_TO_FIX}."
    _skip_unmet(unmet)


# -- shell ------------------------------------------------------------------------------------
def _console_steps(code: str) -> list[tuple[str, list[str]]]:
    """``$ command`` lines and the output lines shown under each."""
    steps: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


def _matches(expected: list[str], actual: list[str]) -> bool:
    """Line-by-line equality, where an expected ``...`` line matches any number of lines."""
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(_matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and actual[0].rstrip() == expected[0].rstrip() and _matches(expected[1:], actual[1:])


def _run_shell(block: Block, cwd: Path) -> str | None:
    """None if the block behaves as shown, else what went wrong."""
    env = _environment()
    if any(line.startswith("$ ") for line in block.code.splitlines()):
        for command, expected in _console_steps(block.code):
            result = subprocess.run(
                ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
            )
            actual = (result.stdout + result.stderr).splitlines()
            if not _matches([line for line in expected if line.strip() or expected], actual):
                shown = "\n".join(expected)
                return f"`{command}` printed:\n{result.stdout}{result.stderr}\nbut the document shows:\n{shown}"
        return None
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        return f"exit code {result.returncode}:\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
    return None


@pytest.mark.slow  # README.md's train block trains two runs
@pytest.mark.parametrize("document", DOCUMENTS, ids=_ids)
def test_shell_blocks_run(document: Path, tmp_path: Path, first_run: Path) -> None:
    cwd = _scratch(tmp_path, first_run)
    runnable, unmet = _runnable(document, SHELL)
    for block in runnable:
        problem = _run_shell(block, cwd)
        assert problem is None, f"{block.where}: the shell block {problem}\nTo fix: {HOW_TO_FIX}."
    _skip_unmet(unmet)


# -- the rules themselves ---------------------------------------------------------------------
def test_the_collector_sees_markers_languages_and_lines(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n```python\nx = 1\n```\n\n<!-- illustration: needs a GPU -->\n```bash\nnvidia-smi\n```\n\n"
        "```\nplain\n```\n"
    )
    found = blocks(page)
    assert [(b.line, b.language, b.illustration) for b in found] == [
        (3, "python", False),
        (8, "bash", True),
        (12, "", False),
    ]
    assert found[0].code == "x = 1\n"


def test_console_output_matching() -> None:
    assert _matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert not _matches(["a", "z"], ["a", "b", "z"])
    assert _console_steps("$ echo hi\nhi\n$ true\n") == [("echo hi", ["hi"]), ("true", [])]
