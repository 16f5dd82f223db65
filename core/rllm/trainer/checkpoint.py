"""Checkpoints: ``{output_dir}/checkpoints/step_{N}`` directories of data, checked before use.

A checkpoint holds JSON and the backend's array files, never code: nothing in it is
unpickled or imported, so a planted file cannot run. It is written into a hidden temporary
directory, closed by ``MANIFEST.json`` (format, version, and each file's size and sha256,
written last), then renamed into place; ``latest`` then names it. Before a checkpoint is
used every file is checked against its manifest, so a truncated, altered or foreign-format
one is reported naming the file, and resuming falls back to the newest intact checkpoint.
Files a manifest does not list are never read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from rllm.errors import CheckpointError, CorruptCheckpointError
from rllm.estimators.state import EstimatorStates
from rllm.io import os_cause, write_atomic
from rllm.trainer.backend_protocol import BackendProtocol, TrainerState
from rllm.trainer.dynamic_sampling import SamplingState
from rllm.trainer.rejection import RejectionSamplingState
from rllm.trainer.rejection_state import decode_rejection_state, encode_rejection_state

FORMAT = "rllm-checkpoint"
VERSION = 2
"""Checkpoint layout version written; bumped when the layout changes."""
READABLE = {1: (), 2: ("estimators.json", "sampling.json")}
"""Versions this rllm reads, with the files each adds to trainer.json and rejection_state.json
(version 1 had no estimator or dynamic-sampling state: such a checkpoint resumes with fresh ones)."""
MANIFEST = "MANIFEST.json"
TRAINER_FILE = "trainer.json"
RS_FILE = "rejection_state.json"
ESTIMATORS_FILE = "estimators.json"
SAMPLING_FILE = "sampling.json"
POLICY_FILE = "policy.json"
"""The policy version and the batches sampled and not yet trained (read when the manifest lists it)."""
ASYNC_FILE = "async.json"
""":data:`POLICY_FILE`'s earlier name, which only asynchronous runs wrote; read from their checkpoints."""
LATEST = "latest"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_SCRATCH = re.compile(r"^(\.step_\d+\.(partial|discard)-\d+|\.latest\..+\.tmp)$")
"""Checkpoints being written or removed, and ``latest`` being replaced; left behind only by a killed run."""


def _sha256(path: Path, sync: bool = False) -> str:
    """The file's sha256; with ``sync``, also flushed to disk (the manifest is about to vouch for it)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
        if sync:
            os.fsync(handle.fileno())
    return digest.hexdigest()


def _remove(path: Path) -> None:
    """Rename ``path`` out of the checkpoint namespace, then delete it: a kill midway leaves only scratch."""
    scratch = path.with_name(f".{path.name}.discard-{os.getpid()}")
    os.replace(path, scratch)
    shutil.rmtree(scratch)


def _estimator_json(state: TrainerState) -> str:
    """The stateful estimators' states as JSON text; a state that is not plain finite JSON data is refused by name."""
    data = state.estimator_states.state_dict()
    for name, roles in data.items():
        try:
            json.dumps(roles, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(
                f"Estimator {name!r} returned a state_dict() that is not plain JSON data ({exc}); return dicts, "
                "lists, strings, finite numbers, booleans and None only."
            ) from None
    return json.dumps(data, allow_nan=False)


def _count(counters: Any, key: str) -> int:
    """A non-negative integer counter of ``trainer.json`` (a float, bool or string is refused, not rounded)."""
    value = counters[key]
    if type(value) is not int or value < 0:
        raise ValueError(f"{TRAINER_FILE} holds {key}={value!r}, not a count")
    return value


def _in_flight(path: Path) -> tuple[int, list[Any]]:
    """The policy version and the batches sampled and not yet trained in :data:`POLICY_FILE` (or its earlier name),
    when the manifest lists it."""
    listed = json.loads((path / MANIFEST).read_bytes())["files"]
    name = next((name for name in (POLICY_FILE, ASYNC_FILE) if name in listed), None)
    if name is None:
        return 0, []
    from rllm.rollouts.batch_source import SampledBatch

    data = json.loads((path / name).read_bytes())
    version = _count(data, "policy_version")
    pending = list(data["pending"])
    for batch in pending:
        SampledBatch.from_json(batch)  # each decodes before anything is restored
    return version, pending


class CheckpointManager:
    """Saves and restores the trainer counters, rejection-sampling state and the backend's state.

    ``fingerprint`` describes the settings a checkpoint is only valid for (estimator, backend,
    ...); resuming under different settings is refused rather than silently mixing runs.
    """

    def __init__(self, root: Path, fingerprint: dict[str, Any], keep: int = 3) -> None:
        self.root = Path(root)
        self.fingerprint = fingerprint
        self.keep = max(int(keep), 1)

    def steps(self) -> list[tuple[int, Path]]:
        """Every ``step_N`` directory, intact or not, oldest first."""
        found = []
        if self.root.is_dir():
            for child in self.root.iterdir():
                match = _STEP_DIR.match(child.name)
                if match and child.is_dir():
                    found.append((int(match.group(1)), child))
        return sorted(found)

    # -- validation ---------------------------------------------------------------------------
    def problem(self, path: Path) -> str | None:
        """Why the checkpoint at ``path`` cannot be used (naming the file), or None if it is intact."""
        manifest_file = path / MANIFEST
        try:
            manifest = json.loads(manifest_file.read_bytes())
        except FileNotFoundError:
            return f"checkpoint {str(path)!r} has no {MANIFEST}: it was not written whole by this version of rllm"
        except (OSError, ValueError) as exc:
            return f"checkpoint file {str(manifest_file)!r} is unreadable or truncated ({exc})"
        version = manifest.get("version") if isinstance(manifest, dict) else None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or version not in READABLE:
            found = (manifest.get("format"), version) if isinstance(manifest, dict) else manifest
            readable = " or ".join(map(str, READABLE))
            return f"checkpoint file {str(manifest_file)!r} describes {found!r}; this rllm reads {FORMAT!r} {readable}"
        files = manifest.get("files")
        needed = {TRAINER_FILE, RS_FILE, *READABLE[version]}
        if not isinstance(files, dict) or not needed <= set(files):
            return f"checkpoint file {str(manifest_file)!r} does not list {', '.join(sorted(needed))}"
        for name, expected in sorted(files.items()):
            target = path / name
            if Path(name).is_absolute() or ".." in Path(name).parts or not isinstance(expected, dict):
                return f"checkpoint file {str(manifest_file)!r} lists {name!r}, which is not a file of the checkpoint"
            if not target.is_file():
                return f"checkpoint file {str(target)!r} is missing"
            try:
                size, digest = target.stat().st_size, _sha256(target)
            except OSError as exc:
                return f"checkpoint file {str(target)!r} is unreadable ({exc.strerror or exc})"
            if size != expected.get("size"):
                return f"checkpoint file {str(target)!r} has {size} bytes where {expected.get('size')} were written"
            if digest != expected.get("sha256"):
                return f"checkpoint file {str(target)!r} is corrupt (its sha256 differs from {MANIFEST})"
        return None

    def _intact_before(self, step: int) -> Path | None:
        for earlier_step, earlier in reversed(self.steps()):
            if earlier_step < step and self.problem(earlier) is None:
                return earlier
        return None

    def _unusable(self, path: Path, reason: str) -> CorruptCheckpointError:
        match = _STEP_DIR.match(path.name)
        earlier = self._intact_before(int(match.group(1))) if match else None
        where = (
            f"the newest intact earlier checkpoint is {str(earlier)!r}"
            if earlier is not None
            else "no earlier checkpoint is intact; set rllm.trainer.resume_mode=disable to start over"
        )
        return CorruptCheckpointError(f"{reason[0].upper()}{reason[1:]}; {where}.")

    # -- writing ------------------------------------------------------------------------------
    def save(self, state: TrainerState, backend: BackendProtocol) -> Path:
        """Write a checkpoint of ``state`` and ``backend``; a write failure leaves the earlier ones as they were."""
        rs_state = state.rs_state if isinstance(state.rs_state, RejectionSamplingState) else RejectionSamplingState()
        rs_data = encode_rejection_state(rs_state)  # an unstorable value fails here, before any file is touched
        sampling = (state.sampling_state or SamplingState()).to_json()
        estimators = _estimator_json(state)
        in_flight = json.dumps({"policy_version": state.policy_version, "pending": state.pending}, allow_nan=False)
        counters = {
            "global_step": state.global_step,
            "epoch": state.epoch,
            "batches_done": state.batches_done,
            "fingerprint": self.fingerprint,
        }
        final = self.root / f"step_{state.global_step}"
        tmp = self.root / f".step_{state.global_step}.partial-{os.getpid()}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            backend.save_checkpoint(tmp)
            write_atomic(tmp / TRAINER_FILE, json.dumps(counters, indent=2))
            write_atomic(tmp / RS_FILE, json.dumps(rs_data))
            write_atomic(tmp / ESTIMATORS_FILE, estimators)
            write_atomic(tmp / SAMPLING_FILE, json.dumps(sampling))
            write_atomic(tmp / POLICY_FILE, in_flight)
            files = {
                p.relative_to(tmp).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p, sync=True)}
                for p in sorted(tmp.rglob("*"))
                if p.is_file()
            }
            write_atomic(tmp / MANIFEST, json.dumps({"format": FORMAT, "version": VERSION, "files": files}, indent=1))
            if final.exists():
                _remove(final)
            os.replace(tmp, final)
            write_atomic(self.root / LATEST, final.name)
        except OSError as error:
            exc = os_cause(error)
            shutil.rmtree(tmp, ignore_errors=True)
            intact = [p for _, p in self.steps() if (p / MANIFEST).is_file()]
            kept = f"{str(intact[-1])!r} is intact" if intact else "no earlier checkpoint exists"
            raise CheckpointError(
                f"Cannot write checkpoint {str(final)!r}: {exc.strerror or exc}"
                f"{f' ({exc.filename})' if exc.filename else ''}; {kept}. Free space or fix permissions, "
                "then run the same command again to resume."
            ) from error
        try:
            self._prune()
        except OSError as exc:
            raise CheckpointError(
                f"Checkpoint {str(final)!r} is written, but an older one cannot be removed: {exc.strerror or exc}"
                f"{f' ({exc.filename})' if exc.filename else ''}. Fix the permissions of {str(self.root)!r}."
            ) from exc
        return final

    def _prune(self) -> None:
        """Keep the newest ``keep`` complete checkpoints; remove older ones and killed runs' scratch."""
        complete = [step for step, path in self.steps() if (path / MANIFEST).is_file()]
        if len(complete) > self.keep:
            oldest_kept = complete[-self.keep]
            for step, path in self.steps():
                if step < oldest_kept:
                    _remove(path)
        self.remove_scratch()

    def remove_scratch(self) -> None:
        """Delete what a killed run left half-written or half-removed (only one run holds the directory)."""
        if not self.root.is_dir():
            return
        for child in self.root.iterdir():
            if _SCRATCH.match(child.name):
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)

    def discard_all(self) -> None:
        """Remove what rllm writes here (``step_N``, ``latest``, scratch); any other file stays."""
        if not self.root.is_dir():
            return
        for _, path in self.steps():
            _remove(path)
        self.remove_scratch()
        (self.root / LATEST).unlink(missing_ok=True)
        if not any(self.root.iterdir()):
            self.root.rmdir()

    # -- reading ------------------------------------------------------------------------------
    def load(self, path: Path, state: TrainerState, backend: BackendProtocol) -> None:
        """Restore ``state`` and ``backend`` from the checkpoint at ``path``, after checking every file.

        Raises :class:`CorruptCheckpointError` naming the bad file and the newest intact earlier
        checkpoint, and :class:`CheckpointError` if it was written with other settings.
        """
        reason = self.problem(path)
        if reason is not None:
            raise self._unusable(path, reason)
        try:
            counters = json.loads((path / TRAINER_FILE).read_bytes())
            saved = counters["fingerprint"]
            step, epoch, batches = (_count(counters, k) for k in ("global_step", "epoch", "batches_done"))
            named = _STEP_DIR.match(path.name)
            if named is not None and int(named.group(1)) != step:
                raise ValueError(f"{TRAINER_FILE} says global_step {step} in {path.name}")
            if batches > step or epoch > step:
                raise ValueError(f"{TRAINER_FILE} counts more batches or epochs than its {step} steps")
            rs_state = decode_rejection_state(json.loads((path / RS_FILE).read_bytes()))
            has_states = (path / ESTIMATORS_FILE).is_file()
            estimators = json.loads((path / ESTIMATORS_FILE).read_bytes()) if has_states else {}
            EstimatorStates().load_state_dict(estimators)  # its shape is checked before anything is restored
            sampling = (
                SamplingState.from_json(json.loads((path / SAMPLING_FILE).read_bytes()))
                if (path / SAMPLING_FILE).is_file()
                else SamplingState()
            )
            version, pending = _in_flight(path)
        except Exception as exc:  # whatever a tampered file makes the decoders raise: fall back, never a traceback
            raise self._unusable(path, f"checkpoint {str(path)!r} holds data this rllm cannot read ({exc!r})") from exc
        if saved != self.fingerprint:
            changed = settings_changed(saved, self.fingerprint)
            raise CheckpointError(
                f"Checkpoint {str(path)!r} was written with different settings ({changed}). "
                "To start afresh, run the same command with rllm.trainer.experiment_name=NEW_NAME added (or "
                "rllm.trainer.resume_mode=disable to start over in place, replacing this run)."
            )
        try:
            backend.load_checkpoint(path)
        except Exception as exc:  # the backend's files passed the manifest but do not load: as damaged
            raise self._unusable(path, f"the backend cannot load checkpoint {str(path)!r} ({exc!r})") from exc
        state.global_step, state.epoch, state.batches_done, state.rs_state = step, epoch, batches, rs_state
        state.estimator_states.load_state_dict(estimators, repr(str(path / ESTIMATORS_FILE)))
        state.sampling_state = sampling
        state.policy_version, state.pending = version, pending

    def resume(self, state: TrainerState, backend: BackendProtocol, tidy: bool = True) -> tuple[Path | None, list[str]]:
        """Load the newest intact checkpoint; returns it (None if there is none) and why newer ones were skipped.

        If checkpoints exist but none is intact, the newest one's error is raised. ``tidy`` first
        deletes a killed run's scratch (the process that writes the run directory does).
        """
        if tidy:
            self.remove_scratch()
        skipped: list[str] = []
        for _, path in reversed(self.steps()):
            try:
                self.load(path, state, backend)
            except CorruptCheckpointError as exc:
                skipped.append(str(exc))
                continue
            return path, skipped
        if skipped:
            raise CorruptCheckpointError(skipped[0])
        return None, skipped


_CHOICES = {
    "backend": "rllm.backend",
    "estimator": "rllm.algorithm.adv_estimator",
    "estimator_map": "rllm.algorithm.estimator_map",
    "loss_fn": "rllm.algorithm.loss_fn",
}
"""The fingerprint's named choices by the config key that sets them."""


def settings_changed(then: dict[str, Any], now: dict[str, Any]) -> str:
    """The keys whose values differ, each with both values: only what the user changed.

    A change of backend is said once, not as every key of the two backends' sections, and a
    choice the config key already names (the estimator as ``rllm.algorithm.adv_estimator``) once.
    """
    changed = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k))
    sections = {f"rllm.{then.get('backend')}.", f"rllm.{now.get('backend')}."} if "backend" in changed else set()
    shown = []
    for key in changed:
        name = _CHOICES.get(key, key)
        if key.startswith(tuple(sections)) or (name != key and name in changed):
            continue
        shown.append(f"{name}: {then.get(key)!r} then, {now.get(key)!r} now")
    return "; ".join(shown)
