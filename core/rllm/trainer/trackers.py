"""Experiment trackers: where a run's metrics, resolved config and learning curve go (``rllm.trainer.logger``).

A tracker is a plugin part (``rllm_register_trackers``): a :class:`Tracker` subclass that rllm
constructs with a :class:`TrackerRun`. :class:`Trackers` is the trainer's side: it resolves the
configured names before anything runs (an unknown name or a missing package is one line), then
hands every record to each tracker, and switches off, with one warning naming it, a tracker that
raises mid-run, so the run and the other trackers go on.

A tracker is code rllm does not own, so each runs on a thread of its own
(:class:`~rllm.usercode.UserThreads`): a call that does not return within
``rllm.trainer.tracker_timeout`` seconds (a remote MLflow or wandb that stops answering) counts as a
failure, and so does ``sys.exit()``. Each tracker gets its own copy of every record, so one that
edits the mapping it is given (renaming keys) changes nothing another tracker, ``metrics.jsonl``
included, receives.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import math
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rllm.errors import RLLMError, RLLMWarning, RunDirError, TrackerError, UserCodeExit
from rllm.usercode import UserThreads


@dataclass(frozen=True)
class TrackerRun:
    """What a tracker knows of its run when it is constructed.

    ``config`` is the run's resolved config as plain nested dicts; :meth:`setting` reads one key of it.
    """

    name: str
    output_dir: Path
    project: str
    experiment: str
    config: Mapping[str, Any] = field(default_factory=dict)
    progress: bool = True

    def setting(self, path: str, default: Any = None) -> Any:
        """The value of the dotted config key ``path`` (``"rllm.tensorboard.log_dir"``), or ``default``."""
        node: Any = self.config
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    def folder(self, key: str) -> Path:
        """The folder config key ``key`` names, created; one line naming the key and folder when it cannot be."""
        path = Path(str(self.setting(key)))
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TrackerError(
                f"Tracker {self.name!r} cannot create its folder {str(path)!r} ({key}): {exc.strerror or exc}; "
                f"set {key} to a writable folder."
            ) from None
        probe = path / ".rllm-write-probe"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise TrackerError(
                f"Tracker {self.name!r} cannot write in its folder {str(path)!r} ({key}): {exc.strerror or exc}; "
                f"set {key} to a writable folder."
            ) from None
        return path


class Tracker:
    """Base class of experiment trackers; a subclass defines :meth:`log_metrics`, the rest is optional.

    The constructor only reads settings (it runs before the run directory is claimed);
    :meth:`start` opens what the tracker writes. ``needs`` lists the modules it imports and
    ``install`` what provides them (``"rllm[tensorboard]"``): a missing one is one line before the run.
    """

    needs: ClassVar[tuple[str, ...]] = ()
    install: ClassVar[str] = ""

    def __init__(self, run: TrackerRun) -> None:
        self.run = run

    def outputs(self) -> Sequence[Path]:
        """Files or folders this tracker writes; those inside the run directory are deleted when a run starts over."""
        return ()

    def start(self, total_steps: int) -> None:
        """The run begins (after resuming, if it resumes): open files, connect."""

    def rewind(self, step: int, kept: Sequence[Mapping[str, Any]]) -> None:
        """The run resumed from its checkpoint of ``step`` (called right after :meth:`start`): drop what this tracker
        holds of later steps, which a killed run logged and the resumed run logs again, so each step is there once.

        ``kept`` are the records of ``metrics.jsonl`` up to ``step`` (``kind``, ``step`` and the metrics; empty
        without the ``jsonl`` tracker), for a library that cannot take records back and starts its run over with
        them instead. The default keeps everything: a tracker that appends only holds those steps twice.
        """

    def log_config(self, config: Mapping[str, Any]) -> None:
        """The resolved config (nested dicts), once at the start: log it as hyper-parameters."""

    def log_metrics(self, metrics: Mapping[str, Any], step: int, kind: str) -> None:
        """One record: ``metrics`` by key (``epoch`` and ``wall_time`` first), ``kind`` ``"train"`` or ``"val"``."""
        raise NotImplementedError

    def log_image(self, name: str, path: Path, step: int) -> None:
        """A PNG file (the learning curve, ``name`` ``"learning_curve"``), after the last step."""

    def close(self) -> None:
        """The run ends (also after an error): flush and close."""


def finite_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The values of ``metrics`` that are finite numbers, as floats: what a tracker library can store."""
    kept = {}
    for key, value in metrics.items():
        if isinstance(value, bool | str | bytes):
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            kept[key] = number
    return kept


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config dicts as one level of dotted keys (``{"rllm.trainer.total_epochs": 10}``), lists kept whole."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, path + "."))
        else:
            flat[path] = value
    return flat


@dataclass
class NamedTracker:
    """A tracker of a run, with its name in ``rllm.trainer.logger``, its plugin (for warnings) and its thread."""

    name: str
    tracker: Tracker
    who: str
    thread: UserThreads = field(default_factory=lambda: UserThreads(1, "rllm-tracker"), repr=False)
    stuck: bool = False
    """A call of it was still running at the deadline: nothing more is asked of it."""


class TrackerTimeout(Exception):
    """A tracker call still running at the deadline (its thread is left to it)."""


def _missing_module(modules: Iterable[str]) -> str | None:
    for module in modules:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):
            return module
    return None


class Trackers:
    """The trackers ``rllm.trainer.logger`` names, resolved and constructed before the run starts."""

    def __init__(self, names: Iterable[str], run: TrackerRun, timeout: float | None = None) -> None:
        from dataclasses import replace

        from rllm.plugins.hook_kinds import tracker_class
        from rllm.plugins.manager import get_plugin_manager

        registry = get_plugin_manager().trackers
        self.timeout = timeout
        self.chosen: list[NamedTracker] = []  # every tracker named, constructed; start() opens them into active
        self.active: list[NamedTracker] = []
        for name in dict.fromkeys(str(name) for name in names):
            entry = registry.resolve(name)
            who = entry.source.describe()
            cls = tracker_class(entry)
            missing = _missing_module(getattr(cls, "needs", ()))
            if missing is not None:
                install = getattr(cls, "install", "") or missing
                raise TrackerError(
                    f"rllm.trainer.logger names tracker {name!r} ({who}), which needs the package {missing!r}: "
                    f"pip install '{install}'."
                )
            thread = UserThreads(1, f"rllm-tracker-{name}")
            make = functools.partial(cls, replace(run, name=name))
            try:
                tracker = self._guarded(name, who, thread, "construct", make)
            except BaseException:  # the run does not start: no tracker thread is left waiting
                for idle in [thread, *(chosen.thread for chosen in self.chosen)]:
                    idle.shutdown(wait=False)
                raise
            self.chosen.append(NamedTracker(name, tracker, who, thread))
        self.started = time.time()

    def _call(self, thread: UserThreads, call: Callable[[], Any]) -> Any:
        """``call()`` on the tracker's thread, waited for at most ``timeout`` seconds (:class:`TrackerTimeout`)."""
        future = thread.submit(call)
        try:
            return future.result(self.timeout)
        except futures.TimeoutError:
            if not future.done():
                raise TrackerTimeout from None
            raise

    def _late(self, what: str) -> str:
        return f"did not return from {what}() within {self.timeout:g} s (rllm.trainer.tracker_timeout)"

    def _guarded(self, name: str, who: str, thread: UserThreads, what: str, call: Callable[[], Any]) -> Any:
        """Before the run: a tracker's rllm error propagates, anything else is one line naming it."""
        try:
            return self._call(thread, call)
        except TrackerTimeout:
            raise TrackerError(
                f"Tracker {name!r} ({who}) {self._late(what)}; check that what it connects to answers, or raise "
                "rllm.trainer.tracker_timeout."
            ) from None
        except UserCodeExit as exc:
            raise TrackerError(f"Tracker {name!r} ({who}), in {what}(), {exc}") from None
        except RLLMError:
            raise
        except Exception as exc:
            raise TrackerError(f"Tracker {name!r} ({who}) failed to {what}: {type(exc).__name__}: {exc}") from exc

    def outputs(self) -> list[Path]:
        """What every tracker writes (files or folders)."""
        return [Path(path) for chosen in self.chosen for path in chosen.tracker.outputs()]

    def start(
        self,
        total_steps: int,
        config: Mapping[str, Any],
        resumed_at: int | None = None,
        kept: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Open every tracker (rewound to ``resumed_at`` when the run resumed, :meth:`Tracker.rewind`), then give each
        the resolved config; one that cannot start or rewind stops the run."""
        self.started = time.time()
        for chosen in self.chosen:
            self._guarded(
                chosen.name, chosen.who, chosen.thread, "start", functools.partial(chosen.tracker.start, total_steps)
            )
            if resumed_at is not None:
                rewind = functools.partial(chosen.tracker.rewind, resumed_at, copy.deepcopy(list(kept)))
                self._guarded(chosen.name, chosen.who, chosen.thread, "rewind", rewind)
            self.active.append(chosen)
        self._each("log_config", config)

    def log(self, data: Mapping[str, Any], step: int, kind: str = "train", epoch: int | None = None) -> None:
        """One record to every tracker; ``epoch`` and the seconds since the start come first."""
        metrics: dict[str, Any] = {} if epoch is None else {"epoch": epoch}
        metrics["wall_time"] = round(time.time() - self.started, 3)
        metrics.update(data)
        self._each("log_metrics", metrics, step, kind)

    def log_image(self, name: str, path: Path, step: int) -> None:
        self._each("log_image", name, path, step)

    def _each(self, method: str, *args: Any) -> None:
        """``method(*args)`` of every active tracker, each given its own copy of ``args`` (it may edit them)."""
        for active in list(self.active):
            why = self._failure(
                active, method, functools.partial(getattr(active.tracker, method), *copy.deepcopy(args))
            )
            if why is not None:
                self._drop(active, why)

    def _failure(self, active: NamedTracker, method: str, call: Callable[[], Any]) -> str | None:
        """Run ``call``; what went wrong, said after the tracker's name (None: it returned)."""
        try:
            self._call(active.thread, call)
        except RunDirError:  # the run directory itself cannot be written: checkpoints would fail too
            raise
        except TrackerTimeout:
            active.stuck = True
            return self._late(method)
        except UserCodeExit as exc:
            return f"{exc.how} in {method}()"
        except Exception as exc:
            return f"raised {type(exc).__name__} in {method}(): {exc}"
        return None

    def _drop(self, active: NamedTracker, why: str) -> None:
        self.active.remove(active)
        warnings.warn(
            f"Tracker {active.name!r} ({active.who}) {why}; it is off for the rest of this run, which goes on "
            "with the other trackers.",
            RLLMWarning,
            stacklevel=4,
        )
        if not active.stuck:  # it has already failed once: its close is best effort (none while a call still runs)
            with contextlib.suppress(Exception):
                self._call(active.thread, active.tracker.close)

    def finish(self) -> None:
        """Close every tracker (once); one that fails to close is said like one that fails mid-run."""
        closing, self.active = self.active, []
        for active in closing:
            why = self._failure(active, "close", active.tracker.close)
            if why is not None:
                warnings.warn(f"Tracker {active.name!r} ({active.who}) {why}.", RLLMWarning, stacklevel=2)
        for chosen in self.chosen:  # idle threads end; a later start() (the same trainer fitted again) gets fresh ones
            chosen.thread.shutdown(wait=False)
            chosen.thread, chosen.stuck = UserThreads(1, f"rllm-tracker-{chosen.name}"), False


__all__ = ["NamedTracker", "Tracker", "TrackerRun", "Trackers", "finite_metrics", "flatten_config"]
