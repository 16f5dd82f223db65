"""rllm's own configuration keys, in one table: every key's type, default, allowed values and meaning.

The shipped defaults, ``rllm config --keys``, docs/config-keys.md and the checks run before
anything starts all read :data:`CORE_KEYS`, so a key cannot be documented, defaulted and
validated three different ways. Plugins add sections through ``rllm_register_config_sections``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rllm.contract.keys import ConfigKey
from rllm.contract.names import (
    EXECUTOR_NAMES,
    FAILURE_POLICIES,
    KL_CONTROLLERS,
    KL_KIND_CHOICES,
    LOSS_AGG_MODES,
    LR_SCHEDULES,
    NONFINITE_POLICIES,
    REJECTION_SAMPLING_MODES,
    TIS_MODES,
    TerminationReason,
)
from rllm.losses.arguments import ENTROPY_COEFF, KL_COEF, TIS_CAP, as_config_key


def why_missing(name: str) -> str:
    """Why ``name`` is not registered (a plugin that failed to load), for a key whose values are registered names."""
    from rllm.plugins.manager import get_plugin_manager

    return get_plugin_manager().why_missing(name)


def _registered(kind: str) -> dict[str, Callable[..., Any]]:
    """The ``names`` of a key whose values are the names in one plugin registry, looked up when a value is checked."""

    def names() -> list[str]:
        from rllm.plugins.manager import get_plugin_manager

        return getattr(get_plugin_manager(), kind).names()

    return {"names": names, "explain": why_missing}


def _bool_key(path: str, default: bool, doc: str) -> ConfigKey:
    return ConfigKey(path, "bool", default, doc)


def _count(path: str, default: int | None, doc: str, minimum: int = 1, **extra: Any) -> ConfigKey:
    return ConfigKey(path, "int", default, doc, minimum=minimum, **extra)


_MASKS = tuple(reason.value for reason in TerminationReason)

MAX_STALENESS = 32
"""``rllm.async_training.staleness_threshold``'s upper bound: each version a sample may lag is a batch sampled
ahead (held in memory, with the weights that sample it) and one ``rollout/staleness/count_K`` metric; 32 is far past
where off-policy corrections still hold."""

CORE_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "rllm.backend",
        "str",
        "embedded",
        "Training backend, by the name a plugin registered (see `rllm plugins`).",
        **_registered("backends"),
    ),
    ConfigKey(
        "rllm.grouping_hook",
        "str",
        "task_and_role",
        "Trajectory grouping hook, by name: which rollouts an estimator compares.",
        **_registered("grouping_hooks"),
    ),
    ConfigKey(
        "rllm.grouping_hook_options",
        "mapping",
        {},
        "Keyword options of the grouping hook, called as hook(episodes, **options); task_and_role takes "
        "impute_missing_names, default_traj_name and drop_unnamed_traj.",
    ),
    ConfigKey(
        "rllm.algorithm.adv_estimator",
        "str",
        "grpo",
        "Advantage estimator, by its registered name (see `rllm plugins`).",
        **_registered("estimators"),
    ),
    ConfigKey(
        "algorithm.adv_estimator",
        "str",
        "${rllm.algorithm.adv_estimator}",
        "verl's location of the estimator name; follows rllm.algorithm.adv_estimator unless set.",
        **_registered("estimators"),
    ),
    ConfigKey("rllm.algorithm.gamma", "float", 1.0, "Discount of the per-step estimators.", minimum=0, maximum=1),
    ConfigKey("rllm.algorithm.lam", "float", 0.95, "GAE lambda.", minimum=0, maximum=1),
    _bool_key("rllm.algorithm.norm_adv_by_std_in_grpo", True, "GRPO divides by the group's std."),
    ConfigKey(
        "rllm.algorithm.use_rllm",
        "bool",
        None,
        "Deprecated (rLLM's switch): advantages always come from rllm's estimators; setting it warns.",
        nullable=True,
    ),
    _bool_key("rllm.algorithm.use_precomputed_advantage", False, "Groups whose steps carry advantages keep them."),
    ConfigKey(
        "rllm.algorithm.loss_fn",
        "str",
        None,
        "Policy loss, any name `rllm losses` lists (checked with its options when the config is loaded); null lets "
        "the backend choose (the embedded backend: ppo).",
        nullable=True,
    ),
    ConfigKey(
        "rllm.algorithm.lr_schedule",
        "str",
        "constant",
        "Learning-rate schedule.",
        choices=LR_SCHEDULES,
    ),
    ConfigKey(
        "rllm.algorithm.warmup_steps_ratio", "float", 0.0, "Share of steps spent warming up.", minimum=0, maximum=1
    ),
    ConfigKey(
        "rllm.algorithm.epsilon",
        "float",
        None,
        "Guard added to the std before dividing; null keeps the estimator's (or the preset's) default.",
        minimum=0,
        nullable=True,
    ),
    ConfigKey(
        "rllm.algorithm.estimator_map",
        "mapping",
        {},
        "role -> estimator name, for multi-agent workflows.",
    ),
    ConfigKey(
        "rllm.algorithm.estimator_options",
        "mapping",
        {},
        "Extra estimator options, e.g. {preset: verl}; a key naming an estimator holds options for it alone.",
    ),
    ConfigKey(
        "rllm.algorithm.nonfinite_rewards",
        "str",
        "error",
        "error: reject NaN/inf rewards naming the group; zero: such groups get zero advantage; "
        "exclude: only the unscorable rollouts leave the statistics and get 0.",
        choices=NONFINITE_POLICIES,
    ),
    ConfigKey(
        "rllm.algorithm.loss_fn_map",
        "mapping",
        {},
        "role -> policy loss, for multi-agent workflows ((estimator, loss) pairs in estimator_map fill it too).",
    ),
    ConfigKey(
        "rllm.algorithm.loss_agg_mode",
        "str",
        None,
        "How token losses are aggregated (verl's modes); null lets the backend choose.",
        choices=LOSS_AGG_MODES,
        nullable=True,
    ),
    ConfigKey(
        "rllm.algorithm.loss_options",
        "mapping",
        {},
        "Options of the policy loss (e.g. {clip_ratio_c: 3.0}); each must be one the loss declares (`rllm losses`).",
    ),
    _bool_key(
        "rllm.algorithm.use_kl_loss", False, "Add kl_loss_coef times the KL to the reference policy to the loss."
    ),
    dataclasses.replace(
        as_config_key(KL_COEF, "rllm.algorithm.kl_loss_coef"),
        default=0.001,
        doc="Coefficient of the KL loss term (use_kl_loss), verl's key and default.",
    ),
    ConfigKey(
        "rllm.algorithm.kl_loss_type",
        "str",
        "low_var_kl",
        "KL estimator of the loss term; a trailing + takes k2's gradient (straight-through).",
        choices=KL_KIND_CHOICES,
    ),
    # KL in the reward (verl's use_kl_in_reward, kl_penalty and kl_ctrl section, with verl's defaults)
    _bool_key(
        "rllm.algorithm.use_kl_in_reward",
        False,
        "Subtract kl_ctrl's coefficient times the KL of the rollout policy to the reference from the rewards.",
    ),
    ConfigKey(
        "rllm.algorithm.kl_penalty",
        "str",
        "kl",
        "KL estimator of the reward penalty (use_kl_in_reward); the kinds of kl_loss_type.",
        choices=KL_KIND_CHOICES,
    ),
    ConfigKey(
        "rllm.algorithm.kl_ctrl.type",
        "str",
        "fixed",
        "Controller of the reward penalty's coefficient: fixed keeps kl_coef; adaptive steers the KL to target_kl.",
        choices=KL_CONTROLLERS,
    ),
    ConfigKey(
        "rllm.algorithm.kl_ctrl.kl_coef", "float", 0.001, "(Initial) coefficient of the reward penalty.", minimum=0
    ),
    ConfigKey(
        "rllm.algorithm.kl_ctrl.target_kl",
        "float",
        0.1,
        "adaptive: the mean KL per token the controller aims for.",
        minimum=0,
        above=True,
    ),
    ConfigKey(
        "rllm.algorithm.kl_ctrl.horizon",
        "int",
        10000,
        "adaptive: each update changes the coefficient by at most 20% times min(the batch's samples / horizon, 1).",
        minimum=1,
    ),
    ConfigKey(
        "rllm.algorithm.warmup_steps",
        "int",
        -1,
        "Learning-rate warm-up steps; -1 uses warmup_steps_ratio.",
        minimum=0,
        special=(-1,),
    ),
    dataclasses.replace(
        as_config_key(KL_COEF, "rllm.algorithm.kl_beta"),
        doc="rLLM's name of kl_loss_coef: other than its default 0 (rLLM's), it is the coefficient.",
    ),
    ConfigKey("rllm.algorithm.eps_clip", "float", 0.2, "PPO clip range.", minimum=0, above=True),
    as_config_key(ENTROPY_COEFF, "rllm.algorithm.entropy_coeff"),
    ConfigKey(
        "rllm.algorithm.eps_clip_high",
        "float",
        None,
        "Upper PPO clip range; null: eps_clip.",
        minimum=0,
        above=True,
        nullable=True,
    ),
    ConfigKey(
        "rllm.algorithm.router_replay",
        "str",
        "disabled",
        "Mixture-of-experts router replay.",
        choices=("disabled", "R2", "R3"),
    ),
    ConfigKey(
        "rllm.algorithm.rollout_correction.tis_mode",
        "str",
        None,
        "Truncated importance sampling level; null turns it off.",
        choices=TIS_MODES,
        nullable=True,
    ),
    ConfigKey(
        "rllm.algorithm.rollout_correction.bypass_mode",
        "bool",
        None,
        "Use the rollout logprobs as the old policy; null: the backend's default.",
        nullable=True,
    ),
    as_config_key(TIS_CAP, "rllm.algorithm.rollout_correction.tis_cap"),
    ConfigKey(
        "rllm.algorithm.rollout_correction.tis_lower",
        "float",
        None,
        "With tis_mode: zero the weights outside [tis_lower, tis_cap] instead of clamping (IcePop's mask; verl's "
        "rollout_is_threshold 'lower_upper').",
        minimum=0,
        above=True,
        nullable=True,
    ),
    ConfigKey(
        "rllm.algorithm.rollout_correction.rollout_rs",
        "str",
        None,
        "Rejection by divergence from the sampler, verl's criteria, comma-separated: token_k1..k3, "
        "seq_sum_k1..k3, seq_mean_k1..k3 (seq_mean_k1: the geometric mean ratio), seq_max_k2, seq_max_k3.",
        nullable=True,
    ),
    ConfigKey(
        "rllm.algorithm.rollout_correction.rollout_rs_threshold",
        "str",
        None,
        "Threshold of each rollout_rs criterion (one shared, or comma-separated): an upper bound, or for k1 a "
        "ratio bound or 'lower_upper'.",
        nullable=True,
    ),
    ConfigKey(
        "rllm.algorithm.rollout_correction.off_policy_mask_threshold",
        "float",
        None,
        "TRL's off-policy sequence mask: drop sequences with a negative advantage whose mean KL to the sampler "
        "exceeds it; null: off.",
        minimum=0,
        nullable=True,
    ),
    _bool_key("rllm.stepwise_advantage.enable", False, "Per-step advantages (verl switch)."),
    ConfigKey(
        "rllm.stepwise_advantage.use_rllm",
        "bool",
        None,
        "The seed's place for the deprecated use_rllm switch (see rllm.algorithm.use_rllm).",
        nullable=True,
    ),
    ConfigKey(
        "rllm.stepwise_advantage.norm_adv_by_std_in_grpo",
        "bool",
        None,
        "The seed's place for norm_adv_by_std_in_grpo; null: rllm.algorithm.norm_adv_by_std_in_grpo decides.",
        nullable=True,
    ),
    ConfigKey(
        "rllm.stepwise_advantage.mode",
        "str",
        "broadcast",
        "broadcast: every step gets its trajectory's advantage (per_step is switched to it with a warning).",
        choices=("broadcast", "per_step"),
    ),
    _bool_key(
        "rllm.stepwise_advantage.normalize_by_steps",
        False,
        "Divide every step's advantage by its trajectory's number of steps (any estimator).",
    ),
    _bool_key("rllm.compact_filtering.enable", False, "Mask trajectories by how their episode ended."),
    *(_bool_key(f"rllm.compact_filtering.mask_{name}", False, f"Mask episodes ending with {name}.") for name in _MASKS),
    _bool_key("rllm.rejection_sample.enable", False, "Drop groups with no signal (all solved or all failed)."),
    ConfigKey(
        "rllm.rejection_sample.mode",
        "str",
        None,
        "batch: keep each batch's partly solved groups; episode: accumulate until enough are solved; "
        "none/group: drop only groups below min_trajs_per_group; null: episode when enabled (rLLM's default).",
        choices=REJECTION_SAMPLING_MODES,
        nullable=True,
    ),
    _count("rllm.rejection_sample.multiplier", 1, "Tasks sampled per batch slot, to make up for rejected ones."),
    _count("rllm.rejection_sample.min_partial_solve_tasks", 1, "Partly solved tasks to gather before training.", 0),
    _count("rllm.rejection_sample.min_trajs_per_group", 2, "Smaller groups are dropped (no baseline)."),
    _bool_key(
        "rllm.rejection_sample.filter_uniform_groups",
        False,
        "rLLM's switch: drop groups whose rewards are all equal and keep generating (dynamic sampling, "
        "tolerance 0, drop strategy).",
    ),
    _bool_key(
        "rllm.dynamic_sampling.enable",
        False,
        "Filter groups whose reward spread is within the tolerance (they carry no group-relative signal).",
    ),
    ConfigKey(
        "rllm.dynamic_sampling.strategy",
        "str",
        "drop",
        "drop: generate more tasks until the batch is full (DAPO); replace: copy non-uniform groups of the "
        "same batch in place of uniform ones (POLARIS).",
        choices=("drop", "replace"),
    ),
    ConfigKey(
        "rllm.dynamic_sampling.spread",
        "str",
        "std",
        "How a group's reward spread is measured: std (population) or range (max - min).",
        choices=("std", "range"),
    ),
    ConfigKey(
        "rllm.dynamic_sampling.tolerance",
        "float",
        0.0,
        "A group whose spread is at most this is uniform; 0 means all rewards equal.",
        minimum=0,
    ),
    _count("rllm.dynamic_sampling.max_rounds", 3, "drop: generation rounds per step, the first included."),
    _bool_key(
        "rllm.async_training.enable",
        False,
        "Sample the next batches while the policy updates (docs/async.md); the backend must overlap them.",
    ),
    _count(
        "rllm.async_training.staleness_threshold",
        0,
        "Policy versions a sample may lag behind the policy it trains (0: on-policy, as a synchronous run); "
        f"sampling pauses rather than exceed it; at most {MAX_STALENESS}.",
        0,
        maximum=MAX_STALENESS,
    ),
    _count(
        "rllm.async_training.max_batches_ahead",
        1,
        f"Batches sampled ahead of the one training, at most {MAX_STALENESS} (also bounded by staleness_threshold).",
        maximum=MAX_STALENESS,
    ),
    _bool_key(
        "rllm.async_training.allow_uncorrected",
        False,
        "With staleness_threshold > 0, train on stale samples without a rollout correction "
        "(rllm.algorithm.rollout_correction tis_mode, rollout_rs or off_policy_mask_threshold).",
    ),
    _count("rllm.workflow.n_parallel_tasks", 256, "Workflows run at once."),
    _count("rllm.workflow.retry_limit", 3, "failure_policy=retry: extra attempts for a workflow that raised.", 0),
    _bool_key(
        "rllm.workflow.raise_on_error",
        True,
        "failure_policy=retry: a workflow still failing after its retries stops training (false: its group is "
        "dropped, counted).",
    ),
    ConfigKey(
        "rllm.workflow.timeout",
        "float",
        300,
        "Seconds one workflow run may take before its episode ends TIMEOUT; null waits forever.",
        minimum=0,
        above=True,
        nullable=True,
    ),
    ConfigKey(
        "rllm.workflow.failure_policy",
        "str",
        "retry",
        "What a workflow error does: retry (re-run it up to retry_limit times, then raise_on_error decides), "
        "drop_group (leave its task's group out of the step, counted), fail (stop the run naming the task).",
        choices=FAILURE_POLICIES,
    ),
    _count(
        "rllm.workflow.seed",
        0,
        "Run seed of the episodes: each one's comes from it, the step and its (task, rollout) index.",
        0,
    ),
    ConfigKey(
        "rllm.workflow.executor",
        "str",
        "local",
        "Where workflows run: local (the trainer's event loop) or ray (Ray actors; pip install 'rllm[ray]').",
        choices=EXECUTOR_NAMES,
    ),
    ConfigKey(
        "rllm.workflow.ray.address",
        "str",
        None,
        "ray: address of an existing cluster (ray.init(address=...)); null starts a local instance on 127.0.0.1.",
        nullable=True,
    ),
    _count("rllm.workflow.ray.num_workers", 2, "ray: worker actors the workflows are spread over."),
    ConfigKey("rllm.workflow.ray.num_cpus", "float", 1.0, "ray: CPUs each worker actor reserves.", minimum=0),
    ConfigKey("rllm.workflow.ray.num_gpus", "float", 0.0, "ray: GPUs each worker actor reserves.", minimum=0),
    ConfigKey(
        "rllm.workflow.ray.resources",
        "mapping",
        {},
        "ray: custom resources each worker actor reserves, e.g. {sandbox: 1}.",
    ),
    ConfigKey(
        "rllm.workflow.ray.start_timeout",
        "float",
        60.0,
        "ray: seconds to reach ray.address and for every worker to start; then the run stops saying what is free.",
        minimum=0,
        above=True,
    ),
    ConfigKey(
        "rllm.agent_flow.flow",
        "str",
        None,
        "An AgentFlow to train, as module:attr (an instance, or a class made with no arguments); null: the "
        "backend's workflow. Its calls go through the gateway (rllm.gateway.*).",
        nullable=True,
    ),
    ConfigKey(
        "rllm.agent_flow.evaluator",
        "str",
        None,
        "The Evaluator scoring the flow's episodes, as module:attr (an instance, or a class made with no "
        "arguments); needed with rllm.agent_flow.flow.",
        nullable=True,
    ),
    ConfigKey(
        "rllm.agent_flow.train_dataset",
        "str",
        None,
        "The flow's training tasks, as module:attr (a list, or a function giving one, e.g. "
        "rllm.tasks:text_digit_max_tasks); null: the backend's built-in tasks.",
        nullable=True,
    ),
    ConfigKey(
        "rllm.agent_flow.val_dataset",
        "str",
        None,
        "The flow's validation tasks, as module:attr like train_dataset; null: the training tasks.",
        nullable=True,
    ),
    ConfigKey(
        "rllm.gateway.host",
        "str",
        "127.0.0.1",
        "Address the gateway (each episode's OpenAI-compatible URL) listens on; not empty (which would mean every "
        "interface: give 0.0.0.0 for that).",
        nonempty=True,
    ),
    _count("rllm.gateway.port", 0, "Port the gateway listens on; 0: any free port.", 0, maximum=65535),
    ConfigKey("rllm.gateway.model", "str", "policy", "The model name flows are given and requests must carry."),
    _count("rllm.gateway.flow_threads", 64, "Threads running synchronous flows (run) at once."),
    _count("rllm.rollout.n", 8, "Rollouts per task in training."),
    _count("rllm.rollout.n_val", 1, "Rollouts per task in validation."),
    ConfigKey(
        "rllm.rollout.openai.base_url",
        "list[str]",
        [],
        "OpenAI-compatible servers to sample rollouts from (e.g. [http://127.0.0.1:8000/v1]), each episode sticking "
        "to one; empty: the backend's in-process engine. See docs/serve.md.",
    ),
    ConfigKey(
        "rllm.rollout.openai.model",
        "str",
        None,
        "The model name sent in requests; null: the first model the first server's /v1/models lists.",
        nullable=True,
    ),
    ConfigKey("rllm.rollout.openai.api_key", "str", "EMPTY", "Sent as the Bearer token (local servers ignore it)."),
    ConfigKey(
        "rllm.rollout.openai.endpoint",
        "str",
        "completions",
        "completions: token ids in and out through /v1/completions; chat: /v1/chat/completions for chat messages "
        "(token-id prompts always use /v1/completions).",
        choices=("completions", "chat"),
    ),
    ConfigKey(
        "rllm.rollout.openai.timeout",
        "float",
        60.0,
        "Seconds one request may take before it counts as failed (then retried).",
        minimum=0,
        above=True,
    ),
    _count(
        "rllm.rollout.openai.max_retries",
        3,
        "Extra attempts of a request that got no answer, a timeout or a 5xx/429; then the workflow fails "
        "(rllm.workflow.failure_policy).",
        0,
    ),
    ConfigKey(
        "rllm.rollout.openai.retry_backoff",
        "float",
        0.5,
        "Seconds before the first retry, doubled before each next one.",
        minimum=0,
    ),
    _count("rllm.rollout.openai.max_concurrency", 64, "Requests in flight at once, over all servers."),
    _bool_key(
        "rllm.rollout.openai.seed_requests",
        True,
        "Send each request a seed drawn from its episode's seed, so a server that honours seeds samples the same "
        "episodes again; false sends none (vLLM then skips its slower per-request generators, episodes do not repeat).",
    ),
    ConfigKey(
        "rllm.rollout.openai.weight_sync",
        "str",
        "disk",
        "How new weights reach the servers after each update, by the name a plugin registered: disk (SGLang's "
        "/update_weights_from_disk), memory (rllm serve's /update_weights_from_safetensors) or vllm (vLLM's "
        "/collective_rpc reload_weights, with VLLM_SERVER_DEV_MODE=1).",
        **_registered("weight_syncs"),
    ),
    ConfigKey(
        "rllm.rollout.openai.weight_sync_dtype",
        "str",
        "auto",
        "The dtype the weight sync writes or sends the weights in, cast once per update from the trained ones: auto "
        "(bfloat16 for vllm, which casts to the dtype it serves; the trained weights' own for disk and memory, as "
        "rllm serve refuses another dtype than it serves), float32, bfloat16 or float16.",
        choices=("auto", "float32", "bfloat16", "float16"),
    ),
    ConfigKey(
        "rllm.rollout.openai.weight_sync_timeout",
        "float",
        300.0,
        "Seconds a server may take to load new weights; then the run stops.",
        minimum=0,
        above=True,
    ),
    _count("rllm.trainer.total_epochs", 10, "Passes over the training tasks."),
    _count("rllm.trainer.total_batches", -1, "Stop after this many steps; -1: no limit.", special=(-1,)),
    ConfigKey(
        "rllm.trainer.logger",
        "list[str]",
        ["console", "jsonl"],
        "Experiment trackers, by the names plugins registered (see `rllm plugins`): console (a line per step and "
        "a progress bar), jsonl ({output_dir}/metrics.jsonl).",
        **_registered("trackers"),
    ),
    ConfigKey(
        "rllm.trainer.tracker_timeout",
        "float",
        300,
        "Seconds one tracker call (start, log_metrics, close, ...) may take; a tracker past it is switched off with "
        "a warning (one that cannot start stops the run); null waits forever.",
        minimum=0,
        above=True,
        nullable=True,
    ),
    ConfigKey("rllm.trainer.project_name", "str", "rllm", "Folder under runs/ holding the experiments."),
    ConfigKey("rllm.trainer.experiment_name", "str", "default", "Folder of this run under the project."),
    _count("rllm.trainer.test_freq", 5, "Validate every N steps; 0: only at the end (if val_before_train).", 0),
    _count(
        "rllm.trainer.save_freq", 20, "Checkpoint every N steps and after the last; 0: never, not at the end either.", 0
    ),
    _bool_key("rllm.trainer.val_before_train", True, "Validate once before the first step."),
    ConfigKey(
        "rllm.trainer.val_pass_at_k",
        "list[int]",
        [1],
        "k values of the unbiased pass@k reported by validation; each must be <= rllm.rollout.n_val.",
        minimum=1,
    ),
    _bool_key("rllm.trainer.val_only", False, "Validate and stop."),
    _bool_key(
        "rllm.trainer.require_update",
        True,
        "A run none of whose steps updated the policy ends in an error (exit 1); false: with a warning only.",
    ),
    ConfigKey(
        "rllm.trainer.output_dir",
        "str",
        "runs/${rllm.trainer.project_name}/${rllm.trainer.experiment_name}",
        "Run directory: metrics, checkpoints, config.yaml and the learning curve.",
    ),
    ConfigKey(
        "rllm.trainer.resume_mode",
        "str",
        "auto",
        "auto: resume from the newest intact checkpoint in output_dir; "
        "disable: start over (deletes what rllm wrote there, nothing else).",
        choices=("auto", "disable"),
    ),
    _count("rllm.trainer.max_checkpoints", 3, "Checkpoints kept; older ones are deleted."),
    _bool_key("rllm.episode_logging.log_episodes", False, "Write every episode to episode_log_dir."),
    ConfigKey(
        "rllm.episode_logging.episode_log_dir",
        "str",
        "${rllm.trainer.output_dir}/episodes",
        "Folder of the episode logs; inside the run directory by default, so runs never mix.",
    ),
    _count("rllm.data.train_batch_size", 20, "Tasks per training step."),
    _count("rllm.data.val_batch_size", None, "Tasks per validation batch; null: all at once.", nullable=True),
    _bool_key("rllm.data.shuffle", True, "Shuffle the training tasks each epoch."),
)
"""rllm's own keys; plugins add sections through ``rllm_register_config_sections``."""
