"""rLLM's ``AgentFlow`` and ``Evaluator`` live above the data model, and ``rllm.types`` still exports them.

The data model never imports them, so ``rllm.types`` and ``rllm.eval`` form no import loop: a
fresh interpreter importing ``rllm.types`` loads neither ``rllm.eval`` nor ``rllm.agents``, and
no module of ``rllm.types`` names either package in an import statement (typing-only ones included).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TYPES = Path(__file__).resolve().parents[2] / "core" / "rllm" / "types"


def test_rllm_types_exports_the_protocols_from_their_homes() -> None:
    import rllm.types
    from rllm.agents.flow import AgentFlow
    from rllm.eval import Evaluator as EvalEvaluator
    from rllm.eval.types import Evaluator
    from rllm.types import AgentFlow as TypesAgentFlow
    from rllm.types import Evaluator as TypesEvaluator

    assert TypesAgentFlow is AgentFlow and TypesEvaluator is Evaluator and EvalEvaluator is Evaluator
    assert {"AgentFlow", "Evaluator"} <= set(rllm.types.__all__)


def test_the_protocols_still_recognise_a_flow_and_an_evaluator() -> None:
    from rllm.types import AgentFlow, Evaluator

    class Flow:
        def run(self, task: object, config: object) -> None:
            return None

    class Scorer:
        def evaluate(self, task: object, episode: object) -> None:
            return None

    assert isinstance(Flow(), AgentFlow) and not isinstance(Flow(), Evaluator)
    assert isinstance(Scorer(), Evaluator) and not isinstance(Scorer(), AgentFlow)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    import rllm.types

    try:
        rllm.types.NoSuchRecord  # noqa: B018
    except AttributeError as error:
        assert "NoSuchRecord" in str(error)
    else:
        raise AssertionError("rllm.types.NoSuchRecord resolved")


def test_importing_the_data_model_loads_neither_eval_nor_agents() -> None:
    code = "import sys, rllm.types; print(sorted(m for m in sys.modules if m.startswith(('rllm.eval', 'rllm.agents'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_no_module_of_the_data_model_imports_eval_or_agents() -> None:
    for path in sorted(TYPES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            above = [n for n in names if n.startswith(("rllm.eval", "rllm.agents"))]
            assert not above, f"{path.name} imports {above}"
