"""Trajectories as Tinker ``Datum`` objects: a multi-turn trajectory's steps merged into as few sequences as can be.

The rule is upstream rLLM's (``trajectory_to_datums``): a step whose prompt starts with
everything the sequence holds so far (the earlier prompts and replies, token for token) extends
it by the new prompt tokens and its reply; any other step closes the sequence and starts the
next one. Prompt and observation tokens get log-prob 0, advantage 0 and mask 0; reply tokens
their sampled log-probs, their advantage and mask 1. The datum is the sequence shifted by one
(inputs all but the last token, targets all but the first); the mask is not sent (Tinker's
losses take ``target_tokens``, ``logprobs`` and ``advantages``; a 0 advantage adds nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rllm.errors import DataError, TrainerError
from rllm.types import Trajectory


@dataclass
class MergedSequence:
    """One datum's worth of tokens, before the shift: every list has one entry per token."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    mask: list[float] = field(default_factory=list)

    def extend(self, prompt: list[int], reply: list[int], logprobs: list[float], advantages: list[float]) -> None:
        self.tokens += prompt + reply
        self.logprobs += [0.0] * len(prompt) + logprobs
        self.advantages += [0.0] * len(prompt) + advantages
        self.mask += [0.0] * len(prompt) + [1.0] * len(reply)

    def shifted(self) -> dict[str, list[Any]]:
        """What one datum carries: ``model_input`` (all but the last token) and the per-target inputs."""
        return {
            "model_input": self.tokens[:-1],
            "target_tokens": self.tokens[1:],
            "logprobs": self.logprobs[1:],
            "advantages": self.advantages[1:],
            "mask": self.mask[1:],
        }


def _advantages(step: Any, where: str) -> list[float]:
    advantage = step.advantage
    if advantage is None:
        raise TrainerError(f"{where} has no advantage: the update ran before stage 6 computed the advantages.")
    if isinstance(advantage, list):
        if len(advantage) != len(step.response_ids):
            raise DataError(
                f"{where} has {len(advantage)} per-token advantages for {len(step.response_ids)} response ids; "
                "give one per response token (or one number)."
            )
        return [float(a) for a in advantage]
    return [float(advantage)] * len(step.response_ids)


def trajectory_sequences(trajectory: Trajectory, name: str = "trajectory") -> list[MergedSequence]:
    """``trajectory``'s steps merged by upstream's rule (module docstring); ``name`` names it in errors."""
    sequences: list[MergedSequence] = []
    current = MergedSequence()
    for index, step in enumerate(trajectory.steps):
        where = f"{name} step {index}"
        prompt = [int(t) for t in step.prompt_ids]
        reply = [int(t) for t in step.response_ids]
        if len(step.logprobs) != len(reply):
            raise DataError(
                f"{where} has {len(step.logprobs)} log-probs for {len(reply)} response ids; the Tinker backend trains "
                "on the sampler's log-probs, one per sampled token."
            )
        if not reply:
            raise DataError(f"{where} has no response ids; every trained step needs the tokens it sampled.")
        advantages = _advantages(step, where)
        held = current.tokens
        if held and prompt[: len(held)] == held:
            prompt = prompt[len(held) :]
        elif held:
            sequences.append(current)
            current = MergedSequence()
        current.extend(prompt, reply, [float(lp) for lp in step.logprobs], advantages)
    if current.tokens:
        sequences.append(current)
    return sequences


def to_datum(sequence: MergedSequence) -> Any:
    """The ``tinker.Datum`` of one merged sequence (the mask stays here: it is not a Tinker loss input)."""
    import numpy as np
    from tinker import types

    parts = sequence.shifted()
    return types.Datum(
        model_input=types.ModelInput.from_ints(parts["model_input"]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.asarray(parts["target_tokens"], dtype=np.int64)),
            "logprobs": types.TensorData.from_numpy(np.asarray(parts["logprobs"], dtype=np.float32)),
            "advantages": types.TensorData.from_numpy(np.asarray(parts["advantages"], dtype=np.float32)),
        },
    )
