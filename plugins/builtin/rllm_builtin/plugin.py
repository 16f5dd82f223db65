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
    register("dr_grpo", estimators.dr_grpo, style="batch")
    register("grpo_batch_std", estimators.grpo_batch_std, style="batch")
    register("grpo_passk", estimators.grpo_passk, style="batch")
    register("opo", estimators.opo, style="batch", requires=("response_lengths",))
    register("remax", estimators.remax, style="batch", requires=("baseline_rewards",))
    register("gpg", estimators.gpg, style="batch")
    register("maxrl", estimators.maxrl, style="batch")
    register("gdpo", estimators.gdpo, style="batch", requires=("reward_components",))
    register("reinforce_plus_plus", estimators.reinforce_plus_plus, style="batch", requires=("step_rewards",))
    register("gae", estimators.gae, style="batch", requires=("step_rewards", "step_values"))
    register("mix", estimators.mix, style="batch")


@hookimpl
def rllm_register_grouping_hooks(register: NamedRegistrar) -> None:
    from rllm.trainer.grouping import group_by_task_and_role

    register("task_and_role", group_by_task_and_role)


@hookimpl
def rllm_register_backends(register: NamedRegistrar) -> None:
    from rllm_builtin.embedded.backend import EmbeddedBackend

    register("embedded", EmbeddedBackend)
