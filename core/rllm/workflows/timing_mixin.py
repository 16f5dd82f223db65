"""Where an episode's time goes: model calls, environment calls and rewards, per episode, trajectory and step.

Mix :class:`TimingTrackingMixin` in before the workflow base class (``class W(TimingTrackingMixin,
Workflow)``) and call the model through :meth:`~TimingTrackingMixin.timed_llm_call` and the
environment through :meth:`~TimingTrackingMixin.timed_env_call`. Each model call opens a
step; the totals land in ``episode.info["timing"]``, ``trajectory.info["timing"]`` and
``step.info["timing"]`` (rLLM's keys, timestamps in ISO 8601, UTC).

An agent builds its steps from the reply's text (``update_from_model(response)``), so the
ids and log-probs the model sampled would be lost; the mixin keeps each call's
:class:`~rllm.engine.ModelOutput` and gives the k-th one to the k-th step of the episode's
trajectory when there is one trajectory and one step per call (the steps then train on
what was sampled, never on re-tokenised text).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from rllm.engine import ModelOutput, RolloutEngine
from rllm.types import Episode, TerminationReason

__all__ = ["TimingTrackingMixin"]

TOTALS = ("llm_time", "env_time", "reward_time", "total_time")


def _stamp() -> str:
    return datetime.now(timezone.utc).isoformat()


class TimingTrackingMixin:
    """Times a workflow's model, environment and reward work into its episode (rLLM's mixin, same keys)."""

    rollout_engine: RolloutEngine

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._restart_timing(None)

    def _restart_timing(self, started: float | None) -> None:
        self._timing_data: dict[str, Any] = dict.fromkeys(TOTALS, 0.0)
        self._timing_data.update(
            start_time=started,
            end_time=None,
            start_timestamp=None if started is None else _stamp(),
            end_timestamp=None,
        )
        self._step_timings: list[dict[str, Any]] = []
        self._current_step_timing: dict[str, Any] | None = None
        self._model_outputs: list[ModelOutput] = []

    def start_timing(self) -> None:
        """Start the episode's clock (``reset`` calls it), clearing the last episode's times."""
        self._restart_timing(time.monotonic())

    def _close_step(self) -> None:
        step = self._current_step_timing
        if step is not None:
            step.update(step_end_time=time.monotonic(), step_end_timestamp=_stamp())
            self._step_timings.append(step)
            self._current_step_timing = None

    def _open_step(self) -> None:
        self._close_step()
        self._current_step_timing = {
            "llm_time": 0.0,
            "env_time": 0.0,
            "step_start_time": time.monotonic(),
            "step_start_timestamp": _stamp(),
            "step_end_time": None,
            "step_end_timestamp": None,
        }

    def _spent(self, key: str, seconds: float) -> None:
        self._timing_data[key] += seconds
        if self._current_step_timing is not None:
            self._current_step_timing[key] += seconds

    async def timed_llm_call(self, *args: Any, **kwargs: Any) -> ModelOutput:
        """``rollout_engine.get_model_response(*args, **kwargs)``, opening a step and timing it."""
        self._open_step()
        start = time.monotonic()
        try:
            output = await self.rollout_engine.get_model_response(*args, **kwargs)
        finally:
            self._spent("llm_time", time.monotonic() - start)
        self._model_outputs.append(output)
        return output

    async def timed_env_call(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``func(*args, **kwargs)`` (an environment's ``reset`` or ``step``, which may block) in a thread, timed.

        The thread comes from the workflow's ``executor`` when it has one, else asyncio's default pool.
        """
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        try:
            return await loop.run_in_executor(getattr(self, "executor", None), functools.partial(func, *args, **kwargs))
        finally:
            self._spent("env_time", time.monotonic() - start)

    def add_reward_time(self, duration: float) -> None:
        """Count ``duration`` seconds spent computing rewards."""
        self._timing_data["reward_time"] += duration

    def finalize_timing(self) -> dict[str, Any]:
        """Stop the clock; the episode's totals and its start and end timestamps."""
        self._close_step()
        data = self._timing_data
        if data["start_time"] is not None:
            data.update(end_time=time.monotonic(), end_timestamp=_stamp())
            data["total_time"] = data["end_time"] - data["start_time"]
        return {key: data[key] for key in ("start_timestamp", "end_timestamp", *TOTALS)}

    def postprocess_episode(
        self, episode: Episode, termination_reason: TerminationReason | None = None, error: dict[str, Any] | None = None
    ) -> Episode:
        """The workflow's own post-processing (when it has one), then the times written into the episode."""
        totals = self.finalize_timing()
        parent = getattr(super(), "postprocess_episode", None)
        if parent is not None:
            episode = parent(episode, termination_reason, error)
        episode.info["timing"] = totals
        self._attach_model_outputs(episode)
        steps = self._step_timings
        for trajectory in episode.trajectories:
            trajectory.info["num_steps"] = len(trajectory.steps)
            start = end = None
            if trajectory.steps and steps:
                start, end = steps[0]["step_start_timestamp"], steps[-1]["step_end_timestamp"]
            elif trajectory.steps:
                start, end = totals["start_timestamp"], totals["end_timestamp"]
            trajectory.info["timing"] = {**totals, "start_timestamp": start, "end_timestamp": end}
            for i, step in enumerate(trajectory.steps):
                record = steps[i] if i < len(steps) else {}
                step.info["timing"] = {
                    "start_timestamp": record.get("step_start_timestamp"),
                    "end_timestamp": record.get("step_end_timestamp"),
                    "llm_time": record.get("llm_time", 0.0),
                    "env_time": record.get("env_time", 0.0),
                }
        return episode

    def _attach_model_outputs(self, episode: Episode) -> None:
        with_steps = [trajectory for trajectory in episode.trajectories if trajectory.steps]
        if len(with_steps) != 1 or len(with_steps[0].steps) != len(self._model_outputs):
            return
        for step, output in zip(with_steps[0].steps, self._model_outputs, strict=True):
            if step.model_output is None and not step.response_ids:
                step.attach(output)

    def reset(self, task: Any = None, uid: str | None = None) -> Any:
        """Start the clock, then the workflow's own ``reset`` (when it has one)."""
        self.start_timing()
        parent = getattr(super(), "reset", None)
        return None if parent is None else parent(task, uid)
