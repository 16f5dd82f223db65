"""``RLLMGRPOTrainer`` on two processes (torchrun, CPU, gloo) reproduces TRL's own advantages and loss on each rank.

On two ranks the rewards are gathered before the advantages and each rank keeps its slice, and
the loss's token count is the generation batch's over the processes: what one process cannot show.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without("torch", "trl", install="pip install 'rllm[trl]' (CI does)")

HERE = Path(__file__).resolve().parent


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_two_ranks_see_trls_advantages_and_loss(tmp_path: Path) -> None:
    path = os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1"]
    command += [f"--master_port={_port()}", str(HERE / "two_ranks.py"), str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    moved = False
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        theirs, ours = seen["GRPOTrainer"], seen["RLLMGRPOTrainer"]
        assert theirs["processes"] == ours["processes"] == 2
        assert len(ours["advantages"]) == len(theirs["advantages"]) == 2
        for their, our in zip(theirs["advantages"], ours["advantages"], strict=True):
            assert len(our) == len(their) == 4  # this rank's slice of the 8 completions
            assert max(abs(a - b) for a, b in zip(our, their, strict=True)) <= 1e-6
        assert len(ours["loss"]) == len(theirs["loss"]) == 2
        assert all(abs(a - b) <= 1e-6 for a, b in zip(ours["loss"], theirs["loss"], strict=True))
        moved = moved or any(abs(loss) > 1e-3 for loss in ours["loss"])
    assert moved
