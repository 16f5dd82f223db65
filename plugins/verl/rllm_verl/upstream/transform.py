"""rLLM's ``transform_episodes_to_dataproto``: episodes as the ``DataProto`` verl's PPO trainer takes.

A trajectory's steps merge by rLLM's cumulative-prefix rule: a step whose prompt starts with the
row so far (prompt, replies and observations, token for token) adds its new prompt tokens
(mask 0, log-prob 0) and its reply (mask 1) to the row's response; any other step starts a row.
Prompts are left-padded to ``max_prompt_length``, responses right-padded to
``max_response_length``; rewards sit on a row's last response token (verl's token-level layout).
``rollout_log_probs`` is there only when every row has the sampler's log-probs. rLLM cuts a row
that is too long without a word; here that is a one-line :class:`~rllm.errors.DataError` naming
the episode and the length key. Multimodal inputs (a rollout engine with a ``processor``) and
router-replay matrices are not carried.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rllm.errors import DataError
from rllm.types import Episode, Step, Trajectory
from rllm_verl.rows import verl_fields
from rllm_verl.upstream.dataclass import AccumulatedData, ProcessedStepData


def _row(steps: list[Step], name: str) -> ProcessedStepData:
    """One row of ``steps`` that extend one another (the first step's prompt, then the rest as response)."""
    prompt = [int(t) for t in steps[0].prompt_ids]
    response: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for position, step in enumerate(steps):
        held = len(prompt) + len(response)
        new = [int(t) for t in step.prompt_ids][held:] if position else []
        reply = [int(t) for t in step.response_ids]
        response += new + reply
        mask += [0] * len(new) + [1] * len(reply)
        logprobs += [0.0] * len(new) + ([float(lp) for lp in step.logprobs] if step.logprobs else [])
    complete = len(logprobs) == len(response) and all(step.logprobs for step in steps)
    return ProcessedStepData(
        prompt=torch.tensor(prompt, dtype=torch.long),
        response=torch.tensor(response, dtype=torch.long),
        mask=torch.tensor(mask, dtype=torch.long),
        step_reward=float(steps[-1].reward or 0.0),
        step_id=name,
        logprobs=logprobs if complete else None,
    )


def merged_rows(trajectory: Trajectory, name: str) -> list[ProcessedStepData]:
    """``trajectory``'s rows by the cumulative-prefix rule (module docstring); ``name`` ids them."""
    groups: list[list[Step]] = []
    held: list[int] = []
    for step in trajectory.steps:
        prompt = [int(t) for t in step.prompt_ids]
        if groups and held and prompt[: len(held)] == held:
            groups[-1].append(step)
        else:
            groups.append([step])
        held = prompt + [int(t) for t in step.response_ids]
    return [_row(steps, f"{name}:{index}" if len(groups) > 1 else name) for index, steps in enumerate(groups)]


def _padded(rows: Sequence[torch.Tensor], width: int, pad: float, left: bool) -> torch.Tensor:
    """``rows`` in one tensor ``width`` wide, padded with ``pad`` on the left or the right."""
    out = torch.full((len(rows), width), pad, dtype=rows[0].dtype)
    for index, row in enumerate(rows):
        if left:
            out[index, width - len(row) :] = row
        else:
            out[index, : len(row)] = row
    return out


def _check_lengths(data: AccumulatedData, max_prompt_length: int, max_response_length: int) -> None:
    for index, (prompt, response) in enumerate(zip(data.prompts, data.responses, strict=True)):
        sizes = ((len(prompt), max_prompt_length, "prompt"), (len(response), max_response_length, "response"))
        for size, limit, key in sizes:
            if size > limit:
                raise DataError(
                    f"Row {data.trajectory_ids[index]} has a {key} of {size} tokens, over max_{key}_length={limit}; "
                    f"raise max_{key}_length (rllm.data.max_{key}_length) or shorten the episode."
                )


def transform_episodes_to_dataproto(
    episodes: list[Episode], rollout_engine: Any, max_prompt_length: int, max_response_length: int
) -> Any:
    """The ``DataProto`` of ``episodes``: one row per merged run of steps, padded as the module docstring says."""
    from verl import DataProto

    if getattr(rollout_engine, "processor", None) is not None:
        raise DataError("transform_episodes_to_dataproto does not carry multimodal inputs; use a text-only engine.")
    pad = int(rollout_engine.tokenizer.pad_token_id)
    data = AccumulatedData()
    episode_ids: list[str] = []
    for episode in episodes:
        for trajectory in episode.trajectories:
            name = f"{episode.id}/{trajectory.name}"
            rows = merged_rows(trajectory, name)
            for index, row in enumerate(rows):
                reward = float(trajectory.reward or 0.0)
                data.add_step(row, name, reward, len(trajectory.steps), index == len(rows) - 1, trajectory.name)
                episode_ids.append(str(episode.id))
    if not len(data):
        raise DataError("transform_episodes_to_dataproto was given no steps; every episode's trajectories were empty.")
    _check_lengths(data, max_prompt_length, max_response_length)
    prompts = _padded(data.prompts, max_prompt_length, pad, left=True)
    responses = _padded(data.responses, max_response_length, pad, left=False)
    lengths = [len(r) for r in data.responses]
    prompt_attention = _padded([torch.ones_like(p) for p in data.prompts], max_prompt_length, 0, left=True)
    response_attention = _padded([torch.ones_like(r) for r in data.responses], max_response_length, 0, left=False)
    step_rewards = torch.zeros((len(data), max_response_length))
    traj_rewards = torch.zeros((len(data), max_response_length))
    for row, length in enumerate(lengths):
        step_rewards[row, length - 1], traj_rewards[row, length - 1] = data.step_rewards[row], data.traj_rewards[row]
    response_mask = _padded(data.traj_mask, max_response_length, 0, left=False)
    tensors = verl_fields(prompts, prompt_attention, responses, response_attention, response_mask)
    tensors.update({"step_rewards": step_rewards, "traj_rewards": traj_rewards})
    if len(data.rollout_logprobs) == len(data):
        tensors["rollout_log_probs"] = _padded(data.rollout_logprobs, max_response_length, 0.0, left=False)
    non_tensors = {
        "episode_ids": np.array(episode_ids, dtype=object),
        "trajectory_ids": np.array(data.trajectory_ids, dtype=object),
        "step_ids": np.array(data.step_ids, dtype=object),
        "step_nums": np.array(data.step_nums),
        "is_last_step": np.array(data.is_last_step),
        "group_roles": np.array(data.group_roles, dtype=object),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
