"""Runs verl's TrainingWorker (rllm_verl.worker) on a saved row batch: ``python worker_run.py SPEC`` or under torchrun.

SPEC is a JSON file: ``model`` (a model directory), ``batch`` (safetensors: ids, attention, mask,
advantages), ``out`` (a directory), ``options`` (WorkerOptions fields but the loss) and ``losses``
(``[name, agg_mode]`` pairs). For each loss a fresh worker scores the batch (its old log-probs)
and takes one update; rank 0 writes ``logp.safetensors`` (the first worker's log-probs), and per
loss ``<name>.json`` (verl's metrics) and ``<name>.safetensors`` (the updated weights).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(spec_path: str) -> None:
    from rllm_verl.cpu_platform import prepare_cpu_process

    prepare_cpu_process()
    import torch
    from safetensors.torch import load_file, save_file

    from rllm_verl.worker import VerlWorker, WorkerOptions

    torch.set_num_threads(1)
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    batch = load_file(spec["batch"])
    ids, attention, mask = batch["ids"], batch["attention"], batch["mask"]
    rank = torch.distributed.get_rank()
    for index, (loss, mode) in enumerate(spec["losses"]):
        options = WorkerOptions(**spec["options"], loss=loss, loss_agg_mode=mode)
        worker = VerlWorker(spec["model"], options, pad_id=int(spec["pad_id"]))
        old = worker.log_probs(ids, attention, mask)
        if index == 0 and rank == 0:
            save_file({"logp": old.contiguous()}, str(out / "logp.safetensors"))
        metrics = worker.update(ids, attention, mask, old * mask, batch["advantages"])
        weights = {name: value.detach().clone().contiguous() for name, value in worker.full_weights().items()}
        if rank == 0:
            (out / f"{loss}.json").write_text(json.dumps(metrics))
            save_file(weights, str(out / f"{loss}.safetensors"))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
