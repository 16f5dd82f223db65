"""Trackers are a plugin kind: the built-ins are registered like any plugin's, a plugin's is used by name, and
one that raises mid-run is switched off with one warning while the run and the other trackers go on."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from omegaconf import DictConfig

import rllm
from rllm.cli.main import main
from rllm.errors import ConfigError, PluginContractError, RLLMWarning, TrackerError
from rllm.plugins import PluginManager, Source
from rllm.trainer import Tracker, TrackerRun, finite_metrics, flatten_config
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.trainer.trackers import Trackers

SOURCE = Source("plugin", "acme", "acme-trackers", "1.0")
SHORT = ("rllm.trainer.total_batches=3", "rllm.trainer.test_freq=2", "rllm.data.train_batch_size=4")
MakeConfig = Callable[..., DictConfig]
Train = Callable[..., tuple[Any, list[dict]]]
STEPS = [("val", 0), ("train", 1), ("train", 2), ("val", 2), ("train", 3), ("val", 3)]
"""The records of a SHORT run: validation first, every second step and at the end."""


class Recording(Tracker):
    """Keeps every call, so a test can compare what it was given with metrics.jsonl."""

    calls: ClassVar[list[tuple[str, Any]]] = []

    def start(self, total_steps: int) -> None:
        self.calls.append(("start", total_steps))

    def rewind(self, step: int, kept: Sequence[Mapping[str, Any]]) -> None:
        self.calls.append(("rewind", (step, [(r["kind"], r["step"]) for r in kept])))

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.calls.append(("config", config))

    def log_metrics(self, metrics: Mapping[str, Any], step: int, kind: str) -> None:
        self.calls.append(("metrics", (kind, step, dict(metrics))))

    def log_image(self, name: str, path: Path, step: int) -> None:
        self.calls.append(("image", (name, path.read_bytes()[:4], step)))

    def close(self) -> None:
        self.calls.append(("close", None))


class Flaky(Tracker):
    """Raises at its second record."""

    seen = 0

    def log_metrics(self, metrics: Mapping[str, Any], step: int, kind: str) -> None:
        Flaky.seen += 1
        if Flaky.seen == 2:
            raise ConnectionError("the tracking server went away")


class NeedsMissing(Tracker):
    needs = ("rllm_module_that_is_not_installed",)
    install = "rllm-fixture-missing[tracker]"

    def log_metrics(self, metrics: Mapping[str, Any], step: int, kind: str) -> None:
        raise AssertionError("never constructed")


class Plugin:
    @rllm.hookimpl
    def rllm_register_trackers(self, register: rllm.plugins.TrackerRegistrar) -> None:
        register("recording", Recording)
        register("flaky", Flaky)
        register("needs_missing", NeedsMissing)
        register("lazy", "tests_no_such_module.trackers:Tracker")


@pytest.fixture
def acme(plugin_manager: PluginManager) -> PluginManager:
    info = plugin_manager.register(Plugin(), SOURCE)
    assert info.status == "ok" and info.trackers == ["recording", "flaky", "needs_missing", "lazy"]
    Recording.calls, Flaky.seen = [], 0
    return plugin_manager


def test_console_and_jsonl_are_the_builtin_plugins_trackers(plugin_manager: PluginManager) -> None:
    assert plugin_manager.plugins["builtin"].trackers == ["console", "jsonl"]
    assert plugin_manager.trackers.resolve("jsonl").source.kind == "builtin"


def test_rllm_plugins_lists_the_trackers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    builtin = next(p for p in json.loads(capsys.readouterr().out) if p["name"] == "builtin")
    assert builtin["trackers"][:2] == ["console", "jsonl"]
    assert main(["plugins"]) == 0
    assert "    trackers: console, jsonl" in capsys.readouterr().out


def test_a_plugins_tracker_gets_the_config_every_record_and_the_curve(
    acme: PluginManager, make_config: MakeConfig, train: Train
) -> None:
    pytest.importorskip("matplotlib")
    config = make_config(*SHORT, "rllm.trainer.logger=[jsonl,recording]")
    trainer, records = train(config, learning_curve=True)
    kinds = [kind for kind, _ in Recording.calls]
    assert kinds[:2] == ["start", "config"] and kinds[-2:] == ["image", "close"]
    assert Recording.calls[0][1] == 3
    resolved = Recording.calls[1][1]
    assert resolved["rllm"]["trainer"]["output_dir"] == str(trainer.output_dir)  # interpolation resolved
    assert resolved["rllm"]["trainer"]["logger"] == ["jsonl", "recording"]
    logged = [value for kind, value in Recording.calls if kind == "metrics"]
    # metrics.jsonl is the jsonl tracker's copy of the same records: kind, step, then the metrics.
    assert [(r.pop("kind"), r.pop("step"), r) for r in records] == logged
    assert [(kind, step) for kind, step, _ in logged] == STEPS
    assert Recording.calls[-2][1] == ("learning_curve", b"\x89PNG", 3)


def test_a_resumed_run_rewinds_every_tracker_to_its_checkpoint_before_logging(
    acme: PluginManager, make_config: MakeConfig, train: Train
) -> None:
    """Steps 3's records were logged, its checkpoint lost (a kill): the resumed run rewinds to step 2, then logs 3."""
    import shutil

    first = make_config(*SHORT, "rllm.trainer.save_freq=2", "rllm.trainer.logger=[jsonl,recording]")
    trainer, _ = train(first)
    shutil.rmtree(trainer.output_dir / "checkpoints" / "step_3")
    Recording.calls = []
    more = [word.replace("total_batches=3", "total_batches=4") for word in SHORT]
    _, records = train(make_config(*more, "rllm.trainer.save_freq=2", "rllm.trainer.logger=[jsonl,recording]"))
    kinds = [kind for kind, _ in Recording.calls]
    assert kinds[:3] == ["start", "rewind", "config"]
    assert Recording.calls[1][1] == (2, [("val", 0), ("train", 1), ("train", 2), ("val", 2)])  # metrics.jsonl, cut
    logged = [(value[0], value[1]) for kind, value in Recording.calls if kind == "metrics"]
    assert logged == [("train", 3), ("train", 4), ("val", 4)]
    assert [(r["kind"], r["step"]) for r in records] == [*STEPS[:4], *logged]


def test_a_tracker_that_raises_mid_run_is_switched_off_with_one_warning(
    acme: PluginManager, make_config: MakeConfig, train: Train
) -> None:
    config = make_config(*SHORT, "rllm.trainer.logger=[flaky,jsonl,recording]")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, records = train(config)
    said = [str(w.message) for w in caught if issubclass(w.category, RLLMWarning) and "flaky" in str(w.message)]
    assert len(said) == 1
    assert said[0].startswith("Tracker 'flaky' (plugin 'acme', distribution acme-trackers 1.0) raised ConnectionError")
    assert "the tracking server went away" in said[0] and "goes on with the other trackers" in said[0]
    assert Flaky.seen == 2  # never called again
    assert [(r["kind"], r["step"]) for r in records] == STEPS
    assert len([kind for kind, _ in Recording.calls if kind == "metrics"]) == 6  # the one after it too


def test_a_missing_package_is_one_line_naming_it_before_anything_is_written(
    acme: PluginManager, make_config: MakeConfig, train: Train, tmp_path: Path
) -> None:
    config = make_config(*SHORT, "rllm.trainer.logger=[jsonl,needs_missing]")
    with pytest.raises(TrackerError) as caught:
        train(config)
    message = str(caught.value)
    assert message == (
        "rllm.trainer.logger names tracker 'needs_missing' (plugin 'acme', distribution acme-trackers 1.0), which "
        "needs the package 'rllm_module_that_is_not_installed': pip install 'rllm-fixture-missing[tracker]'."
    )
    assert not (tmp_path / "run").exists()


def test_a_lazy_path_that_does_not_import_names_the_plugin(acme: PluginManager, make_config: MakeConfig) -> None:
    config = make_config(*SHORT, "rllm.trainer.logger=[lazy]")
    with pytest.raises(PluginContractError, match=r"Tracker 'lazy' of plugin 'acme'.*cannot be loaded from"):
        Trackers(config.rllm.trainer.logger, TrackerRun("", Path("x"), "p", "e"))


def test_an_unknown_tracker_names_the_closest(acme: PluginManager, make_config: MakeConfig) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config("rllm.trainer.logger=[recordng]")
    assert str(caught.value) == (
        "rllm.trainer.logger must be a list of strings, each one of console, flaky, jsonl, lazy, needs_missing, "
        "recording; got ['recordng']. Did you mean 'recording'?"
    )


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        (len, "which is <built-in function len>, not a class"),
        (dict, "which has no method log_metrics() (subclass rllm.trainer.Tracker)"),
    ],
)
def test_registering_what_is_not_a_tracker_class_is_refused(
    plugin_manager: PluginManager, target: object, problem: str
) -> None:
    class Wrong:
        @rllm.hookimpl
        def rllm_register_trackers(self, register: Any) -> None:
            register("wrong", target)

    with pytest.warns(rllm.errors.PluginWarning, match="registered tracker 'wrong'"):
        info = plugin_manager.register(Wrong(), SOURCE)
    assert info.status == "failed" and problem in (info.error or "")


def test_an_unwritable_tracker_folder_is_one_line_naming_key_and_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    run = TrackerRun("tb", tmp_path, "p", "e", {"rllm": {"tb": {"log_dir": str(blocker / "logs")}}})
    with pytest.raises(TrackerError) as caught:
        run.folder("rllm.tb.log_dir")
    assert str(caught.value).startswith(f"Tracker 'tb' cannot create its folder '{blocker / 'logs'}' (rllm.tb.log_dir)")
    assert str(caught.value).endswith("set rllm.tb.log_dir to a writable folder.")


def test_flatten_and_finite() -> None:
    assert flatten_config({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": {}}) == {"a.b": 1, "a.c.d": [1, 2], "e": {}}
    assert finite_metrics({"x": 1, "y": float("nan"), "z": "text", "w": True, "v": 2.5}) == {"x": 1.0, "v": 2.5}


def test_the_jsonl_tracker_keeps_metrics_jsonl_as_before(make_config: MakeConfig, train: Train) -> None:
    trainer, records = train(make_config(*SHORT))
    assert read_metrics(trainer.output_dir / METRICS_FILE) == records
    first_train = next(r for r in records if r["kind"] == "train")
    assert list(first_train)[:4] == ["kind", "step", "epoch", "wall_time"]
