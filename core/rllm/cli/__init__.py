"""The ``rllm`` command line; each subcommand is one module with ``add_parser`` and ``run``.

Public for plugins' own commands (``python -m rllm_transformers.warm_start``): the standard-output
handling every command-line door shares, so a full device or a closed pipe ends them alike.
"""

from __future__ import annotations

from rllm.cli.stdout import Parser, flushed, stdout_failed

__all__ = ["Parser", "flushed", "stdout_failed"]
