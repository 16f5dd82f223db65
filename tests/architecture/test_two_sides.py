"""The rollout side and the update side: one step loop, one owner of the policy version, a small backend protocol."""

from __future__ import annotations

import ast
from pathlib import Path

from rllm.trainer.backend_protocol import BackendProtocol

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "rllm"


def _calls(path: Path, name: str) -> int:
    """How many calls of an attribute ``name`` (``x.name(...)``) ``path`` holds."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sum(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
        for node in ast.walk(tree)
    )


def test_one_module_runs_the_steps_and_calls_each_step_hook_once() -> None:
    for hook in ("on_batch_start", "on_batch_end", "update_policy"):
        found = {
            path.relative_to(CORE).as_posix(): _calls(path, hook)
            for path in (CORE / "trainer").glob("*.py")
            if _calls(path, hook)
        }
        expected = "trainer/train_step.py" if hook == "update_policy" else "trainer/step_loop.py"
        assert found == {expected: 1}, (hook, found)


def test_the_backend_protocol_has_at_most_26_members() -> None:
    members = [name for name in vars(BackendProtocol) if not name.startswith("_")]
    assert len(members) <= 26, members
    assert "rollout_weights" in members and "publish_weights" not in members


def test_only_the_owner_engines_and_records_name_the_version() -> None:
    """Who writes or reads which policy version sampled a step: the owner, the engines that report it, the records
    that carry it, and the trainer's state (the checkpointed record); nobody else keeps a count of their own."""
    allowed = {
        "rollouts/policy.py",  # the owner
        "rollouts/workflow_engine.py",  # stamps a batch's steps before the episode log
        "engine/openai_api.py",
        "engine/rollout/openai_engine.py",
        "engine/rollout/rollout_engine.py",
        "engine/weight_sync.py",
        "gateway/server.py",  # the engines and the endpoint that report it
        "types/episodes.py",
        "types/groups.py",
        "tasks/digits.py",  # the records, and the built-in workflow that fills one
        "trainer/backend_protocol.py",
        "trainer/checkpoint.py",  # TrainerState and its checkpoint
    }
    naming = {
        path.relative_to(CORE).as_posix()
        for path in CORE.rglob("*.py")
        if "weight_version" in (text := path.read_text(encoding="utf-8")) or "policy_version" in text
    }
    assert naming <= allowed, sorted(naming - allowed)
    assert "rollouts/policy.py" in naming


def test_no_module_is_over_400_lines_but_the_key_tables_and_the_trainer_stays_small() -> None:
    exempt = {CORE / "config" / "core_keys.py"}  # the table of rllm's config keys: one entry per key
    modules = [*CORE.rglob("*.py"), *(ROOT / "plugins").glob("*/*/**/*.py")]
    long = {
        path.relative_to(ROOT).as_posix(): lines
        for path in modules
        if path not in exempt and (lines := len(path.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert not long, long
    trainer = sum(  # rLLM's paths of plugin modules (rllm.trainer.verl.*) hold no trainer code: each names a module
        len(text.splitlines())
        for path in (CORE / "trainer").rglob("*.py")
        if "become_plugin_module(__name__" not in (text := path.read_text(encoding="utf-8"))
    )
    assert trainer < 4300, trainer
