"""Plugin discovery with real distributions pip-installed into a fresh virtual environment (see plugin_env.py).

Environment switches select which of the installed plugins a process loads.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from plugin_env import Env, train_records

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.slow


SHIPPED = set(
    tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["entry-points"][
        "rllm.estimators"
    ]
)
"""rllm's own plugins (its pyproject's entry points); without their extras they register nothing."""


def test_all_installed_plugins_are_listed_with_their_status(env: Env) -> None:
    plugins = env.plugins()
    assert set(plugins) == SHIPPED | {
        "example",
        "broken",
        "conflict_a",
        "conflict_b",
        "decorated",
        "trainer_parts",
        "rival",
        "fast_centre",
        "exits",
        "chatty",
        "sleepy",
        "fields",
        "losses",
        "csv_tracker",
    }
    assert {"builtin", "fast", "verl", "transformers"} <= SHIPPED
    assert next(iter(plugins)) == "builtin"
    assert plugins["builtin"]["status"] == "ok"  # trainer_parts replacing two of its names is no conflict of its own
    example = plugins["example"]
    assert example["status"] == "ok"
    assert (example["distribution"], example["version"]) == ("rllm-example-estimators", "1.0.0")
    assert example["estimators"] == ["median_baseline", "rank", "scaled_median"]
    assert example["hooks"] == ["rllm_register_backends", "rllm_register_estimators", "rllm_register_grouping_hooks"]
    assert (example["grouping_hooks"], example["backends"]) == (["by_task_only"], ["bandit"])
    assert example["module"] == "rllm_example_estimators.plugin"
    broken = plugins["broken"]
    assert broken["status"] == "failed"
    assert "rllm_dependency_that_is_not_installed" in broken["error"]
    assert (broken["distribution"], broken["version"]) == ("rllm-fixture-broken", "0.3.1")
    assert plugins["conflict_a"]["status"] == plugins["conflict_b"]["status"] == "conflict"
    assert "shared_name" in plugins["conflict_b"]["error"]
    # rival claims trainer_parts' backend and grouping-hook names: both are in conflict over them.
    assert plugins["trainer_parts"]["status"] == plugins["rival"]["status"] == "conflict"
    assert "Backend name 'recording' is registered by more than one plugin" in plugins["trainer_parts"]["error"]
    assert plugins["fast_centre"]["kernels"] == ["sorted_runs"]


def test_example_estimators_usable_by_name_everywhere(env: Env) -> None:
    result = env.py_json(
        """
        import json, numpy as np, rllm
        from rllm.experimental.common.advantage import (
            get_rllm_adv_estimator, collect_reward_and_advantage_from_trajectory_groups as collect)
        flat = rllm.compute_advantages("median_baseline", [1, 2, 3, 10, 4, 6], ["a", "a", "a", "a", "b", "b"])
        listed, _ = get_rllm_adv_estimator("median_baseline")(rewards=[np.array([5.0, 1.0, 0.0])])
        rank = rllm.compute_advantages("rank", [0.3, 0.1, 0.2, 9.0], [0, 0, 0, 1])
        overrides = ["rllm.algorithm.adv_estimator=median_baseline"]
        cfg = rllm.AlgorithmConfig.from_config(rllm.load_config(overrides=overrides))
        trajectories = [rllm.Trajectory(reward=r, steps=[rllm.Step()]) for r in (4.0, 1.0, 2.0)]
        group = rllm.TrajectoryGroup.for_task("t", "solver", trajectories)
        collect([group], cfg)
        print(json.dumps({"flat": flat.tolist(), "listed": listed[0].tolist(), "rank": rank.tolist(),
                          "config": [t.steps[0].advantage for t in group.trajectories]}))
        """,
        RLLM_PLUGINS="example",
    )
    # Medians: a = [1, 2, 3, 10] -> 2.5; b = [4, 6] -> 5; [5, 1, 0] -> 1; [4, 1, 2] -> 2.
    assert result["flat"] == [-1.5, -0.5, 0.5, 7.5, -1.0, 1.0]
    assert result["listed"] == [4.0, 0.0, -1.0]
    assert result["config"] == [2.0, -1.0, 0.0]
    # Ranks in group 0: 0.3 -> 2, 0.1 -> 0, 0.2 -> 1, scaled 2 * rank / 2 - 1; a group of one gets 0.
    assert result["rank"] == [1.0, -1.0, 0.0, 0.0]


def test_broken_plugin_warns_with_its_names_and_the_rest_keeps_working(env: Env) -> None:
    done = env.py(
        """
        import rllm
        print(rllm.compute_advantages("median_baseline", [1.0, 3.0], [0, 0]).tolist())
        """,
        RLLM_DISABLED_PLUGINS="conflict_a,conflict_b,sleepy",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[-1.0, 1.0]"  # the chatty plugin's prints went to stderr
    for part in (
        "PluginWarning",
        "'broken'",
        "rllm-fixture-broken 0.3.1",
        "ModuleNotFoundError",
        "rllm_dependency_that_is_not_installed",
        "RLLM_STRICT_PLUGINS",
    ):
        assert part in done.stderr


def test_strict_mode_makes_a_broken_plugin_an_error_at_first_use(env: Env) -> None:
    done = env.py(
        """
        import rllm
        print("imported")
        rllm.compute_advantages("grpo", [1.0, 0.0], [0, 0])
        """,
        RLLM_STRICT_PLUGINS="1",
        RLLM_PLUGINS="broken,example",
    )
    assert done.returncode != 0
    assert done.stdout.strip() == "imported"  # import only discovers; loading happens at first use
    for part in ("PluginsFailedError", "1 plugin(s) failed", "PluginLoadError", "rllm-fixture-broken 0.3.1"):
        assert part in done.stderr


def test_conflicting_plugins_fail_only_on_the_shared_name(env: Env) -> None:
    result = env.py_json(
        """
        import json, rllm
        out = {}
        try:
            rllm.compute_advantages("shared_name", [1.0], [0])
        except rllm.EstimatorConflictError as exc:
            out["error"] = str(exc)
        out["only_a"] = rllm.compute_advantages("only_a", [1.0], [0]).tolist()
        out["only_b"] = rllm.compute_advantages("only_b", [1.0], [0]).tolist()
        out["grpo"] = rllm.compute_advantages("grpo", [1.0, 0.0], [0, 0]).round(4).tolist()
        print(json.dumps(out))
        """,
        RLLM_PLUGINS="conflict_a,conflict_b",
    )
    for part in (
        "'shared_name'",
        "plugin 'conflict_a'",
        "rllm-fixture-conflict-a 1.2.0",
        "plugin 'conflict_b'",
        "rllm-fixture-conflict-b 2.0.0",
    ):
        assert part in result["error"]
    assert result["only_a"] == [2.0] and result["only_b"] == [3.0]
    assert result["grpo"] == [1.0, -1.0]  # the built-in, not conflict_a's claim on the name


def test_builtin_name_claimed_without_replace_warns(env: Env) -> None:
    done = env.py("import rllm; rllm.get_plugin_manager()", RLLM_PLUGINS="conflict_a")
    assert done.returncode == 0
    assert "registers estimator 'grpo', which is built in" in done.stderr
    assert "replace=True" in done.stderr


def test_disabling_one_conflicting_plugin_resolves_the_name(env: Env) -> None:
    result = env.py_json(
        "import json, rllm; print(json.dumps(rllm.compute_advantages('shared_name', [0.0], [0]).tolist()))",
        RLLM_DISABLED_PLUGINS="broken,rllm-fixture-conflict-b",
    )
    assert result == [1.0]


def test_autoload_switch_and_allow_list(env: Env) -> None:
    plugins = env.plugins(RLLM_DISABLE_PLUGIN_AUTOLOAD="1")
    assert plugins["builtin"]["status"] == "ok"
    assert {p["status"] for n, p in plugins.items() if n != "builtin"} == {"blocked"}
    assert "RLLM_DISABLE_PLUGIN_AUTOLOAD" in plugins["example"]["error"]
    allowed = env.plugins(RLLM_PLUGINS="rllm-example-estimators")
    assert allowed["example"]["status"] == "ok"
    assert allowed["broken"]["status"] == allowed["conflict_a"]["status"] == "blocked"


def test_distribution_visible_twice_is_not_a_conflict(env: Env, tmp_path: Path) -> None:
    site = next(env.path.glob("lib/python*/site-packages"))
    copy = tmp_path / "second-copy"
    copy.mkdir()
    shutil.copytree(site / "rllm_example_estimators", copy / "rllm_example_estimators")
    for info in site.glob("rllm_example_estimators-*.dist-info"):
        shutil.copytree(info, copy / info.name)
    done = env.py(
        "import rllm; print(rllm.compute_advantages('median_baseline', [1.0, 3.0], [0, 0]).tolist())",
        PYTHONPATH=str(copy),
        RLLM_PLUGINS="example",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[-1.0, 1.0]"
    assert "Warning" not in done.stderr


def test_example_backend_trains_with_the_example_grouping_hook(env: Env, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = env.train(
        out,
        "rllm.backend=bandit",
        "rllm.grouping_hook=by_task_only",
        "+rllm.grouping_hook_options.role=everyone",
        "rllm.trainer.total_batches=4",
        RLLM_PLUGINS="example",
    )
    assert done.returncode == 0, done.stderr
    records = train_records(out)
    # The hook's option named the role; the backend's policy starts uniform over 4 arms (1/4 on the best)
    # and every update moves probability towards the rewarded arm, so its share only grows.
    assert all("advantage/everyone/max" in r for r in records)
    shares = [r["example/p_best_arm"] for r in records]
    assert len(shares) == 4 and shares[0] > 0.25 and shares == sorted(shares) and shares[-1] > shares[0]


def test_example_plugin_runs_from_the_command_line(env: Env) -> None:
    done = env.run([str(env.bin / "rllm"), "advantages", "-e", "median_baseline"], RLLM_PLUGINS="example")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 20
    assert "estimator median_baseline" in done.stderr


def test_plugin_registering_with_the_decorator_while_it_is_imported(env: Env) -> None:
    assert env.plugins(RLLM_PLUGINS="decorated")["decorated"] | {"load_seconds": 0} == {
        "name": "decorated",
        "distribution": "rllm-fixture-decorated",
        "version": "0.0.7",
        "module": "rllm_fixture_decorated.plugin",
        "status": "ok",
        "error": None,
        "hooks": [],
        "estimators": ["doubled"],
        "grouping_hooks": [],
        "backends": [],
        "kernels": [],
        "batch_fields": [],
        "losses": [],
        "config_sections": [],
        "weight_syncs": [],
        "trackers": [],
        "load_seconds": 0,
        "slow": False,
    }
    result = env.py_json(
        "import json, rllm; print(json.dumps(rllm.compute_advantages('doubled', [1.5, 2.0], [0, 1]).tolist()))",
        RLLM_PLUGINS="decorated",
    )
    assert result == [3.0, 4.0]


def test_plugin_module_imported_before_rllm_loads_is_still_its_plugin(env: Env) -> None:
    # The module's decorator makes rllm load plugins while the module itself is half imported:
    # rllm finishes loading that plugin at the next use, with the decorator's estimator attributed to it.
    result = env.py_json(
        """
        import json
        import rllm_fixture_decorated.plugin
        import rllm
        doubled = rllm.compute_advantages("doubled", [1.5], [0]).tolist()
        info = {i.name: (i.status, i.estimators) for i in rllm.get_plugin_manager().plugin_infos()}["decorated"]
        source = rllm.get_plugin_manager().estimators.resolve("doubled").source.describe()
        print(json.dumps({"doubled": doubled, "info": info, "source": source}))
        """,
        RLLM_PLUGINS="decorated",
    )
    assert result == {
        "doubled": [3.0],
        "info": ["ok", ["doubled"]],
        "source": "plugin 'decorated', distribution rllm-fixture-decorated 0.0.7",
    }


def test_grpo_in_a_fresh_install(env: Env) -> None:
    result = env.py_json(
        "import json, rllm; print(json.dumps(rllm.compute_advantages('grpo', [1, 0, 0, 0], [0] * 4).tolist()))",
        RLLM_DISABLE_PLUGIN_AUTOLOAD="1",
    )
    # mean 1/4, population std sqrt(3)/4, eps 1e-6
    std = 3**0.5 / 4
    assert result == pytest.approx([0.75 / (std + 1e-6)] + [-0.25 / (std + 1e-6)] * 3, rel=1e-12)


def test_running_python_is_not_the_test_venv() -> None:
    # Guards the fixture's purpose: the plugins are installed elsewhere, not into the interpreter running pytest.
    assert not any(p.name.startswith("rllm_fixture") for p in Path(sys.prefix).glob("lib/python*/site-packages/*"))
