"""rllm inside TRL: :class:`RLLMGRPOTrainer`, TRL's ``GRPOTrainer`` with an rllm estimator and, optionally, loss.

TRL 1.16 turns rewards into advantages inline in ``_generate_and_score_completions`` and has no
hook for it, so the bridge overrides the two narrowest places:

* ``_calculate_rewards`` (TRL's own reward functions, unchanged) is wrapped to keep each
  reward function's scores of the whole generation batch (gathered over processes, as TRL
  gathers them) and the prompts; ``_generate_and_score_completions`` then runs TRL's code
  unchanged and replaces only its ``advantages`` (and the advantages it logs) with the rllm
  estimator's, computed on the same rewards: TRL's weighted sum of the reward functions, a
  completion no function could score left out of its group's statistics with advantage 0
  (TRL's rule, rllm's ``nonfinite_rewards="exclude"``), groups of ``num_generations``.
* ``_compute_loss`` runs the rllm loss (by name, through :class:`rllm.losses.LossSettings`) on
  TRL's log-probs, entropies, old and reference log-probs, with the normalisers TRL's loss
  types use (:func:`loss_counts`). Without a loss named, TRL's own loss runs.

Importing this module checks the installed TRL version first (:mod:`rllm_trl.version`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from rllm_trl.version import check_trl_version

check_trl_version()

import numpy as np  # noqa: E402  (after the version check, so an untested TRL fails before it is imported)
import torch  # noqa: E402
from accelerate.utils import gather_object  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from rllm.errors import ConfigError, EstimatorOutputError, LossOptionError, MissingInputError, RLLMWarning  # noqa: E402
from rllm.losses import LossSettings, kl_penalty, loss_entry, resolve_loss_options  # noqa: E402
from rllm.toolkit import AdvantageBatch, EstimatorStates, Ragged, resolve_plugins, run_estimator  # noqa: E402
from rllm_trl.plugin import LOSSES, PREFIX  # noqa: E402

__all__ = ["FROM_TRL", "RLLMGRPOTrainer", "loss_counts"]

FROM_TRL = {
    "response_lengths": "the completion's tokens under the loss mask (completion_mask, times tool_mask)",
    "reward_components": "each reward function's score (GRPOTrainer's rewards_per_func, before reward_weights)",
}
"""The rllm batch fields the bridge fills beyond rewards and groups, and what of TRL's fills them."""

PRESET = "trl"
"""The numerics preset of estimators that take numerics and name no preset of their own: TRL's advantage
conventions (unbiased std, ``std + 1e-4``, float32), so rllm's ``grpo`` is TRL's ``scale_rewards="group"``."""

STATE_ROLE = "trl"
"""The role under which a stateful estimator's state is kept (TRL has no roles)."""

ADVANTAGE_KEYS = {
    "scale_rewards": ("group", "estimator 'dr_grpo' for 'none', 'grpo_batch_std' for 'batch'"),
    "multi_objective_aggregation": ("sum_then_normalize", "estimator 'gdpo' for 'normalize_then_sum'"),
}
"""GRPOConfig fields that choose TRL's own advantage: with an rllm estimator only their defaults are accepted."""

TRL_LOSS_KEYS = tuple(
    dict.fromkeys(
        option.name for _, _, options, _ in LOSSES.values() for option in options if option.name != "loss_type"
    )
)
"""GRPOConfig fields that are options of TRL's loss types (``epsilon``, ``delta``, ``vespo_k_pos``, ...)."""

MODEL_INPUTS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)
"""The multimodal inputs TRL's ``_compute_loss`` forwards to the policy, forwarded the same way here."""


def _default(name: str) -> Any:
    return next(f.default for f in fields(GRPOConfig) if f.name == name)


class RLLMGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` whose advantages come from rllm's estimator ``estimator`` and, when ``loss`` names
    one, whose loss is rllm's loss ``loss``; every other argument is ``GRPOTrainer``'s.

    ``estimator_options`` are the estimator's options by rllm's names (``rllm estimators NAME``);
    estimators that take numerics default to ``preset="trl"``. ``loss_options`` are the loss's
    options (``rllm losses NAME``); an option the loss declares under a ``GRPOConfig`` field's name
    (``epsilon`` of ``trl.dapo``) is read from the config unless given here. ``loss_agg_mode``
    overrides the loss's aggregation. Names, options and what TRL can give are checked before the
    trainer is built.
    """

    def __init__(
        self,
        *args: Any,
        estimator: str = "grpo",
        estimator_options: Mapping[str, Any] | None = None,
        loss: str | None = None,
        loss_options: Mapping[str, Any] | None = None,
        loss_agg_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.rllm_estimator = estimator
        self.rllm_estimator_options = dict(estimator_options or {})
        self._rllm_entry = _outcome_entry(estimator)
        if loss is not None:
            loss_entry(loss)  # an unknown name fails before the model is built
        self.rllm_states = EstimatorStates()
        self._rllm_scored: tuple[torch.Tensor, list[Any]] | None = None
        given = kwargs.get("args", args[2] if len(args) > 2 else None)  # GRPOTrainer(model, reward_funcs, args, ...)
        config = given if isinstance(given, GRPOConfig) else None  # else TRL makes its default config
        if config is not None:  # checked before TRL loads models
            self.rllm_loss = _checked_settings(config, loss, loss_options, loss_agg_mode)
        super().__init__(*args, **kwargs)
        if config is None:
            self.rllm_loss = _checked_settings(self.args, loss, loss_options, loss_agg_mode)
        self._rllm_dry_run()

    # --- advantages -------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs: Any, prompts: list[Any], completions: Any, completion_ids_list: Any) -> Any:
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._rllm_scored = (rewards_per_func, gather_object(list(prompts)))
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        if self._rllm_scored is None:  # TRL scores every batch it generates; a later TRL may not
            raise RuntimeError("rllm's TRL bridge saw no rewards for this batch: TRL's scoring path has changed.")
        rewards_per_func, prompts = self._rllm_scored
        self._rllm_scored = None
        mask = output["completion_mask"] * output.get("tool_mask", 1)
        lengths = self.accelerator.gather(mask.sum(dim=1))
        mode = "train" if self.model.training else "eval"
        generations = self.num_generations if mode == "train" else self.num_generations_eval
        advantages = self.rllm_advantages(rewards_per_func, lengths, prompts, generations)
        local = len(output["advantages"])
        start = self.accelerator.process_index * local
        output["advantages"] = advantages[start : start + local].to(output["advantages"].device)
        logged = self._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):  # TRL logged its own advantages last
            logged.pop()
        logged.extend(advantages.tolist())
        return output

    def rllm_advantages(
        self, rewards_per_func: torch.Tensor, lengths: torch.Tensor, prompts: list[Any], generations: int
    ) -> torch.Tensor:
        """The estimator's advantage of every completion of the generation batch (all processes), in TRL's order.

        ``rewards_per_func`` is TRL's ``(completions, reward functions)`` matrix, NaN where a
        function returned None; ``prompts`` one per completion; completions ``i`` with equal
        ``i // generations`` are one group (TRL's layout).
        """
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)  # TRL's sum, in TRL's float32
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        resolved = resolve_plugins(self._rllm_entry)  # this step's one lookup: kernels and declared fields
        batch = AdvantageBatch(
            _numpy(rewards),
            _group_labels(prompts, generations),
            sources={
                "response_lengths": lambda: _numpy(lengths),
                "reward_components": lambda: _numpy(rewards_per_func),
            },
            kernels=resolved.kernels,
            fields=resolved.fields,
        )
        return self._rllm_run(batch, self.rllm_states.get(self.rllm_estimator, self._rllm_entry.target, STATE_ROLE))

    def _rllm_run(self, batch: AdvantageBatch, state: Any) -> torch.Tensor:
        entry = self._rllm_entry
        ambient = {"preset": PRESET} if entry.declaration.default_preset is None else {}
        options = dict(self.rllm_estimator_options)
        if "component_weights" in entry.declaration.names() and "component_weights" not in options:
            options["component_weights"] = [float(w) for w in self.reward_weights]  # TRL's reward_weights
        advantages = run_estimator(entry, batch, options, ambient=ambient, state=state, nonfinite_rewards="exclude")
        if isinstance(advantages, Ragged):
            raise EstimatorOutputError(
                f"rllm estimator {entry.name!r} returned per-step advantages; TRL's GRPOTrainer takes one advantage "
                "per completion (use an outcome estimator)."
            )
        return torch.tensor(np.asarray(advantages), dtype=torch.float32)

    def _rllm_dry_run(self) -> None:
        """Run the estimator once on a made-up group, so that its options fail now, not after the first generation."""
        functions = len(self.reward_funcs)
        size = max(int(self.num_generations), 2)
        rewards = np.arange(size, dtype=np.float64) % 2
        batch = AdvantageBatch(
            rewards,
            np.zeros(size, dtype=np.intp),
            sources={
                "response_lengths": lambda: np.ones(size),
                "reward_components": lambda: np.repeat(rewards[:, None], functions, axis=1),
            },
        )
        self._rllm_run(batch, None)

    # --- loss -------------------------------------------------------------------------------------------

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        if self.rllm_loss is None:
            return super()._compute_loss(model, inputs)
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        log_probs, entropy, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            completion_ids.size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{key: inputs.get(key) for key in MODEL_INPUTS},
        )
        old = inputs.get("old_per_token_logps")
        advantages = inputs["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        weights = inputs.get("importance_sampling_ratio")  # vLLM's correction, (B, T) or (B, 1)
        loss, metrics = self.rllm_loss.compute(
            log_probs=log_probs,
            old_log_probs=log_probs.detach() if old is None else old,
            advantages=advantages.expand_as(log_probs),
            response_mask=mask,
            ref_log_probs=inputs.get("ref_per_token_logps"),
            rollout_log_probs=inputs.get("sampling_per_token_logps"),
            rollout_is_weights=None if weights is None else weights.expand_as(log_probs),
            entropy=entropy,
            **loss_counts(self, inputs, mask),
        )
        mode = "train" if self.model.training else "eval"
        if self.aux_loss_enabled:  # as TRL adds a MoE router's load-balancing loss
            loss = loss + self.router_aux_loss_coef * aux_loss / self._rllm_accumulation(mode)
        self._metrics[mode]["entropy"].append(self._rllm_token_mean(entropy, mask))
        if self.beta:  # TRL's kl metric: the token mean of k3 (the loss's own kl_loss is aggregated by its mode)
            ref = inputs["ref_per_token_logps"]
            self._metrics[mode]["kl"].append(self._rllm_token_mean(kl_penalty(log_probs, ref, "low_var_kl"), mask))
        every = gather_object([dict(metrics)])  # one collective, whatever keys each process's batch gave
        for key in sorted({key for ranked in every for key in ranked}):
            values = [ranked[key] for ranked in every if key in ranked]
            self._metrics[mode][key].append(sum(values) / len(values))
        return loss

    def _rllm_accumulation(self, mode: str) -> int:
        return int(self.current_gradient_accumulation_steps) if mode == "train" else 1

    def _rllm_token_mean(self, values: torch.Tensor, mask: torch.Tensor) -> float:
        """The mean of ``values`` over the response tokens of every process, as TRL logs ``entropy`` and ``kl``."""
        selected = mask.bool()
        totals = torch.stack([torch.where(selected, values.detach(), 0.0).sum(), selected.sum().to(values.dtype)])
        totals = self.accelerator.reduce(totals, reduction="sum")
        return (totals[0] / totals[1].clamp(min=1.0)).item()


def loss_counts(trainer: Any, inputs: Mapping[str, Any], mask: torch.Tensor) -> dict[str, float]:
    """The normalisers of TRL's loss types, as :func:`rllm.losses.compute_policy_loss`'s global counts.

    TRL scales each micro-batch's loss for gradient accumulation itself, so the counts span the
    accumulation window on this process: ``batch_num_tokens`` its response tokens (TRL's
    ``dapo``: the generation batch's ``num_items_in_batch`` over processes, times the window
    over ``steps_per_generation``; ``trl.bnpo``: this micro-batch's tokens times the window),
    ``global_batch_size`` its sequences, ``loss_scale_factor`` ``max_completion_length``. In
    evaluation there is neither accumulation nor a split of the batch.
    """
    training = bool(trainer.model.training)
    window = int(trainer.current_gradient_accumulation_steps) if training else 1
    steps = int(trainer.args.steps_per_generation) if training else 1
    if trainer.rllm_loss.name == PREFIX + "bnpo":
        tokens = float(mask.sum()) * window
    else:
        tokens = float(inputs["num_items_in_batch"]) / trainer.accelerator.num_processes * window / steps
    return {
        "batch_num_tokens": max(tokens, 1.0),
        "global_batch_size": float(mask.shape[0] * window),
        "loss_scale_factor": float(trainer.max_completion_length),
    }


def _outcome_entry(name: str) -> Any:
    """The estimator ``name`` (rllm's close-match error if unknown), refused when it needs what TRL does not compute."""
    entry = resolve_plugins(name).entry()
    missing = [field for field in entry.requires if field not in FROM_TRL]
    if missing:
        given = "; ".join(f"{key} from {what}" for key, what in FROM_TRL.items())
        raise MissingInputError(
            f"rllm estimator {name!r} needs {', '.join(map(repr, missing))}, which TRL's GRPOTrainer does not "
            f"compute; inside TRL an estimator gets rewards, groups of num_generations, {given}."
        )
    return entry


def _checked_settings(
    args: GRPOConfig, loss: str | None, options: Mapping[str, Any] | None, agg_mode: str | None
) -> LossSettings | None:
    """GRPOConfig checked against the rllm parts it no longer chooses; the rllm loss's settings, if one is named."""
    _refuse_trl_advantage_keys(args)
    return None if loss is None else _loss_settings(args, loss, dict(options or {}), agg_mode)


def _refuse_trl_advantage_keys(args: GRPOConfig) -> None:
    for key, (default, instead) in ADVANTAGE_KEYS.items():
        if getattr(args, key) != default:
            raise ConfigError(
                f"GRPOConfig.{key}={getattr(args, key)!r} chooses TRL's own advantage, which the rllm estimator "
                f"replaces; leave it at {default!r} and choose the rllm {instead}."
            )


def _loss_settings(args: GRPOConfig, name: str, given: dict[str, Any], agg_mode: str | None) -> LossSettings:
    """The rllm loss's checked settings: its options, GRPOConfig's loss fields where they mean something, KL."""
    declared = {option.name for option in loss_entry(name).options}
    loss_type = args.loss_type
    if loss_type != _default("loss_type") and name != PREFIX + loss_type:
        raise ConfigError(
            f"GRPOConfig.loss_type={loss_type!r} chooses TRL's own loss, which the rllm loss {name!r} replaces; "
            f"leave loss_type at its default or name loss='{PREFIX}{loss_type}'."
        )
    options = {}
    for key in TRL_LOSS_KEYS:
        value = getattr(args, key)
        if key in declared:
            options[key] = value
        elif value != _default(key):
            raise ConfigError(
                f"GRPOConfig.{key}={value!r} is an option of TRL's own loss; the rllm loss {name!r} does not take "
                f"it (its options, by rllm's names: {', '.join(sorted(declared)) or 'none'}); leave it at its default."
            )
    options.update(given)
    _, options, mode = resolve_loss_options(name, options, agg_mode, "loss_agg_mode")
    if mode == "prompt-mean":  # TRL shuffles a generation batch's completions across its micro-batches
        raise LossOptionError(
            "loss_agg_mode='prompt-mean' needs each micro-batch's share of every prompt's tokens, which TRL's "
            "shuffled micro-batches do not keep; choose another mode (token-mean, seq-mean-token-mean, ...)."
        )
    if args.beta and args.use_bias_correction_kl:
        raise ConfigError(
            "GRPOConfig.beta > 0 with use_bias_correction_kl=True weights TRL's KL term by the importance ratio, which "
            "rllm's KL term does not; set use_bias_correction_kl=False (or beta=0)."
        )
    if args.use_adaptive_entropy:
        raise ConfigError(
            "GRPOConfig.use_adaptive_entropy=True is TRL's own entropy controller, which an rllm loss does not run; "
            "set a fixed entropy_coef instead."
        )
    if args.entropy_coef:
        warnings.warn(
            f"GRPOConfig.entropy_coef={args.entropy_coef} reaches the rllm loss as its entropy bonus, aggregated by "
            f"the loss's mode ({mode}), not TRL's token mean.",
            RLLMWarning,
            stacklevel=3,
        )
    settings = LossSettings(
        name=name,
        options=options,
        agg_mode=mode,
        kl_coef=float(args.beta),
        kl_kind="low_var_kl",
        off_policy_mask_threshold=args.off_policy_mask_threshold,
        entropy_coeff=float(args.entropy_coef),
    )
    settings.checked  # noqa: B018  (the KL and correction settings, checked before training)
    return settings


def _group_labels(prompts: list[Any], generations: int) -> list[Any]:
    """One label per completion: its prompt (TRL's group of ``generations``), numbered when a prompt repeats.

    A prompt is the same task from one step to the next, which per-task state (``ema_baseline``) needs;
    two groups of one batch with the same prompt stay two groups, as in TRL.
    """
    heads = [repr(prompts[start]) for start in range(0, len(prompts), generations)]
    repeated = {head for head in heads if heads.count(head) > 1}
    labels: list[Any] = []
    for block, head in enumerate(heads):
        label = (head, block) if head in repeated else head
        labels.extend([label] * min(generations, len(prompts) - block * generations))
    return labels


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to(device="cpu", dtype=torch.float64).numpy()
