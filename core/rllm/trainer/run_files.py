"""What a training run keeps in its run directory, and what resuming or starting over does with it.

The directory holds ``metrics.jsonl``, ``config.yaml``, ``checkpoints/``, ``learning_curve.png``
and, when they are logged below it, the episode files. :class:`RunFiles` claims those names
(through :class:`~rllm.trainer.rundir.RunDirectory`, which locks the directory and refuses
files rllm did not write), saves the config a run ran with, resumes from the newest usable
checkpoint, and, when a run starts over, deletes only what rllm wrote there before.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from rllm.config.loading import CONFIG_FILE, save_config
from rllm.errors import RunDirError
from rllm.io import os_cause
from rllm.rollouts.episode_log import EpisodeLogger
from rllm.trainer.backend_protocol import BackendProtocol, TrainerState
from rllm.trainer.checkpoint import CheckpointManager
from rllm.trainer.logging import METRICS_FILE, truncate_metrics
from rllm.trainer.rundir import RunDirectory

LEARNING_CURVE = "learning_curve.png"
"""Written into the run directory by ``rllm train`` after training."""


class RunFiles:
    """The run directory ``output_dir`` with its checkpoints, (optional) episode logger and trackers' outputs."""

    def __init__(
        self,
        output_dir: Path,
        checkpoints: CheckpointManager,
        episode_logger: EpisodeLogger | None,
        tracker_outputs: Sequence[Path] = (),
    ) -> None:
        self.output_dir = output_dir
        self.checkpoints = checkpoints
        self.episode_logger = episode_logger
        self.tracker_entries = sorted({e for e in map(self._entry, tracker_outputs) if e and e != METRICS_FILE})
        """The run-directory entries the trackers write, beside metrics.jsonl (a tracker's folder, say)."""
        self.run_dir = RunDirectory(self.output_dir, self.names(), libraries=self.tracker_entries)

    def _entry(self, path: Path) -> str | None:
        """The run-directory entry (first component) holding ``path``, if it is under the run directory."""
        base = Path(os.path.abspath(path))
        run = Path(os.path.abspath(self.output_dir))
        return base.relative_to(run).parts[0] if base != run and base.is_relative_to(run) else None

    def episodes_entry(self) -> str | None:
        """The run-directory entry holding the episode files, if they go under the run directory."""
        return None if self.episode_logger is None else self._entry(self.episode_logger.base_dir)

    def names(self) -> list[str]:
        """The entries rllm writes directly inside the run directory."""
        episodes = self.episodes_entry()
        return [
            METRICS_FILE,
            CONFIG_FILE,
            self.checkpoints.root.name,
            LEARNING_CURVE,
            *([episodes] if episodes else []),
            *self.tracker_entries,
        ]

    def acquire(self) -> None:
        """Lock the run directory for this process (see :meth:`RunDirectory.acquire`)."""
        self.run_dir.acquire()

    def start(self, config: DictConfig) -> None:
        """Claim rllm's names in the locked directory and save the config: `rllm train -c` reruns it."""
        self.run_dir.claim()
        save_config(config, self.output_dir)

    def release(self) -> None:
        """Give the run directory up."""
        self.run_dir.release()

    def resume(self, state: TrainerState, backend: BackendProtocol, mode: str, tidy: bool = True) -> bool:
        """Load the newest usable checkpoint into ``state`` and ``backend`` unless ``mode`` is ``disable``.

        Without one the run starts over and the earlier run's files go (:meth:`clear`); with one,
        metrics logged after its step are cut off, so the resumed run appends where it left off.
        ``tidy=False`` (a data-parallel rank other than 0) reads the checkpoint and writes nothing.
        """
        latest, skipped = (None, []) if mode == "disable" else self.checkpoints.resume(state, backend, tidy)
        if not tidy:
            return latest is not None
        self.clear(everything=latest is None)
        if latest is None:
            return False
        if skipped:
            more = f" ({len(skipped) - 1} more unusable)" if len(skipped) > 1 else ""
            print(f"rllm: warning: {skipped[0]} Resuming from it{more}.", file=sys.stderr)
        truncate_metrics(self.output_dir / METRICS_FILE, state.global_step)
        print(f"rllm: resumed from {latest} (step {state.global_step}).", file=sys.stderr)
        return True

    def earlier_entries(self) -> list[str]:
        """What starting over deletes beside the checkpoints, metrics and curve: this run's trackers' entries and
        any other entry an earlier run recorded as rllm's (the folder of a tracker this run does not name)."""
        kept = {METRICS_FILE, CONFIG_FILE, self.checkpoints.root.name, LEARNING_CURVE, self.episodes_entry()}
        return sorted((set(self.tracker_entries) | set(self.run_dir.recorded())) - kept)

    def clear(self, everything: bool) -> None:
        """Delete killed writes' scratch and, with ``everything`` (starting over), all that rllm wrote here before.

        Only rllm's own files go: see :mod:`rllm.trainer.rundir`.
        """
        try:
            if everything:
                self.checkpoints.discard_all()
                (self.output_dir / METRICS_FILE).unlink(missing_ok=True)
                (self.output_dir / LEARNING_CURVE).unlink(missing_ok=True)
                for entry in self.earlier_entries():
                    path = self.output_dir / entry
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path)
                    else:
                        path.unlink(missing_ok=True)
            if self.episode_logger is not None and self.episodes_entry():
                self.episode_logger.discard(logs=everything)
        except OSError as error:
            exc = os_cause(error)
            raise RunDirError(
                f"Cannot clear the earlier run in {str(self.output_dir)!r}: {exc.strerror or exc}"
                f"{f' ({exc.filename})' if exc.filename else ''}."
            ) from exc
