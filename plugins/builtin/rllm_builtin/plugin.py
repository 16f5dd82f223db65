"""Hook implementations of the built-in plugin."""

from __future__ import annotations

from rllm.plugins.hookspecs import EstimatorRegistrar, hookimpl
from rllm_builtin import estimators


@hookimpl
def rllm_register_estimators(register: EstimatorRegistrar) -> None:
    register("grpo", estimators.grpo, style="batch")
    register("rloo", estimators.rloo, style="batch")
    register("reinforce", estimators.reinforce, style="batch")
    register("reinforce_plus_plus_baseline", estimators.reinforce_plus_plus_baseline, style="batch")
