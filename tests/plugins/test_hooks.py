"""Every hook, end to end: a pip-installed distribution registers through it and rllm uses what it registered.

``test_every_hookspec_has_an_end_to_end_test`` fails when a hook is added to
``rllm.plugins.hookspecs`` without a fixture distribution implementing it and a
``test_hook_<hook name>`` here that uses the installed environment.
"""

from __future__ import annotations

import ast
import inspect
import json
import shutil
from pathlib import Path

import pytest
from plugin_env import FIXTURES, Env, train_records

from rllm.plugins import hookspecs

pytestmark = pytest.mark.slow

HOOKS = sorted(name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(fn, "rllm_spec"))


def advantage_roles(record: dict[str, object]) -> set[str]:
    return {key.split("/")[1] for key in record if key.startswith("advantage/") and key.endswith("/max")}


def test_hook_rllm_register_estimators(env: Env, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = env.train(out, "rllm.algorithm.adv_estimator=median_baseline", RLLM_PLUGINS="example")
    assert done.returncode == 0, done.stderr
    steps = train_records(out)
    assert [r["step"] for r in steps] == [1, 2]
    # Rewards are 0 or 1, so a group's median is 0, 0.5 or 1 and median_baseline's advantages lie in
    # {-1, -0.5, 0, 0.5, 1}; grpo's would reach sqrt(7) for one success in eight. The plugin's function ran.
    for record in steps:
        for key in ("advantage/solver/max", "advantage/solver/min"):
            assert record[key] in (-1.0, -0.5, 0.0, 0.5, 1.0)


def test_hook_rllm_register_backends(env: Env, tmp_path: Path) -> None:
    chosen, replaced = tmp_path / "chosen", tmp_path / "replaced"
    done = env.train(chosen, "rllm.backend=recording", RLLM_PLUGINS="trainer_parts")
    assert done.returncode == 0, done.stderr
    assert [r["fixture/recording_updates"] for r in train_records(chosen)] == [1.0, 2.0]
    # The plugin took the built-in name with replace=True: the default backend is now its class, silently.
    done = env.train(replaced, RLLM_PLUGINS="trainer_parts")
    assert done.returncode == 0, done.stderr
    assert "PluginWarning" not in done.stderr
    assert [r["fixture/recording_updates"] for r in train_records(replaced)] == [1.0, 2.0]


def test_hook_rllm_register_config_sections(env: Env, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = env.train(run_dir, "rllm.backend=recording", "rllm.recording.weight=2.5", RLLM_PLUGINS="trainer_parts")
    assert done.returncode == 0, done.stderr
    assert [r["fixture/recording_weight"] for r in train_records(run_dir)] == [2.5, 2.5]
    bad = env.train(
        tmp_path / "bad", "rllm.backend=recording", "rllm.recording.weight=abc", RLLM_PLUGINS="trainer_parts"
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "rllm.recording.weight" in bad.stderr and not (tmp_path / "bad").exists()
    keys = env.run([env.rllm, "config", "--keys"], RLLM_PLUGINS="trainer_parts")
    assert "rllm.recording.weight" in keys.stdout


def test_hook_rllm_register_batch_fields(env: Env, tmp_path: Path) -> None:
    # Group [1, 3] (mean 2) with difficulties [0.5, 2]: (1 - 2) * 0.5 and (3 - 2) * 2.
    result = env.py_json(
        """
        import json, rllm
        from rllm import AlgorithmConfig, Step, Trajectory, TrajectoryGroup
        direct = rllm.compute_advantages("difficulty_weighted", [1.0, 3.0], [0, 0], difficulty=[0.5, 2.0])
        pairs = ((1.0, 0.5), (3.0, 2.0))
        trajectories = [Trajectory(reward=r, steps=[Step()], info={"difficulty": d}) for r, d in pairs]
        group = TrajectoryGroup.for_task("t", "solver", trajectories)
        config = AlgorithmConfig(estimator="difficulty_weighted")
        rllm.collect_reward_and_advantage_from_trajectory_groups([group], config)
        try:
            rllm.compute_advantages("difficulty_weighted", [1.0, 3.0], [0, 0])
        except rllm.MissingInputError as exc:
            missing = str(exc)
        print(json.dumps({"direct": direct.tolist(), "collected": [t.steps[0].advantage for t in trajectories],
                          "missing": missing}))
        """,
        RLLM_PLUGINS="fields",
    )
    assert result["direct"] == result["collected"] == [-0.5, 2.0]
    assert "'difficulty'" in result["missing"]
    source = tmp_path / "rollouts.jsonl"
    source.write_text('{"task_id": "t", "reward": 1, "hardness": 0.5}\n{"task_id": "t", "reward": 3, "hardness": 2}\n')
    done = env.run([env.rllm, "advantages", str(source), "-e", "difficulty_weighted"], RLLM_PLUGINS="fields")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["advantage"] for line in done.stdout.splitlines()] == [-0.5, 2.0]
    helped = env.run([env.rllm, "advantages", "--help"], RLLM_PLUGINS="fields").stdout
    assert "hardness" in helped and "how hard the task is" in helped
    listed = json.loads(
        env.run([env.rllm, "estimators", "difficulty_weighted", "--json"], RLLM_PLUGINS="fields").stdout
    )
    assert listed[0]["requires"] == ["difficulty"]


def test_hook_rllm_register_grouping_hooks(env: Env, tmp_path: Path) -> None:
    chosen, replaced = tmp_path / "chosen", tmp_path / "replaced"
    done = env.train(chosen, "rllm.grouping_hook=pooled", RLLM_PLUGINS="trainer_parts")
    assert done.returncode == 0, done.stderr
    assert [advantage_roles(r) for r in train_records(chosen)] == [{"pooled"}, {"pooled"}]
    done = env.train(replaced, RLLM_PLUGINS="trainer_parts")  # replace=True on the built-in "task_and_role"
    assert done.returncode == 0, done.stderr
    assert [advantage_roles(r) for r in train_records(replaced)] == [{"by_task"}, {"by_task"}]


def test_hook_rllm_register_kernels(env: Env) -> None:
    result = env.py_json(
        """
        import json, numpy as np, rllm
        from rllm_fixture_kernels import plugin
        kernel = rllm.get_plugin_manager().kernels.resolve("sorted_runs")
        runs = [kernel.target(np.array(labels, dtype=np.int64)) for labels in ([0, 0, 1, 1, 1, 4], [1, 0], [])]
        print(json.dumps({"runs": runs, "calls": plugin.calls, "by": kernel.source.describe()}))
        """,
        RLLM_PLUGINS="fast_centre",
    )
    assert result["runs"] == [3, None, 0]
    assert result["calls"] == 3
    assert result["by"] == "plugin 'fast_centre', distribution rllm-fixture-kernels 0.1.0"


def test_backend_and_grouping_conflicts_name_both_plugins(env: Env, tmp_path: Path) -> None:
    for override, what in (("rllm.backend=recording", "Backend"), ("rllm.grouping_hook=pooled", "Grouping hook")):
        done = env.train(tmp_path / what, override, RLLM_PLUGINS="trainer_parts,rival")
        assert done.returncode == 2, done.stderr
        error = done.stderr.strip().splitlines()[-1]
        assert error.startswith(f"rllm train: error: {what} name '")
        for part in ("more than one plugin", "plugin 'trainer_parts'", "rllm-fixture-rival 1.0.0"):
            assert part in error
        assert "Traceback" not in done.stderr
        assert not (tmp_path / what / "metrics.jsonl").exists()


def test_shadowing_builtin_backend_and_grouping_hook_warns_and_keeps_the_builtin(env: Env, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = env.train(out, RLLM_PLUGINS="rival")
    assert done.returncode == 0, done.stderr
    for what, name in (("backend", "embedded"), ("grouping hook", "task_and_role")):
        who = "plugin 'rival', distribution rllm-fixture-rival 1.0.0"
        assert f"{who} registers {what} '{name}', which is built in" in done.stderr
    records = train_records(out)
    assert [advantage_roles(r) for r in records] == [{"solver"}, {"solver"}]
    assert not any("fixture/recording_updates" in r for r in records)
    assert env.plugins(RLLM_PLUGINS="rival")["rival"]["status"] == "conflict"


def test_unknown_backend_is_its_own_error_type(env: Env) -> None:
    result = env.py_json(
        """
        import json, rllm
        from rllm.errors import BackendNotFoundError, EstimatorNotFoundError, NameNotFoundError
        try:
            rllm.get_plugin_manager().backends.resolve("recordin")
        except NameNotFoundError as exc:
            print(json.dumps([type(exc).__name__, isinstance(exc, EstimatorNotFoundError), str(exc)]))
        """,
        RLLM_PLUGINS="trainer_parts",
    )
    assert result[:2] == ["BackendNotFoundError", False]
    assert "Unknown backend 'recordin'. Did you mean 'recording'?" in result[2]


def test_every_hookspec_has_an_end_to_end_test() -> None:
    tests = {
        node.name: [arg.arg for arg in node.args.args]
        for node in ast.parse(Path(__file__).read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef)
    }
    fixture_sources = "\n".join(path.read_text(encoding="utf-8") for path in FIXTURES.glob("*/*/plugin.py"))
    example = (Path(__file__).resolve().parents[2] / "plugins" / "example").glob("*/plugin.py")
    sources = fixture_sources + "\n".join(path.read_text(encoding="utf-8") for path in example)
    assert HOOKS, "no hookspecs found"
    for hook in HOOKS:
        assert "env" in tests.get(f"test_hook_{hook}", []), f"no end-to-end test test_hook_{hook}(env, ...) here"
        assert f"def {hook}(" in sources, f"no fixture distribution implements {hook}"


def test_hook_rllm_register_losses(env: Env, tmp_path: Path) -> None:
    # The fixture's loss on tokens (logp -1, A 1) and (logp -2, A -1): mean of 1 and -2, times scale 2.
    result = env.py_json(
        """
        import json, sys
        import numpy as np
        from rllm.losses import get_loss, LossContext, loss_names
        listed = "scaled_pg" in loss_names() and "rllm_fixture_losses.loss" not in sys.modules
        ctx = LossContext(np.array([[-1.0, -2.0]]), np.zeros((1, 2)), np.array([[1.0, -1.0]]), np.ones((1, 2)),
                          options={"scale": 2.0})
        loss, metrics = get_loss("fixture_pg")(ctx)
        print(json.dumps({"listed": listed, "loss": float(loss), "metrics": metrics}))
        """,
        RLLM_PLUGINS="losses",
    )
    assert result == {"listed": True, "loss": -1.0, "metrics": {"tokens": 2.0}}
    done = env.run([env.rllm, "losses", "fixture_pg"], RLLM_PLUGINS="losses")
    assert done.returncode == 0 and done.stdout.startswith(
        "scaled_pg  (plugin 'losses', distribution rllm-fixture-losses"
    )


def test_hook_rllm_register_trackers(env: Env, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = env.train(out, "rllm.trainer.logger=[jsonl,csv]", RLLM_PLUGINS="csv_tracker")
    assert done.returncode == 0, done.stderr
    rows = (out / "tracked" / "tracked.csv").read_text().splitlines()
    tracked = [(kind, int(step), key, float(value)) for kind, step, key, value in (row.split(",") for row in rows)]
    expected = [
        (record["kind"], record["step"], key, float(value))
        for record in (json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines())
        for key, value in record.items()
        if key not in ("kind", "step") and isinstance(value, int | float)
    ]
    assert tracked == expected and {step for _, step, _, _ in tracked} == {1, 2}
    config = json.loads((out / "tracked" / "tracked_config.json").read_text())
    assert config["rllm.trainer.logger"] == ["jsonl", "csv"] and config["rllm.trainer.output_dir"] == str(out)
    assert env.plugins(RLLM_PLUGINS="csv_tracker")["csv_tracker"]["trackers"] == ["csv"]
    # Starting over deletes what the tracker wrote in the run directory: its rows are the new run's only.
    again = env.train(
        out, "rllm.trainer.logger=[jsonl,csv]", "rllm.trainer.resume_mode=disable", RLLM_PLUGINS="csv_tracker"
    )
    assert again.returncode == 0, again.stderr
    assert len((out / "tracked" / "tracked.csv").read_text().splitlines()) == len(rows)
    # A run killed after logging steps 3 and 4 but before checkpointing step 4 resumes from step 2: the tracker's
    # rewind drops its rows of steps 3 and 4, so each step is there once, with the resumed run's metrics.jsonl values.
    killed, four = tmp_path / "killed", ("rllm.trainer.total_batches=4", "rllm.trainer.save_freq=2")
    assert env.train(killed, "rllm.trainer.logger=[jsonl,csv]", *four, RLLM_PLUGINS="csv_tracker").returncode == 0
    shutil.rmtree(killed / "checkpoints" / "step_4")
    five = ("rllm.trainer.total_batches=5", "rllm.trainer.save_freq=2")
    resumed = env.train(killed, "rllm.trainer.logger=[jsonl,csv]", *five, RLLM_PLUGINS="csv_tracker")
    assert resumed.returncode == 0 and "resumed from" in resumed.stderr, resumed.stderr
    rows = (killed / "tracked" / "tracked.csv").read_text().splitlines()
    tracked = [(kind, int(step), key, float(value)) for kind, step, key, value in (row.split(",") for row in rows)]
    expected = [
        (record["kind"], record["step"], key, float(value))
        for record in (json.loads(line) for line in (killed / "metrics.jsonl").read_text().splitlines())
        for key, value in record.items()
        if key not in ("kind", "step") and isinstance(value, int | float)
    ]
    assert tracked == expected and [step for _, step, key, _ in tracked if key == "wall_time"] == [1, 2, 3, 4, 5]
    unknown = env.train(tmp_path / "bad", "rllm.trainer.logger=[jsonl,cvs]", RLLM_PLUGINS="csv_tracker")
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "got ['jsonl', 'cvs']. Did you mean 'csv'?" in unknown.stderr


def test_hook_rllm_register_weight_syncs(env: Env) -> None:
    """The fixture's weight sync is discovered from its distribution, attributed to its plugin, and resolvable."""
    assert env.plugins()["trainer_parts"]["weight_syncs"] == ["counting"]
    found = env.py_json(
        """
        import json
        import rllm
        entry = rllm.get_plugin_manager().weight_syncs.resolve("counting")
        print(json.dumps([entry.source.plugin, entry.source.distribution]))
        """
    )
    assert found == ["trainer_parts", "rllm-fixture-trainer"]
