"""rLLM's tables from a name in a config (``agent_cls="math_agent"``, a workflow's name) to a class, at rLLM's path.

Each table holds the classes registered in it (``AGENT_CLASS_MAPPING["mine"] = MyAgent``) and
knows rLLM's own names, imported when first looked up. rllm does not ship rLLM's agents and
environments, so looking one of those up is a one-line :class:`~rllm.errors.ClassNotRegisteredError`
saying to pass the class itself or register one; the error is a ``KeyError`` too, so ``in``
and ``.get`` behave as on a dict. Iterating lists only the names that resolve, as rLLM's
filtered tables do.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator, MutableMapping

from rllm.errors import ClassNotRegisteredError, DataError

__all__ = [
    "AGENT_CLASSES",
    "AGENT_CLASS_MAPPING",
    "ENV_CLASSES",
    "ENV_CLASS_MAPPING",
    "WORKFLOW_CLASSES",
    "WORKFLOW_CLASS_MAPPING",
    "ClassMapping",
]


class ClassMapping(MutableMapping[str, type]):
    """Names to classes: the ones registered here, then rLLM's names (``module:Class``), imported on first use."""

    def __init__(self, variable: str, base: str, rllm_names: dict[str, str]) -> None:
        self.variable = variable
        self.base = base
        self._rllm_names = dict(rllm_names)
        self._classes: dict[str, type] = {}

    def _where(self, name: str) -> str:
        return f"rllm.trainer.env_agent_mappings.{self.variable}[{name!r}]"

    def __getitem__(self, name: str) -> type:
        if name in self._classes:
            return self._classes[name]
        target = self._rllm_names.get(name)
        if target is None:
            known = ", ".join(sorted({*self._classes, *self._rllm_names}))
            raise ClassNotRegisteredError(
                f"{self._where(name)} names no class (names: {known}); pass the class itself, or register it first: "
                f"{self._where(name)} = YourClass (a subclass of {self.base})."
            )
        module, _, attr = target.partition(":")
        try:
            found = getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError as missing:
            if missing.name is None or not module.startswith(missing.name):
                raise  # the module exists but needs a package that is not installed: its own error says which
            raise ClassNotRegisteredError(
                f"{self._where(name)} is rLLM's {attr} ({module}), which rllm does not ship: pass your own class "
                f"(a subclass of {self.base}) instead, or register one: {self._where(name)} = YourClass."
            ) from None
        self._classes[name] = found
        return found

    def __setitem__(self, name: str, cls: type) -> None:
        if not isinstance(name, str) or not isinstance(cls, type):
            raise DataError(f"{self._where(name)} = {cls!r}: register a class under a string name.")
        self._classes[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._classes[name]

    def _resolves(self, name: str) -> bool:
        module = self._rllm_names[name].partition(":")[0]
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # its parent package is missing too
            return False

    def __iter__(self) -> Iterator[str]:
        yield from self._classes
        yield from (name for name in self._rllm_names if name not in self._classes and self._resolves(name))

    def __len__(self) -> int:
        return sum(1 for _ in self)


ENV_CLASS_MAPPING = ClassMapping(
    "ENV_CLASS_MAPPING",
    "rllm.environments.base.base_env.BaseEnv",
    {
        "browsergym": "rllm.environments.browsergym.browsergym:BrowserGymEnv",
        "frozenlake": "rllm.environments.frozenlake.frozenlake:FrozenLakeEnv",
        "tool": "rllm.environments.tools.tool_env:ToolEnvironment",
        "math": "rllm.environments.base.single_turn_env:SingleTurnEnvironment",
        "code": "rllm.environments.base.single_turn_env:SingleTurnEnvironment",
        "swe": "rllm.environments.swe.swe:SWEEnv",
        "competition_coding": "rllm.environments.code.competition_coding:CompetitionCodingEnv",
        "single_turn_env": "rllm.environments.base.single_turn_env:SingleTurnEnvironment",
    },
)
AGENT_CLASS_MAPPING = ClassMapping(
    "AGENT_CLASS_MAPPING",
    "rllm.agents.agent.BaseAgent",
    {
        "miniwobagent": "rllm.agents.miniwob_agent:MiniWobAgent",
        "frozenlakeagent": "rllm.agents.frozenlake_agent:FrozenLakeAgent",
        "tool_agent": "rllm.agents.tool_agent:ToolAgent",
        "sweagent": "rllm.agents.swe_agent:SWEAgent",
        "math_agent": "rllm.agents.math_agent:MathAgent",
        "code_agent": "rllm.agents.code_agent:CompetitionCodingAgent",
    },
)
WORKFLOW_CLASS_MAPPING = ClassMapping(
    "WORKFLOW_CLASS_MAPPING",
    "rllm.workflows.workflow.Workflow",
    {
        "single_turn_workflow": "rllm.workflows.single_turn_workflow:SingleTurnWorkflow",
        "multi_turn_workflow": "rllm.workflows.multi_turn_workflow:MultiTurnWorkflow",
        "simple_workflow": "rllm.workflows.simple_workflow:SimpleWorkflow",
        "cumulative_workflow": "rllm.workflows.cumulative_workflow:CumulativeWorkflow",
    },
)
ENV_CLASSES, AGENT_CLASSES, WORKFLOW_CLASSES = ENV_CLASS_MAPPING, AGENT_CLASS_MAPPING, WORKFLOW_CLASS_MAPPING
"""rLLM's names of the same tables (before it filtered out the classes that do not import)."""
