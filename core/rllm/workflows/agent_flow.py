"""An :class:`~rllm.types.AgentFlow` and its :class:`~rllm.types.Evaluator` as a workflow the trainer runs.

Each episode opens a gateway session (:mod:`rllm.gateway.server`), runs the flow with an
:class:`~rllm.types.AgentConfig` whose ``base_url`` is that session's, and builds the episode
from the calls the gateway recorded: one step per call, each with its ``ModelOutput``. The
evaluator's reward is then written onto every trajectory and its last step. What goes wrong is
an error of the episode, so ``rllm.workflow.failure_policy`` decides what follows: the flow
raised, it made no model call, the evaluator returned something other than an ``EvalOutput``
or a reward that is not a finite number.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import time
import types
from collections.abc import Coroutine, Generator
from concurrent.futures import Executor
from typing import Any

from rllm.agents.flow import AgentFlow
from rllm.engine import RolloutEngine
from rllm.errors import ConfigError, DataError, UserCodeExit, WorkflowError
from rllm.eval.types import EvalOutput, Evaluator
from rllm.gateway import Gateway, Session
from rllm.gateway.server import BLOCKED
from rllm.types import DEFAULT_TRAJ_NAME, AgentConfig, Episode, TerminationReason, Trajectory
from rllm.usercode import call_user, exit_error, is_real_interrupt
from rllm.workflows.workflow import Workflow

__all__ = ["AgentFlowWorkflow", "check_agent_flow", "run_agent_flow"]


def _name(obj: object) -> str:
    kind = obj if isinstance(obj, type) else type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def check_agent_flow(agent_flow: object, evaluator: object, where: str = "AgentTrainer") -> None:
    """Refuse, naming it, a flow without ``run``/``arun`` or an evaluator without ``evaluate`` (before any rollout)."""
    if not any(callable(getattr(agent_flow, name, None)) for name in ("run", "arun")):
        raise ConfigError(
            f"{where}: agent_flow {_name(agent_flow)} has no run(task, config) or arun(task, config) "
            "(rllm.types.AgentFlow)."
        )
    if not callable(getattr(evaluator, "evaluate", None)):
        raise ConfigError(
            f"{where}: evaluator {_name(evaluator)} has no evaluate(task, episode) (rllm.types.Evaluator)."
        )


@types.coroutine
def _watched(coro: Coroutine[Any, Any, Any], session: Session) -> Generator[Any, Any, Any]:
    """``await coro``, with ``session.running_since`` set while the flow's code runs between two of its awaits.

    The gateway reads it to tell a flow that blocks the event loop while waiting for its own call
    (a synchronous client in ``async def arun``: a deadlock) from a loop that is merely busy.
    """
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        session.running_since = time.monotonic()
        try:
            signal = coro.send(sent) if thrown is None else coro.throw(thrown)
        except StopIteration as done:
            return done.value
        finally:
            session.running_since = None
        try:
            sent, thrown = (yield signal), None
        except BaseException as exc:  # a cancellation (the deadline) reaches the flow, as a plain await would hand it
            sent, thrown = None, exc


async def run_agent_flow(
    agent_flow: AgentFlow,
    task: Any,
    config: AgentConfig,
    executor: Executor | None = None,
    session: Session | None = None,
) -> Episode:
    """Run the flow (its ``arun`` on this loop if it has one, else ``run`` on ``executor``) and give its episode.

    A returned :class:`Episode` is kept, a :class:`Trajectory` is wrapped in one, None gives an
    episode of one trajectory without steps (the recorded calls fill it). With the gateway
    ``session`` of the episode, an ``arun`` that blocks the loop waiting for its own call is refused
    that call (see :class:`~rllm.gateway.server.Gateway`) instead of hanging the run.
    """
    arun = getattr(agent_flow, "arun", None)
    if arun is not None and inspect.iscoroutinefunction(arun):
        coro = arun(task, config)
        result = await (coro if session is None else _watched(coro, session))
    else:
        run = functools.partial(call_user, agent_flow.run, task, config)
        result = await asyncio.get_running_loop().run_in_executor(executor, run)
    name = getattr(agent_flow, "name", None) or DEFAULT_TRAJ_NAME
    if isinstance(result, Episode):
        return result
    if isinstance(result, Trajectory):
        return Episode(trajectories=[result])
    if result is None:
        return Episode(trajectories=[Trajectory(name=str(name))])
    raise DataError(
        f"agent flow {_name(agent_flow)} returned a {type(result).__name__}; return an Episode, a Trajectory or None"
    )


class AgentFlowWorkflow(Workflow):
    """One episode of ``agent_flow`` through the ``gateway``, scored by ``evaluator``.

    ``executor`` runs synchronous flows (and the evaluator), one thread per concurrent episode
    at most, so that blocking ``openai.OpenAI`` clients of many episodes wait at once.
    """

    def __init__(
        self,
        rollout_engine: RolloutEngine,
        agent_flow: AgentFlow,
        evaluator: Evaluator,
        gateway: Gateway,
        **kwargs: Any,
    ) -> None:
        super().__init__(rollout_engine, **kwargs)
        self.agent_flow, self.evaluator, self.gateway = agent_flow, evaluator, gateway

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        loop = asyncio.get_running_loop()
        session = self.gateway.open(self.rollout_engine, loop)
        config = AgentConfig(
            base_url=session.base_url,
            model=self.gateway.model,
            session_uid=uid,
            metadata={"session_id": session.id, "seed": self.seed},
            is_validation=bool(getattr(self.rollout_engine, "is_validation", False)),
        )
        flow = _name(self.agent_flow)
        failure: BaseException | None = None
        try:
            episode = await run_agent_flow(self.agent_flow, task, config, self.executor, session)
        except Exception as exc:
            failure = exc
        except BaseException as exc:  # sys.exit() in arun: the flow's failure, under the failure policy
            if is_real_interrupt(exc):
                raise
            failure = exit_error(exc)
        finally:
            steps = self.gateway.close(session)
        if session.termination is not None:  # a call ended the episode (its prompt too long): not the flow's error
            episode = Episode(trajectories=[Trajectory(steps=steps)])
            return self._finish(episode, task, uid, session.termination, None)
        said = session.errors[-1] if session.errors else ""
        refused = (
            f" (the gateway answered: {said})" if said and not (said == BLOCKED and BLOCKED in str(failure)) else ""
        )
        if isinstance(failure, UserCodeExit):
            raise UserCodeExit(f"agent flow {flow} {failure.how}{refused}") from None
        if failure is not None:
            raise WorkflowError(f"agent flow {flow} raised {type(failure).__name__}: {failure}{refused}") from failure
        if not steps and not any(t.steps for t in episode.trajectories):
            if session.errors:
                raise WorkflowError(
                    f"agent flow {flow} made no model call that the gateway answered on task {uid}: "
                    f"{len(session.errors)} call(s) got an error instead, the last: {session.errors[-1]}"
                )
            raise DataError(
                f"agent flow {flow} made no model call through config.base_url on task {uid}; an episode is "
                "trained on the calls it makes there (openai.OpenAI(base_url=config.base_url))"
            )
        empty = [t for t in episode.trajectories if not t.steps]
        if steps and empty:
            empty[0].steps = steps
        elif not episode.trajectories:
            episode.trajectories = [Trajectory(steps=steps)]
        try:
            score = await loop.run_in_executor(self.executor, call_user, self.evaluator.evaluate, task, episode)
        except UserCodeExit as exc:
            raise UserCodeExit(f"evaluator {_name(self.evaluator)} {exc.how}") from None
        return self._finish(episode, task, uid, TerminationReason.ENV_DONE, score)

    def _finish(
        self, episode: Episode, task: Any, uid: str, reason: TerminationReason, score: EvalOutput | None
    ) -> Episode:
        """Write the score onto the episode: each trajectory's reward, its last step's, correctness and signals."""
        episode.id, episode.task, episode.termination_reason = uid, task, reason
        if score is None:
            episode.is_correct = False
            return episode
        evaluator = _name(self.evaluator)
        if not isinstance(score, EvalOutput):
            raise DataError(
                f"evaluator {evaluator} returned a {type(score).__name__}; return an rllm.eval.types.EvalOutput"
            )
        reward = score.reward
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise DataError(
                f"evaluator {evaluator} gave reward {reward!r} on task {uid}; give a finite number (0.0 for a "
                "failed episode)"
            )
        for trajectory in episode.trajectories:
            trajectory.reward = float(reward)
            if trajectory.steps:
                trajectory.steps[-1].reward = float(reward)
        episode.is_correct = bool(score.is_correct)
        episode.metrics = {**episode.metrics, **{signal.name: float(signal.value) for signal in score.signals}}
        return episode
