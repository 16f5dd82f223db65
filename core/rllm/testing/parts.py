"""Conformance checks for the parts that are neither estimators, grouping hooks, backends nor losses.

A kernel must give what the numpy path gives; a batch field must reach the doors under its
name; a config section's defaults must pass its own checks (a run that sets nothing would
otherwise be refused); a tracker must take the calls of a run. Each raises
:class:`rllm.errors.ConformanceError` naming the part.
"""

from __future__ import annotations

import numpy as np

from rllm.errors import ConformanceError, RLLMError

_KERNEL_ESTIMATORS = ("grpo", "rloo")
"""Built-in estimators whose numpy path uses every primitive (runs, their starts, centring and scaling)."""


def check_kernel(name: str) -> None:
    """The kernels in force give the advantages the numpy path gives, on contiguous and on shuffled labels."""
    import rllm
    from rllm.estimators.acceleration import numpy_only

    rng = np.random.default_rng(0)
    rewards = rng.normal(0.0, 1.0, 24)
    for labels in (np.repeat(np.arange(6), 4), rng.permutation(np.repeat(np.arange(6), 4))):
        for estimator in _KERNEL_ESTIMATORS:
            try:
                fast = rllm.compute_advantages(estimator, rewards, labels)
            except RLLMError as exc:
                raise ConformanceError(
                    f"kernel {name!r} breaks {estimator}: it raised {type(exc).__name__}: {exc}"
                ) from None
            with numpy_only():
                slow = rllm.compute_advantages(estimator, rewards, labels)
            if not np.allclose(fast, slow, rtol=1e-9, atol=1e-12):
                worst = int(np.argmax(np.abs(np.asarray(fast) - slow)))
                raise ConformanceError(
                    f"kernel {name!r} breaks {estimator}: advantage {worst} is {fast[worst]:.12g} with the kernel, "
                    f"{slow[worst]:.12g} on the numpy path"
                )


def check_batch_field(name: str) -> None:
    """The doors see the field under its name (no other claim wins it) and it says what it holds."""
    from rllm.estimators.resolution import resolve_plugins

    try:
        fields = resolve_plugins().fields
    except RLLMError as exc:
        raise ConformanceError(f"batch field {name!r} cannot be resolved: {exc}") from None
    if name not in fields:
        raise ConformanceError(f"batch field {name!r} is registered but no door sees it")
    if not fields[name].doc:
        raise ConformanceError(f"batch field {name!r} has no doc; `rllm advantages --help` lists it by its doc")


def check_config_section(name: str) -> None:
    """Every key of the section is in the schema in force, and its default passes its own check."""
    from rllm.config.loading import current_schema

    keys = {key.path: key for key in current_schema().keys if key.path.startswith(f"{name}.")}
    if not keys and name not in current_schema().open_sections:
        raise ConformanceError(f"config section {name!r} is registered but is not in the schema in force")
    for path, key in keys.items():
        try:
            key.check(key.default)
        except RLLMError as exc:
            raise ConformanceError(
                f"config key {path}: its default {key.default!r} fails its own check: {exc}"
            ) from None


def check_weight_sync(name: str) -> None:
    """The weight sync resolves to a class (a lazy path imports) that overrides ``push`` and is built from
    ``(config=..., servers=...)``."""
    import inspect

    from rllm.engine.weight_sync import WeightSync
    from rllm.plugins.hook_kinds import weight_sync_class
    from rllm.plugins.manager import get_plugin_manager

    cls = weight_sync_class(get_plugin_manager().weight_syncs.resolve(name))
    if getattr(cls, "push", None) is WeightSync.push:
        raise ConformanceError(f"weight sync {name!r} ({cls.__qualname__}) does not override push(update)")
    try:
        inspect.signature(cls).bind(config=None, servers=[])
    except TypeError as exc:
        raise ConformanceError(
            f"weight sync {name!r} ({cls.__qualname__}) cannot be built as sync_cls(config=..., servers=...): {exc}"
        ) from None


_PNG_1x1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360f8cfc0f01f0005000201a5f645400000000049454e44ae426082"
)
"""A one-pixel PNG: the image a tracker's ``log_image`` is given by the check."""


def check_tracker(name: str) -> None:
    """The tracker goes through a run's calls (start, config, a train and a val record, an image, close) in a
    temporary run directory, on the default config, without raising, and what it says it writes is paths."""
    import tempfile
    from pathlib import Path

    from omegaconf import OmegaConf

    from rllm.config.loading import load_config
    from rllm.trainer.trackers import TrackerRun, Trackers

    with tempfile.TemporaryDirectory(prefix="rllm-tracker-check-") as tmp:
        run_dir = Path(tmp) / "run"
        overrides = [f"rllm.trainer.output_dir={run_dir}", "rllm.trainer.project_name=check"]
        config = OmegaConf.to_container(load_config(overrides=overrides), resolve=True)  # every section's defaults
        run = TrackerRun("", run_dir, "check", name, config, progress=False)  # type: ignore[arg-type]
        try:
            trackers = Trackers([name], run)
            outputs = trackers.outputs()
        except RLLMError as exc:
            raise ConformanceError(f"tracker {name!r} cannot be constructed: {exc}") from None
        if not all(isinstance(path, Path) for path in outputs):
            raise ConformanceError(f"tracker {name!r}: outputs() must give paths; got {outputs!r}")
        tracker = trackers.chosen[0].tracker
        image = Path(tmp) / "curve.png"
        image.write_bytes(_PNG_1x1)
        calls = (
            ("start", (2,)),
            ("log_config", (config,)),
            ("log_metrics", ({"epoch": 0, "wall_time": 0.1, "reward/solver/mean": 0.5}, 1, "train")),
            ("log_metrics", ({"epoch": 0, "wall_time": 0.2, "val/digits/pass@1": 0.25}, 1, "val")),
            ("log_image", ("learning_curve", image, 1)),
            ("close", ()),
        )
        for method, args in calls:
            try:
                getattr(tracker, method)(*args)
            except Exception as exc:
                raise ConformanceError(f"tracker {name!r} raised {type(exc).__name__} in {method}(): {exc}") from None
