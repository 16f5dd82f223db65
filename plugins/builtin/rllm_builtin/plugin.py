"""Hook implementations of the built-in plugin."""

from __future__ import annotations

from rllm.config.schema import ConfigKey
from rllm.plugins.hookspecs import ConfigSectionRegistrar, EstimatorRegistrar, NamedRegistrar, hookimpl
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


def _task_names() -> list[str]:
    from rllm_builtin.embedded.tasks import TASKS

    return list(TASKS)


EMBEDDED_KEYS = (
    ConfigKey(
        "tasks",
        "list[str]",
        ["digit_sum"],
        "Built-in task families: digit_sum (single turn), digit_chain (three turns).",
        names=_task_names,
    ),
    ConfigKey("seed", "int", 0, "Seed of the policy's initialisation and of sampling.", minimum=0),
    ConfigKey("n_features", "int", 16384, "Rows of the hashed context table (the policy's size).", minimum=1),
    ConfigKey("lr", "float", 1.0, "Learning rate.", minimum=0, above=True),
    ConfigKey("temperature", "float", 1.0, "Sampling temperature.", minimum=0, above=True),
    ConfigKey("ppo_epochs", "int", 2, "Passes over each batch.", minimum=1),
    ConfigKey("mini_batches", "int", 2, "Minibatches per pass (later ones are off-policy).", minimum=1),
    ConfigKey("clip_ratio_low", "float", 0.2, "PPO clip below 1.", minimum=0),
    ConfigKey("clip_ratio_high", "float", 0.2, "PPO clip above 1.", minimum=0),
)
"""The ``rllm.embedded`` section: settings of the embedded CPU backend."""


@hookimpl
def rllm_register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("rllm.embedded", EMBEDDED_KEYS)
