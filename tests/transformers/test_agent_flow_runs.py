"""An agent flow knowing nothing of rllm (the stock ``openai`` client) trains the tiny text model through the gateway.

The flow is :class:`rllm.tasks.agent_flow.AnswerAgent`: it completes ``"<question> Answer: "``
with one token. A randomly initialised model answers a digit about 10 times in 101 (its
vocabulary), and the right one about 1 time in 101, so greedy validation starts at 0; once
the policy has learnt to answer digits, the larger of two digits is most often high (always
``9`` scores 0.19), which is the first rise. bench/agent_flow.py trains on (0.9 or more from step 125 on seeds 0 and 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "openai", install="pip install 'rllm[transformers,test]'")

from rllm.tasks import TextEvaluator, text_digit_max_tasks
from rllm.tasks.agent_flow import AnswerAgent
from rllm.trainer import AgentTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics

SETTINGS = [
    "rllm.transformers.device=cpu",
    "rllm.transformers.tokenizer=text",
    "rllm.data.train_batch_size=20",
    "rllm.rollout.n=8",
    "rllm.trainer.total_epochs=100",
    "rllm.trainer.save_freq=0",
    "rllm.trainer.logger=[jsonl]",
]


@pytest.mark.slow
def test_an_openai_client_flow_raises_validation_pass_at_1(tmp_path: Path) -> None:
    tasks = text_digit_max_tasks()
    AgentTrainer(
        agent_flow=AnswerAgent(),
        evaluator=TextEvaluator(),
        train_dataset=tasks,
        val_dataset=tasks,
        backend="transformers",
        config=[
            *SETTINGS,
            "rllm.trainer.total_batches=12",
            "rllm.trainer.test_freq=12",
            f"rllm.trainer.output_dir={tmp_path}",
        ],
    ).train()
    records = read_metrics(tmp_path / METRICS_FILE)
    curve = [r["val/text_digit_max/pass@1"] for r in records if r["kind"] == "val"]
    train = [r for r in records if r["kind"] == "train"]
    assert len(curve) == 2 and curve[0] <= 0.05 and curve[1] >= 0.15, curve
    assert all(r["batch/num_episodes"] == 160 and r["workflow/failed"] == 0 for r in train)
    assert all(r["actor/rollout_logprob_diff"] < 1e-4 for r in train)  # the recorded log-probs are the policy's


@pytest.mark.slow
def test_rllm_train_names_the_flow_evaluator_and_tasks_as_module_attr(tmp_path: Path) -> None:
    keys = [
        "rllm.backend=transformers",
        "rllm.agent_flow.flow=rllm.tasks.agent_flow:AnswerAgent",
        "rllm.agent_flow.evaluator=rllm.tasks:TextEvaluator",
        "rllm.agent_flow.train_dataset=rllm.tasks:text_digit_max_tasks",
        "rllm.trainer.total_batches=2",
        "rllm.trainer.test_freq=0",
        "rllm.trainer.val_before_train=false",
        f"rllm.trainer.output_dir={tmp_path / 'run'}",
    ]
    command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", *SETTINGS, *keys]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    train = [r for r in read_metrics(tmp_path / "run" / METRICS_FILE) if r["kind"] == "train"]
    assert [r["batch/num_episodes"] for r in train] == [160, 160]
    missing = subprocess.run(
        [*command[:4], *SETTINGS, *keys, "rllm.agent_flow.flow=my_agents:Nope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "rllm.agent_flow.flow='my_agents:Nope': module 'my_agents' does not import" in missing.stderr
