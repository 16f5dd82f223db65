"""Plugins that exit, print or dawdle at import cannot take rllm down or corrupt its output.

Real distributions (tests/fixtures/plugins/exits, chatty, sleepy) pip-installed with the rest.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from plugin_env import Env

pytestmark = pytest.mark.slow

GRPO_PAIR = "[1.0, -1.0]"  # rewards [1, 0] in one group: +-0.5 / (0.5 + 1e-6), rounded to 4 places


def test_rllm_plugins_json_is_valid_with_plugins_that_exit_and_print(env: Env) -> None:
    done = env.run([env.rllm, "plugins", "--json"], RLLM_PLUGINS="exits,chatty")
    assert done.returncode == 0, done.stderr
    plugins = {p["name"]: p for p in json.loads(done.stdout)}  # stdout holds the JSON and nothing else
    assert plugins["exits"]["status"] == "failed"
    assert plugins["exits"]["error"] == "SystemExit: 3"
    assert (plugins["exits"]["distribution"], plugins["exits"]["version"]) == ("rllm-fixture-exits", "0.0.1")
    assert plugins["chatty"]["status"] == "ok"
    assert plugins["chatty"]["estimators"] == ["chatty_zero"]
    assert "chatty plugin: imported" in done.stderr and "chatty plugin: registering" in done.stderr
    assert "'exits'" in done.stderr and "SystemExit" in done.stderr  # the warning names it


def test_strict_mode_never_stops_rllm_plugins(env: Env) -> None:
    done = env.run([env.rllm, "plugins", "--json"], RLLM_PLUGINS="exits,broken,example", RLLM_STRICT_PLUGINS="1")
    assert done.returncode == 0, done.stderr
    statuses = {p["name"]: p["status"] for p in json.loads(done.stdout) if p["status"] != "blocked"}
    assert statuses == {"builtin": "ok", "example": "ok", "exits": "failed", "broken": "failed"}
    assert "RLLM_STRICT_PLUGINS is set, so other commands stop on: broken, exits" in done.stderr


def test_python_keeps_running_when_a_plugin_exits(env: Env) -> None:
    done = env.py(
        """
        import rllm
        print(rllm.compute_advantages("grpo", [1.0, 0.0], [0, 0]).round(4).tolist())
        """,
        RLLM_PLUGINS="exits,chatty",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == GRPO_PAIR
    assert "rllm-fixture-exits 0.0.1" in done.stderr and "SystemExit: 3" in done.stderr
    assert "<string>:3: PluginWarning" in done.stderr  # the warning points at the caller's line, not rllm's


def test_jsonl_output_stays_clean_with_a_printing_plugin(env: Env) -> None:
    done = env.run([env.rllm, "advantages", "-e", "chatty_zero"], RLLM_PLUGINS="chatty")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 20 and {line["advantage"] for line in lines} == {0.0}
    assert "chatty plugin: imported" in done.stderr


def test_slow_plugin_is_named_with_its_load_time(env: Env) -> None:
    plugins = env.plugins(RLLM_PLUGINS="sleepy,example")
    assert plugins["sleepy"]["load_seconds"] >= 0.8  # it sleeps 0.8 s at import
    assert plugins["sleepy"]["slow"] is True
    assert plugins["example"]["load_seconds"] < plugins["sleepy"]["load_seconds"]
    done = env.run([env.rllm, "plugins"], RLLM_PLUGINS="sleepy")
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("sleepy "))
    assert line.endswith("s (slow)")
    assert "slow to load (over 0.5 s, paid by every rllm command): sleepy (" in done.stdout


def test_strict_failure_leaves_no_half_loaded_manager(env: Env) -> None:
    result = env.py_json(
        """
        import json, os, rllm
        from rllm.errors import PluginsFailedError
        from rllm.plugins import manager
        out = {}
        try:
            rllm.compute_advantages("doubled", [1.0], [0])
        except PluginsFailedError as exc:
            out["failures"] = sorted(type(f).__name__ + " " + f.args[0].split("'")[1] for f in exc.failures)
        out["kept"] = manager._manager is not None
        os.environ["RLLM_PLUGINS"] = "decorated,example"  # the user fixes the environment and tries again
        out["doubled"] = rllm.compute_advantages("doubled", [1.5], [0]).tolist()
        out["plugins"] = {i.name: i.status for i in rllm.get_plugin_manager().plugin_infos() if i.status != "blocked"}
        print(json.dumps(out))
        """,
        RLLM_STRICT_PLUGINS="1",
        RLLM_PLUGINS="decorated,example,exits,broken",
    )
    assert result["failures"] == ["PluginLoadError broken", "PluginLoadError exits"]
    assert result["kept"] is False
    # The decorated plugin registered while its module was imported by the failed load; the new load still has it.
    assert result["doubled"] == [3.0]
    assert result["plugins"] == {"builtin": "ok", "decorated": "ok", "example": "ok"}


def test_strict_mode_never_stops_help_or_version(env: Env) -> None:
    for args in (["--help"], ["--version"], ["estimators", "--help"]):
        done = env.run([env.rllm, *args], RLLM_PLUGINS="exits,broken,example", RLLM_STRICT_PLUGINS="1")
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr
    version = env.run([env.rllm, "--version"], RLLM_STRICT_PLUGINS="1").stdout
    assert version.startswith("rllm ") and version.split()[1][0].isdigit()


def test_strict_mode_failure_is_one_line_for_commands_that_need_plugins(env: Env) -> None:
    done = env.run([env.rllm, "estimators"], RLLM_PLUGINS="exits,broken,example", RLLM_STRICT_PLUGINS="1")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "broken" in done.stderr


def test_estimators_json_lists_the_example_plugins_options(env: Env) -> None:
    done = env.run([env.rllm, "estimators", "--json"], RLLM_PLUGINS="example")
    assert done.returncode == 0, done.stderr
    listed = {item["name"]: item for item in json.loads(done.stdout)}
    scaled = listed["scaled_median"]
    assert (scaled["plugin"], scaled["distribution"], scaled["version"]) == (
        "example",
        "rllm-example-estimators",
        "1.0.0",
    )
    assert scaled["options_declared"] and scaled["numerics"] and scaled["requires"] == []
    options = {option["name"]: option for option in scaled["options"]}
    assert options["clip"]["default"] is None and options["clip"]["type"] == "a number"
    assert {"preset", "std", "eps", "single", "dtype"} <= set(options)
    assert listed["rank"]["options_declared"] and listed["rank"]["options"] == []
    assert not listed["median_baseline"]["options_declared"] and listed["median_baseline"]["accepts_any_option"]
    assert "grpo" in listed and listed["grpo"]["provided_by"].startswith("built-in plugin 'builtin'")


def test_a_fork_while_another_thread_loads_plugins_does_not_hang_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child of a fork gets a fresh manager lock: the thread holding the parent's does not exist there."""
    import threading

    from rllm.plugins import manager as manager_module

    monkeypatch.setattr(manager_module, "_manager", None)
    holding, release = threading.Event(), threading.Event()

    def loading() -> None:  # stands for a thread in the middle of the first plugin load
        with manager_module._lock:
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=loading)
    thread.start()
    try:
        assert holding.wait(10)
        pid = os.fork()
        if pid == 0:  # the child: loading the plugins must not wait on the parent's thread
            code = 4
            try:
                code = 0 if "grpo" in manager_module.get_plugin_manager().estimators.names() else 3
            finally:
                os._exit(code)
        deadline = time.monotonic() + 30
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on the plugin manager's lock")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        thread.join()
