"""Hook implementations of the built-in plugin: each estimator with its declared options."""

from __future__ import annotations

from collections.abc import Mapping

from rllm import hookimpl
from rllm.config import TEMPERATURE_KEY, ConfigKey
from rllm.plugins import (
    BackendRegistrar,
    BatchFieldRegistrar,
    ConfigSectionRegistrar,
    EstimatorRegistrar,
    GroupingHookRegistrar,
    LossRegistrar,
    TrackerRegistrar,
    WeightSyncRegistrar,
)
from rllm.toolkit import NUMERICS_OPTIONS, Option
from rllm_builtin import estimators, losses

NORM_BY_STD = Option("norm_adv_by_std_in_grpo", (bool,), True, "divide by the group standard deviation")
GAMMA = Option("gamma", (float,), 1.0, "discount of the return-to-go over steps", minimum=0.0)


@hookimpl
def rllm_register_estimators(register: EstimatorRegistrar) -> None:
    plain = ("rloo", "reinforce", "reinforce_plus_plus_baseline", "prpo", "dr_grpo", "grpo_batch_std", "maxrl")
    for name in plain:
        register(name, getattr(estimators, name), style="batch", options=(), numerics=True)
    f_norm = Option("f_norm", (float,), 1.0, "divides the advantages (verl's GPG option)", minimum=1e-12)
    register("gpg", estimators.gpg, style="batch", options=[f_norm], numerics=True)
    register("grpo", estimators.grpo, style="batch", options=[NORM_BY_STD], numerics=True)
    register("grpo_passk", estimators.grpo_passk, style="batch", options=[NORM_BY_STD], numerics=True)
    k = Option("pass_at_k", (int,), 1, "the k of pass@k to optimise (every group needs k rollouts)", minimum=1)
    register("pkpo", estimators.pkpo, style="batch", options=[k], numerics=True)
    register("opo", estimators.opo, style="batch", requires=["response_lengths"], options=(), numerics=True)
    register("remax", estimators.remax, style="batch", requires=["baseline_rewards"], options=(), numerics=True)
    weights = Option("component_weights", (list,), None, "weight of each reward component (default: all 1)")
    register(
        "gdpo",
        estimators.gdpo,
        style="batch",
        requires=["reward_components"],
        options=[weights, NORM_BY_STD],
        numerics=True,
    )
    register(
        "reinforce_plus_plus",
        estimators.reinforce_plus_plus,
        style="batch",
        requires=["step_rewards"],
        options=[GAMMA],
        numerics=True,
    )
    turn_options = [
        GAMMA,
        Option(
            "baseline",
            (str,),
            "all",
            "compare a turn with all rollouts of the group, or survivors only",
            ("all", "survivors"),
        ),
        NORM_BY_STD,
    ]
    register(
        "turn_grpo", estimators.turn_grpo, style="batch", requires=["step_rewards"], options=turn_options, numerics=True
    )
    gae_options = [
        GAMMA,
        Option("lam", (float,), 0.95, "GAE lambda: how far credit reaches back", minimum=0.0),
        Option("normalize", (bool,), True, "whiten the advantages over all steps"),
    ]
    register(
        "gae",
        estimators.gae,
        style="batch",
        requires=["step_rewards", "step_values"],
        options=gae_options,
        numerics=True,
    )
    gigpo_options = [
        Option("omega", (float,), 1.0, "weight of the step-level advantage (GiGPO's omega)", minimum=0.0),
        GAMMA,
        Option("mode", (str,), "mean_norm", "centre only, or centre and divide by the std", estimators.GIGPO_MODES),
    ]
    gigpo_needs = ["step_rewards", "anchor_states"]
    register("gigpo", estimators.gigpo, style="batch", requires=gigpo_needs, options=gigpo_options, numerics="verl")
    token_options = [
        Option("handle_zero_tail", (bool,), True, "baseline 0 where only a group's longest trajectory has tokens"),
        Option("epsilon", (float,), 1e-8, "added to the baseline's denominator (verl's)", minimum=0.0),
    ]
    for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        register(
            name,
            getattr(estimators, name),
            style="batch",
            requires=["old_log_probs", "sum_pi_squared"],
            options=token_options,
            numerics=True,
        )
    distill_options = [
        Option("kl_penalty_coef", (float,), 1.0, "scale of the teacher-minus-student log-prob gap", minimum=0.0),
        Option(
            "kl_discount_factor",
            (float,),
            0.0,
            "discount of the gap's sum over later tokens; 0: none, at most 1 (above, later tokens weigh more)",
            minimum=0.0,
            maximum=1.0,
        ),
        Option("clip_min", (float,), None, "lower clip of each token's advantage; unset: none"),
        Option("clip_max", (float,), None, "upper clip of each token's advantage; unset: none"),
    ]
    register(
        "distill",
        estimators.distill,
        style="batch",
        requires=["teacher_log_probs", "rollout_log_probs"],
        options=distill_options,
    )
    # Peers' names, each with its peer's numerics by default (docs/estimators.md, "Peers' names").
    register("group_norm", estimators.grpo, style="batch", options=[NORM_BY_STD], numerics="openrlhf")
    register(
        "reinforce_baseline", estimators.reinforce_plus_plus_baseline, style="batch", options=(), numerics="openrlhf"
    )
    steps = ["step_rewards"]
    register(
        "reinforce++", estimators.reinforce_plus_plus, style="batch", requires=steps, options=[GAMMA], numerics="skyrl"
    )
    register("grpo_vectorized", estimators.grpo, style="batch", options=[NORM_BY_STD], numerics="verl")
    register("rloo_vectorized", estimators.rloo, style="batch", options=(), numerics="verl")
    ema_options = [
        Option("decay", (float,), 0.9, "weight of the old baseline in each update, in [0, 1)", minimum=0.0),
        Option("key", (str,), "task", "one baseline per task, or per role", choices=("task", "role")),
    ]
    register("ema_baseline", estimators.ema_baseline, style="batch", options=ema_options)
    components = Option("components", (str, Mapping), None, "estimators and weights, e.g. '0.7*grpo + 0.3*rloo'")
    register("mix", estimators.mix, style="batch", options=[components, NORM_BY_STD, *NUMERICS_OPTIONS])


@hookimpl
def rllm_register_grouping_hooks(register: GroupingHookRegistrar) -> None:
    from rllm.trainer import group_by_task_and_role
    from rllm_builtin.anchor_states import group_by_anchor_state

    register("task_and_role", group_by_task_and_role)
    register(estimators.GIGPO_HOOK, group_by_anchor_state)


@hookimpl
def rllm_register_batch_fields(register: BatchFieldRegistrar) -> None:
    register("anchor_states", estimators.ANCHOR_FIELD)


@hookimpl
def rllm_register_backends(register: BackendRegistrar) -> None:
    from rllm_builtin.embedded.backend import EmbeddedBackend

    register("embedded", EmbeddedBackend)


@hookimpl
def rllm_register_weight_syncs(register: WeightSyncRegistrar) -> None:
    from rllm.engine import DiskWeightSync, MemoryWeightSync, VLLMWeightSync

    register("disk", DiskWeightSync)
    register("memory", MemoryWeightSync)
    register("vllm", VLLMWeightSync)


def _task_names() -> list[str]:
    from rllm.tasks import TASKS

    return list(TASKS)


EMBEDDED_KEYS = (
    ConfigKey(
        "tasks",
        "list[str]",
        ["digit_sum"],
        "Built-in task families: digit_sum, digit_max (single turn), digit_chain (three turns).",
        names=_task_names,
    ),
    ConfigKey(
        "seed",
        "int",
        0,
        "Seed of the task order and the minibatch order (episodes: rllm.workflow.seed).",
        minimum=0,
    ),
    ConfigKey("n_features", "int", 16384, "Rows of the hashed context table (the policy's size).", minimum=1),
    ConfigKey("lr", "float", 1.0, "Learning rate.", minimum=0, above=True),
    TEMPERATURE_KEY,
    ConfigKey("ppo_epochs", "int", 2, "Passes over each batch.", minimum=1),
    ConfigKey("mini_batches", "int", 2, "Minibatches per pass (later ones are off-policy).", minimum=1),
    ConfigKey("clip_ratio_low", "float", 0.2, "PPO clip below 1.", minimum=0),
    ConfigKey("clip_ratio_high", "float", 0.2, "PPO clip above 1.", minimum=0),
)
"""The ``rllm.embedded`` section: settings of the embedded CPU backend."""


@hookimpl
def rllm_register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("rllm.embedded", EMBEDDED_KEYS)


@hookimpl
def rllm_register_losses(register: LossRegistrar) -> None:
    losses.register_losses(register)


@hookimpl
def rllm_register_trackers(register: TrackerRegistrar) -> None:
    register("console", "rllm.trainer:ConsoleTracker")  # paths: loading plugins imports no trainer module
    register("jsonl", "rllm.trainer:JsonlTracker")
