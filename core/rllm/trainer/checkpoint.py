"""Checkpoints: ``{output_dir}/checkpoints/step_{N}`` directories that appear whole or not at all.

A checkpoint is first written to a hidden temporary directory and renamed into place, then
the ``latest`` pointer file is replaced atomically. A run killed at any moment therefore
resumes from the last complete checkpoint; half-written directories are ignored and removed.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from pathlib import Path
from typing import Any

from rllm.errors import CheckpointError
from rllm.io import write_atomic
from rllm.trainer.protocol import BackendProtocol, TrainerState
from rllm.trainer.rejection import RejectionSamplingState

TRAINER_FILE = "trainer.json"
RS_FILE = "rejection_state.pkl"
LATEST = "latest"
_STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointManager:
    """Saves and restores the trainer counters, rejection-sampling state and the backend's state.

    ``fingerprint`` describes the settings a checkpoint is only valid for (estimator, backend,
    ...); resuming under different settings is refused rather than silently mixing runs.
    """

    def __init__(self, root: Path, fingerprint: dict[str, Any], keep: int = 3) -> None:
        self.root = Path(root)
        self.fingerprint = fingerprint
        self.keep = max(int(keep), 1)

    def _complete(self) -> list[tuple[int, Path]]:
        found = []
        if self.root.is_dir():
            for child in self.root.iterdir():
                match = _STEP_DIR.match(child.name)
                if match and (child / TRAINER_FILE).is_file():
                    found.append((int(match.group(1)), child))
        return sorted(found)

    def latest(self) -> Path | None:
        """The newest complete checkpoint, by the pointer file or, if that is stale, by scanning."""
        pointer = self.root / LATEST
        if pointer.is_file():
            candidate = self.root / pointer.read_text(encoding="utf-8").strip()
            if (candidate / TRAINER_FILE).is_file():
                return candidate
        complete = self._complete()
        return complete[-1][1] if complete else None

    def save(self, state: TrainerState, backend: BackendProtocol) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"step_{state.global_step}"
        tmp = self.root / f".step_{state.global_step}.partial-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        backend.save_checkpoint(tmp)
        rs_state = state.rs_state
        if isinstance(rs_state, RejectionSamplingState) and (rs_state.groups or rs_state.batches):
            with (tmp / RS_FILE).open("wb") as handle:
                pickle.dump(rs_state, handle)
        counters = {
            "global_step": state.global_step,
            "epoch": state.epoch,
            "batches_done": state.batches_done,
            "fingerprint": self.fingerprint,
        }
        write_atomic(tmp / TRAINER_FILE, json.dumps(counters, indent=2))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        write_atomic(self.root / LATEST, final.name)
        self._prune()
        return final

    def _prune(self) -> None:
        for _, old in self._complete()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        for child in self.root.iterdir():
            if child.name.startswith(".step_") and ".partial-" in child.name:
                shutil.rmtree(child, ignore_errors=True)

    def load(self, path: Path, state: TrainerState, backend: BackendProtocol) -> None:
        """Restore ``state`` and ``backend`` from the checkpoint at ``path``."""
        try:
            counters = json.loads((path / TRAINER_FILE).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"Checkpoint {str(path)!r} cannot be read: {exc}. Delete it to start over.") from exc
        saved = counters.get("fingerprint", {})
        if saved != self.fingerprint:
            changed = sorted(k for k in set(saved) | set(self.fingerprint) if saved.get(k) != self.fingerprint.get(k))
            raise CheckpointError(
                f"Checkpoint {str(path)!r} was written with different settings ({', '.join(changed)}: "
                f"{[saved.get(k) for k in changed]} then, {[self.fingerprint.get(k) for k in changed]} now). "
                "Use another rllm.trainer.experiment_name or output_dir for the new settings, or set "
                "rllm.trainer.resume_mode=disable to start over in place."
            )
        state.global_step = int(counters["global_step"])
        state.epoch = int(counters["epoch"])
        state.batches_done = int(counters["batches_done"])
        rs_file = path / RS_FILE
        if rs_file.is_file():
            with rs_file.open("rb") as handle:
                state.rs_state = pickle.load(handle)
        backend.load_checkpoint(path)

    def clear(self) -> None:
        """Forget every checkpoint (``resume_mode=disable`` starts a run over in place)."""
        shutil.rmtree(self.root, ignore_errors=True)
