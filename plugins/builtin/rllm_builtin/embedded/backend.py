"""The embedded backend: trains :class:`SoftmaxPolicy` on the CPU, in the trainer's process.

It is the default backend, so ``rllm train`` works on any laptop, and it is the reference
for backend authors: every stage of :class:`rllm.trainer.backend_protocol.BackendProtocol` does real
work here. Settings live under ``rllm.embedded`` and ``rllm.data``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from rllm.config import unhonoured_keys
from rllm.engine import Generation, RolloutEngine
from rllm.errors import CheckpointError, ConfigError, RLLMWarning, TrainerError
from rllm.losses import loss_entry
from rllm.tasks import EOS, VOCAB, ArithmeticWorkflow, build_tasks, decode
from rllm.trainer import BackendProtocol, TaskLoader, TaskSetup, TrainerState, scheduled_lr, task_loader
from rllm.types import Step
from rllm_builtin.embedded.policy import REGISTRY_LOSSES, LossTerms, SoftmaxPolicy, policy_loss

POLICY_FILE = "policy.npz"
STATE_FILE = "embedded.json"


_NO_REFERENCE = "it keeps no reference policy, so there is no KL term"
_CLIP = "its PPO clip range is rllm.embedded.clip_ratio_low / clip_ratio_high"
_SAME_POLICY = "it samples and trains with the same policy"
_UNHONOURED: dict[str, str] = {
    "rllm.algorithm.use_kl_loss": _NO_REFERENCE,
    "rllm.algorithm.eps_clip": _CLIP,
    "rllm.algorithm.eps_clip_high": _CLIP,
    "rllm.algorithm.loss_agg_mode": "it sums token losses",
    "rllm.algorithm.loss_options": "its numpy losses take their clip ranges from rllm.embedded",
    "rllm.algorithm.router_replay": "its policy has no mixture-of-experts router",
    "rllm.algorithm.rollout_correction.tis_mode": _SAME_POLICY,
    "rllm.algorithm.rollout_correction.bypass_mode": _SAME_POLICY,
    "rllm.algorithm.rollout_correction.rollout_rs": _SAME_POLICY,
    "rllm.algorithm.rollout_correction.off_policy_mask_threshold": _SAME_POLICY,
    "rllm.algorithm.entropy_coeff": "its numpy losses have no entropy term",
    "rllm.stepwise_advantage.enable": (
        "it always trains every step as its own sample with its trajectory's advantage (what the switch turns "
        "on in verl), so the switch changes nothing"
    ),
}
"""rLLM's keys the embedded backend cannot honour when set (key: why); the keys that act only with one of these
switches (kl_loss_coef, tis_cap, ...) are said by the switch rule of :mod:`rllm.config.unhonoured`."""


class EmbeddedRolloutEngine(RolloutEngine):
    """Samples responses from the current policy, token by token, until EOS or ``max_tokens``.

    It is plain data (the policy's weights, a generator, the temperature), so the Ray executor
    sends workers a copy of it per batch: the weights do not change while a batch rolls out.
    """

    def __init__(self, policy: SoftmaxPolicy, rng: np.random.Generator, temperature: float) -> None:
        self.policy = policy
        self.rng = rng
        self.temperature = temperature

    def for_episode(self, seed: int) -> EmbeddedRolloutEngine:
        """The same policy with the episode's own generator, so its samples do not depend on scheduling."""
        return EmbeddedRolloutEngine(self.policy, np.random.default_rng(seed), self.temperature)

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = 1) -> Generation:
        """Token by token until EOS or ``max_tokens`` (None: one token, what the built-in tasks ask)."""
        limit = 1 if max_tokens is None else max_tokens
        context = list(prompt_ids)
        response: list[int] = []
        logprobs: list[float] = []
        while len(response) < limit:
            token, logprob = self.policy.sample(context + response, self.rng, self.temperature)
            response.append(token)
            logprobs.append(logprob)
            if token == EOS:
                break
        return Generation(response, logprobs, decode(response), "stop" if response[-1:] == [EOS] else "length")


@dataclass
class TokenBatch:
    """One row per response token of the trajectory groups; advantages are read after stage 6."""

    features: np.ndarray
    tokens: np.ndarray
    rollout_logprobs: np.ndarray
    steps: list[Step]
    token_index: np.ndarray
    losses: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))
    """The policy loss of each token's role (``rllm.algorithm.loss_fn_map``, else ``loss_fn``)."""
    old_logprobs: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def advantages(self) -> np.ndarray:
        values = np.empty(len(self.tokens))
        for row, (step, index) in enumerate(zip(self.steps, self.token_index, strict=True)):
            advantage = step.advantage
            if advantage is None:
                raise TrainerError("A step reached the policy update without an advantage; stage 6 did not run.")
            per_token = np.ravel(advantage)  # a scalar broadcast to every token, or one value per token
            values[row] = per_token[index] if per_token.size > 1 else per_token[0]
        return values


def _losses(
    kinds: np.ndarray, logp: np.ndarray, old_logp: np.ndarray, advantages: np.ndarray, clip_low: float, clip_high: float
) -> LossTerms:
    """Per-token loss terms when tokens of different roles use different losses (one call per loss)."""
    first = kinds[0] if len(kinds) else "ppo"
    if (kinds == first).all():
        return policy_loss(str(first), logp, old_logp, advantages, clip_low, clip_high)
    loss, d_logp, clipped = np.empty_like(logp), np.empty_like(logp), np.zeros(len(logp), dtype=bool)
    for kind in dict.fromkeys(kinds.tolist()):
        rows = kinds == kind
        terms = policy_loss(str(kind), logp[rows], old_logp[rows], advantages[rows], clip_low, clip_high)
        loss[rows], d_logp[rows], clipped[rows] = terms.loss, terms.d_logp, terms.clipped
    return LossTerms(loss, d_logp, clipped)


def _numpy_loss(name: str, where: str) -> str:
    """The numpy kind that runs registry loss ``name``; unknown, or a loss it has no numpy twin of: a named error."""
    entry = loss_entry(name)
    canonical = entry.alias_of or entry.name
    if canonical in REGISTRY_LOSSES and entry.source.kind == "builtin":
        return REGISTRY_LOSSES[canonical]
    raise ConfigError(
        f"{where} is not supported by the embedded backend: {canonical!r} of {entry.source.describe()} "
        f"is a torch loss its numpy update cannot run; it runs {', '.join(REGISTRY_LOSSES)} (and their aliases, see "
        "`rllm losses`). Use a torch backend for this loss."
    )


class EmbeddedBackend(BackendProtocol):
    """Policy-gradient training of a numpy softmax policy on the built-in arithmetic tasks."""

    def __init__(self, config: DictConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        options = config.rllm.embedded
        self.options = options
        self.data = config.rllm.data
        self.policy = SoftmaxPolicy(len(VOCAB), int(options.n_features))
        seed = int(options.seed)
        self.sample_rng = np.random.default_rng(seed)
        self.update_rng = np.random.default_rng(seed + 1)
        self.loss_fn = self.algorithm.loss_fn or "ppo"
        # role -> policy loss, from loss_fn_map and (estimator, loss) pairs of the run's estimator_map
        self.role_losses = {role: str(self.algorithm.loss_fn_for(role)) for role in self.algorithm.loss_fn_map}

    @property
    def loss_description(self) -> str:
        low, high = float(self.options.clip_ratio_low), float(self.options.clip_ratio_high)
        clip = f"clip_ratio_low={low!r}, clip_ratio_high={high!r}"
        roles = "".join(f", role {role}: {loss}" for role, loss in sorted(self.role_losses.items()))
        return f"{self.loss_fn} ({clip}; token-sum){roles}"

    def validate_config(self) -> None:
        self.loss_kind = _numpy_loss(self.loss_fn, f"rllm.algorithm.loss_fn={self.loss_fn!r}")
        self.role_kinds = {
            role: _numpy_loss(loss, f"The policy loss {loss!r} of role {role!r} (rllm.algorithm.loss_fn_map)")
            for role, loss in self.role_losses.items()
        }
        for key in ("lr", "temperature"):
            if not float(self.options[key]) > 0:
                raise ConfigError(f"rllm.embedded.{key} must be positive, got {self.options[key]}.")
        for key in ("ppo_epochs", "mini_batches"):
            if int(self.options[key]) < 1:
                raise ConfigError(f"rllm.embedded.{key} must be at least 1, got {self.options[key]}.")
        for key in ("train_batch_size", "val_batch_size"):
            size = self.data[key]
            if size is not None and int(size) < 1:
                raise ConfigError(f"rllm.data.{key} must be at least 1 (or null for val_batch_size), got {size}.")
        if self.algorithm.use_kl_in_reward:
            raise ConfigError(
                "rllm.algorithm.use_kl_in_reward=true is not supported by the embedded backend: it keeps no "
                "reference policy to measure the KL against; use rllm.backend=transformers or set it to false."
            )
        self._warn_unhonoured()

    def _warn_unhonoured(self) -> None:
        """rLLM's keys this backend has no use for: said once per run, never silently ignored."""
        for key, value in unhonoured_keys(self.config, _UNHONOURED).items():
            warnings.warn(
                f"{key}={value!r} has no effect with the embedded backend: {_UNHONOURED[key]}.",
                RLLMWarning,
                stacklevel=2,
            )

    def builtin_task(self) -> TaskSetup:
        tasks = build_tasks([str(name) for name in self.options.tasks])
        return TaskSetup(workflow_class=ArithmeticWorkflow, train_dataset=tasks, val_dataset=tasks)

    def init_rollout_engine(self, **kwargs: Any) -> EmbeddedRolloutEngine:
        return EmbeddedRolloutEngine(self.policy, self.sample_rng, float(self.options.temperature))

    def get_dataloader(self, dataset: Sequence[Any] | None, trainer_state: TrainerState) -> TaskLoader:
        return task_loader(self.config, "embedded", dataset, trainer_state, int(self.options.seed))

    # -- stages 4, 5 and 7 -------------------------------------------------------------------
    def transform_to_backend_batch(self, trainer_state: TrainerState) -> TokenBatch:
        features, tokens, logprobs, steps, index, losses = [], [], [], [], [], []
        for group in trainer_state.trajectory_groups:
            loss = self.role_kinds.get(group.group_role, self.loss_kind)
            for trajectory in group.trajectories:
                for step in trajectory.steps:
                    context = list(step.prompt_ids)
                    for i, token in enumerate(step.response_ids):
                        features.append(self.policy.features(context))
                        tokens.append(token)
                        logprobs.append(step.logprobs[i] if step.logprobs else np.nan)
                        steps.append(step)
                        index.append(i)
                        losses.append(loss)
                        context.append(token)
        if not tokens:
            raise TrainerError("The trajectory groups hold no response tokens; the workflow produced empty steps.")
        batch = TokenBatch(np.array(features), np.array(tokens), np.array(logprobs), steps, np.array(index))
        batch.losses = np.array(losses, dtype=object)
        return batch

    async def process_backend_batch(self, trainer_state: TrainerState) -> None:
        """Log-probabilities of the sampled tokens under the policy before the update (PPO's old policy)."""
        batch: TokenBatch = trainer_state.backend_batch
        log_p = self.policy.log_probs(batch.features)
        batch.old_logprobs = log_p[np.arange(len(batch.tokens)), batch.tokens]
        known = ~np.isnan(batch.rollout_logprobs)
        if known.any() and float(self.options.temperature) == 1.0:
            gap = np.abs(batch.old_logprobs[known] - batch.rollout_logprobs[known])
            trainer_state.metrics["actor/rollout_logprob_diff"] = float(gap.mean())

    async def update_policy(self, trainer_state: TrainerState) -> None:
        """``ppo_epochs`` passes over ``mini_batches`` shuffled minibatches of gradient descent.

        The loss is summed over tokens, not averaged: a context's row then moves by the same
        amount whatever else shares the batch, so ``lr`` does not depend on the batch size.
        (Adam was tried and dropped: normalising each row's step turns the zero-mean noise of
        broadcast advantages on multi-step tasks into full-size steps that collapse contexts.)
        """
        batch: TokenBatch = trainer_state.backend_batch
        advantages = batch.advantages()
        n = len(batch.tokens)
        lr = scheduled_lr(float(self.options.lr), self.algorithm, trainer_state.global_step, trainer_state.total_steps)
        clip_low, clip_high = float(self.options.clip_ratio_low), float(self.options.clip_ratio_high)
        losses, clipped, entropies, kls, norms = [], [], [], [], []
        for _ in range(int(self.options.ppo_epochs)):
            order = self.update_rng.permutation(n)
            for rows in np.array_split(order, min(int(self.options.mini_batches), n)):
                log_p = self.policy.log_probs(batch.features[rows])
                probs = np.exp(log_p)
                logp = log_p[np.arange(len(rows)), batch.tokens[rows]]
                terms = _losses(
                    batch.losses[rows], logp, batch.old_logprobs[rows], advantages[rows], clip_low, clip_high
                )
                d_logits = -probs
                d_logits[np.arange(len(rows)), batch.tokens[rows]] += 1.0
                d_logits *= terms.d_logp[:, None]
                grad = self.policy.logit_gradient(batch.features[rows], d_logits)
                self.policy.weights -= lr * grad
                losses.append(terms.loss.mean())
                clipped.append(terms.clipped.mean())
                entropies.append(-(probs * log_p).sum(axis=1).mean())
                kls.append((batch.old_logprobs[rows] - logp).mean())
                norms.append(np.sqrt((grad * grad).sum()))
        trainer_state.metrics.update(
            {
                "actor/loss": float(np.mean(losses)),
                "actor/clip_fraction": float(np.mean(clipped)),
                "actor/entropy": float(np.mean(entropies)),
                "actor/approx_kl": float(np.mean(kls)),
                "actor/grad_norm": float(np.mean(norms)),
                "actor/lr": lr,
                "actor/tokens": float(n),
            }
        )

    # -- checkpoints --------------------------------------------------------------------------
    def save_checkpoint(self, directory: Path) -> None:
        np.savez(directory / POLICY_FILE, weights=self.policy.weights)
        state = {
            "sample_rng": self.sample_rng.bit_generator.state,
            "update_rng": self.update_rng.bit_generator.state,
        }
        (directory / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")

    def load_checkpoint(self, directory: Path) -> None:
        try:
            with np.load(directory / POLICY_FILE, allow_pickle=False) as arrays:  # arrays only, never objects
                weights = arrays["weights"]
            state = json.loads((directory / STATE_FILE).read_text(encoding="utf-8"))
        except (OSError, KeyError, ValueError) as exc:
            raise CheckpointError(
                f"Embedded checkpoint in {str(directory)!r} is unreadable ({exc}); delete it to start over."
            ) from exc
        if weights.shape != self.policy.weights.shape:
            raise CheckpointError(
                f"Checkpoint {str(directory)!r} holds a policy of shape {weights.shape}, but "
                f"rllm.embedded.n_features gives {self.policy.weights.shape}; resume with the same n_features."
            )
        self.policy.weights[...] = weights
        self.sample_rng.bit_generator.state = state["sample_rng"]
        self.update_rng.bit_generator.state = state["update_rng"]
