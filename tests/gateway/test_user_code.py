"""Agent flows, workflows and evaluators are code rllm does not own: sys.exit() in them is an episode error naming
them, a flow that blocks cannot keep the process alive, an ``arun`` that blocks the event loop on its own call is
refused that call instead of deadlocking the run, and malformed HTTP never prints a traceback."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without

skip_module_without("openai", install="pip install 'rllm[test]'")

import openai
from scripted_engine import Scripted
from test_agent_flow import TASKS, Grader, OpenAIFlow

from rllm.errors import RLLMWarning, WorkflowError
from rllm.gateway import Gateway
from rllm.gateway.server import BLOCKED
from rllm.trainer.engine import WorkflowEngine
from rllm.types import AgentConfig, Episode
from rllm.usercode import UserThreads
from rllm.workflows.agent_flow import AgentFlowWorkflow
from rllm.workflows.workflow import Workflow


def _episodes(gateway: Gateway, flow: Any, evaluator: Any = None, policy: str = "fail") -> list[Episode]:
    with ThreadPoolExecutor(4) as threads:
        engine = WorkflowEngine(
            AgentFlowWorkflow,
            {"agent_flow": flow, "evaluator": evaluator or Grader(), "gateway": gateway, "executor": threads},
            Scripted(),
            failure_policy=policy,
        )
        return asyncio.run(engine.execute_tasks(TASKS, [t["uid"] for t in TASKS]))


class Stop(BaseException):
    """A BaseException that is neither an interrupt nor an exit."""


class Exits:
    def run(self, task: dict[str, Any], config: AgentConfig) -> None:
        sys.exit()


class ExitsAsync:
    async def arun(self, task: dict[str, Any], config: AgentConfig) -> None:
        sys.exit(4)


class InterruptsInThread:
    def run(self, task: dict[str, Any], config: AgentConfig) -> None:
        raise KeyboardInterrupt


class RaisesBase:
    async def arun(self, task: dict[str, Any], config: AgentConfig) -> None:
        raise Stop


class ExitingGrader:
    def evaluate(self, task: dict[str, Any], episode: Episode) -> Any:
        sys.exit("bad grade")


@pytest.mark.parametrize(
    ("flow", "evaluator", "said"),
    [
        (Exits(), None, "agent flow test_user_code.Exits called sys.exit(None)"),
        (ExitsAsync(), None, "agent flow test_user_code.ExitsAsync called sys.exit(4)"),
        (InterruptsInThread(), None, "agent flow test_user_code.InterruptsInThread raised KeyboardInterrupt outside"),
        (RaisesBase(), None, "agent flow test_user_code.RaisesBase raised Stop, a BaseException that is not"),
        (OpenAIFlow(), ExitingGrader(), "evaluator test_user_code.ExitingGrader called sys.exit('bad grade')"),
    ],
)
def test_sys_exit_in_a_flow_or_evaluator_is_an_episode_error_naming_it(
    gateway: Gateway, flow: Any, evaluator: Any, said: str
) -> None:
    with pytest.raises(WorkflowError) as failure:
        _episodes(gateway, flow, evaluator)
    message = str(failure.value)
    assert "UserCodeExit: " + said in message and "cannot end the training process" in message
    assert "\n" not in message
    assert _episodes(gateway, flow, evaluator, "drop_group") == []  # the policy decides: here the run goes on


class Quits(Workflow):
    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        sys.exit(2)


def test_sys_exit_in_a_workflow_is_an_episode_error_naming_it() -> None:
    engine = WorkflowEngine(Quits, {}, Scripted(), failure_policy="fail")
    with pytest.raises(WorkflowError, match=r"UserCodeExit: workflow Quits called sys.exit\(2\); code run by rllm"):
        asyncio.run(engine.execute_tasks(TASKS, [t["uid"] for t in TASKS]))


class BlockingClientInArun:
    """The deadlock: the synchronous client inside ``async def arun`` waits on the loop it is blocking."""

    async def arun(self, task: dict[str, Any], config: AgentConfig) -> None:
        client = openai.OpenAI(base_url=config.base_url, api_key="unused", max_retries=0)
        client.chat.completions.create(model=config.model, messages=[{"role": "user", "content": task["question"]}])


def test_an_arun_blocking_the_loop_on_its_own_call_is_refused_that_call_in_bounded_time(gateway: Gateway) -> None:
    started = time.perf_counter()
    with pytest.raises(WorkflowError) as failure:
        _episodes(gateway, BlockingClientInArun())
    assert time.perf_counter() - started < 30
    message = str(failure.value)
    assert "agent flow test_user_code.BlockingClientInArun raised BadRequestError" in message and BLOCKED in message
    assert message.count(BLOCKED) == 1
    right, _ = _episodes(gateway, OpenAIFlow())  # the gateway goes on answering flows that await
    assert right.trajectories[0].steps[0].reward == 1.0


class SwallowsRefusal:
    """Catches the gateway's refusal and returns: no call was answered."""

    def run(self, task: dict[str, Any], config: AgentConfig) -> None:
        client = openai.OpenAI(base_url=config.base_url, api_key="unused", max_retries=0)
        try:
            client.chat.completions.create(model=config.model, messages=[{"role": "user", "content": "x"}], top_p=0.5)
        except openai.BadRequestError:
            return


def test_a_flow_whose_calls_were_all_refused_is_told_why_not_that_it_made_none(gateway: Gateway) -> None:
    with pytest.raises(WorkflowError) as failure:
        _episodes(gateway, SwallowsRefusal())
    message = str(failure.value)
    assert "made no model call that the gateway answered" in message and "Scripted does not take top_p" in message
    assert "made no model call through config.base_url" not in message


def _raw(gateway: Gateway, request: bytes) -> bytes:
    with socket.create_connection((gateway.host, gateway.port), timeout=10) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_malformed_http_is_answered_400_or_dropped_without_a_traceback(
    gateway: Gateway, capfd: pytest.CaptureFixture[str]
) -> None:
    path = b"POST /sessions/x/v1/chat/completions HTTP/1.1\r\nHost: h\r\n"
    deep = b"[" * 100_000 + b"]" * 100_000
    answers = {
        "bad length": _raw(gateway, path + b"Content-Length: abc\r\n\r\n{}"),
        "negative": _raw(gateway, path + b"Content-Length: -5\r\n\r\n{}"),
        "huge": _raw(gateway, path + b"Content-Length: 99999999999\r\n\r\n{}"),
        "deep": _raw(gateway, path + b"Content-Length: %d\r\n\r\n" % len(deep) + deep),
        "not utf-8": _raw(gateway, path + b"Content-Length: 2\r\n\r\n\xff\xfe"),
    }
    assert answers["bad length"].startswith(b"HTTP/1.1 400") and answers["negative"].startswith(b"HTTP/1.1 400")
    assert answers["huge"].startswith(b"HTTP/1.1 413")
    assert answers["deep"].startswith(b"HTTP/1.1 400") and b"nested too deep" in answers["deep"]
    assert answers["not utf-8"].startswith(b"HTTP/1.1 400")
    body = json.loads(answers["bad length"].split(b"\r\n\r\n", 1)[1])
    assert body["error"]["message"] == "Content-Length 'abc' is not a byte count."
    _raw(gateway, path + b"Content-Length: 500\r\n\r\n{")  # the client goes away mid-body
    with socket.create_connection((gateway.host, gateway.port)) as conn:  # and before reading the answer
        conn.sendall(path + b"Content-Length: 2\r\n\r\n{}")
    time.sleep(0.5)
    assert "Traceback" not in "".join(capfd.readouterr())
    with socket.create_connection((gateway.host, gateway.port), timeout=10) as conn:
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        assert conn.recv(65536).startswith(b"HTTP/1.1 200")


def test_a_call_left_running_on_user_threads_does_not_keep_the_process_alive() -> None:
    script = "import time; from rllm.usercode import UserThreads; UserThreads(2).submit(time.sleep, 600); print('end')"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "end\n" and time.perf_counter() - started < 30
    with UserThreads(1) as threads:
        assert threads.submit(sum, [1, 2, 3]).result(10) == 6


FLOWS = """
import sys
import time

import openai

from rllm.eval.types import EvalOutput

TASKS = [{"uid": "a", "question": "one"}, {"uid": "b", "question": "two"}]


def tasks():
    return TASKS


class Grader:
    def evaluate(self, task, episode):
        return EvalOutput(reward=float(len(episode.trajectories[0].steps[-1].model_response) % 2), is_correct=False)


class Exits:
    def run(self, task, config):
        sys.exit()


class Sleeps:
    def run(self, task, config):
        time.sleep(600)


class BlockingClientInArun:
    async def arun(self, task, config):
        client = openai.OpenAI(base_url=config.base_url, api_key="unused", max_retries=0)
        client.chat.completions.create(model=config.model, messages=[{"role": "user", "content": task["question"]}])
"""


RUN = [
    "rllm.agent_flow.evaluator=user_flows:Grader",
    "rllm.agent_flow.train_dataset=user_flows:tasks",
    "rllm.data.train_batch_size=2",
    "rllm.rollout.n=2",
    "rllm.trainer.total_batches=1",
    "rllm.trainer.logger=[jsonl]",
    "rllm.workflow.timeout=2",
    "rllm.workflow.retry_limit=0",
]
"""A run of one step on two tasks, whose episodes time out after 2 s and fail at the first error."""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flow", "said"),
    [
        ("Exits", "agent flow user_flows.Exits called sys.exit(None)"),
        ("Sleeps", "rollouts timed out"),
        ("BlockingClientInArun", BLOCKED),
    ],
)
def test_rllm_train_ends_non_zero_in_bounded_time_with_one_line(tmp_path: Path, flow: str, said: str) -> None:
    (tmp_path / "user_flows.py").write_text(textwrap.dedent(FLOWS))
    keys = [f"rllm.agent_flow.flow=user_flows:{flow}", *RUN, f"rllm.trainer.output_dir={tmp_path / 'run'}"]
    command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", *keys]
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path)
    assert time.perf_counter() - started < 240
    assert done.returncode not in (0, None), done.stderr
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("rllm train: error: ") and said in last, done.stderr


class SleepsInArun:
    """Blocks the loop without calling the gateway: nothing can end it, but the run says so."""

    async def arun(self, task: dict[str, Any], config: AgentConfig) -> None:
        time.sleep(2.5)


def test_an_arun_holding_the_loop_past_the_deadline_is_said_in_one_warning() -> None:
    watched = Gateway(stall_after=0.5).start()
    try:
        with pytest.warns(RLLMWarning) as caught:
            assert _episodes(watched, SleepsInArun(), policy="drop_group") == []
    finally:
        watched.stop()
    said = [str(w.message) for w in caught if "held the trainer's event loop" in str(w.message)]
    assert len(said) == 1 and "rllm.workflow.timeout cannot end it" in said[0] and "\n" not in said[0]
