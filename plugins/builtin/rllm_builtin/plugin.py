"""Hook implementations of the built-in plugin."""

from __future__ import annotations

from rllm.plugins.hookspecs import EstimatorRegistrar, NamedRegistrar, hookimpl
from rllm_builtin import estimators


@hookimpl
def rllm_register_estimators(register: EstimatorRegistrar) -> None:
    register("grpo", estimators.grpo, style="batch")
    register("rloo", estimators.rloo, style="batch")
    register("reinforce", estimators.reinforce, style="batch")
    register("reinforce_plus_plus_baseline", estimators.reinforce_plus_plus_baseline, style="batch")


@hookimpl
def rllm_register_grouping_hooks(register: NamedRegistrar) -> None:
    from rllm.trainer.grouping import group_by_task_and_role

    register("task_and_role", group_by_task_and_role)


@hookimpl
def rllm_register_backends(register: NamedRegistrar) -> None:
    from rllm_builtin.embedded.backend import EmbeddedBackend

    register("embedded", EmbeddedBackend)
