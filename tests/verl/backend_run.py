"""One update through the trainer's stages 4, 5 and 7 with ``rllm.backend=<name>``: ``python backend_run.py SPEC``.

SPEC is a JSON file: ``backend`` (transformers or verl), ``out`` (a directory), ``losses``
(``[name, agg_mode]`` pairs, or ``[name, agg_mode, overrides]`` with that trainer's own overrides),
and optionally ``overrides`` (more config overrides, e.g. the KL's), ``steps`` (default 1),
``roles`` (the two groups' roles) and ``sampler`` (true: the steps carry sampler log-probs unlike
the model's). For each loss a fresh trainer (the tiny model, seed 0, 1 thread) takes the
batch of :func:`verl_batches.two_groups` through its backend ``steps`` times, and the process
writes ``<loss>.json`` (step 1's metrics), ``<loss>-<n>.json`` (step ``n``'s) and
``<loss>.safetensors`` (the weights after the last update and the old log-probs stage 5 left on
the first step's batch); under torchrun, rank 0 writes them. A process of its own: the verl backend starts a
process group and chooses verl's CPU platform before verl is imported.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path


def main(spec_path: str) -> None:
    import torch
    from safetensors.torch import save_file
    from verl_batches import two_groups

    from rllm.config import load_config
    from rllm.trainer import TrainerState, UnifiedTrainer

    torch.set_num_threads(1)
    spec = json.loads(Path(spec_path).read_text())
    out, name = Path(spec["out"]), spec["backend"]
    writes = os.environ.get("RANK", "0") == "0"  # under torchrun rank 0 writes (every rank holds the same numbers)
    section = {
        "transformers": ["rllm.transformers.device=cpu", "rllm.transformers.num_threads=1"],
        "verl": ["rllm.verl.num_threads=1"],
    }[name]
    for loss, mode, *extra in spec["losses"]:
        overrides = [f"rllm.backend={name}", *section, f"rllm.algorithm.loss_fn={loss}", *(extra[0] if extra else [])]
        overrides += [f"rllm.algorithm.loss_agg_mode={mode}", f"rllm.trainer.output_dir={out / 'run'}"]
        overrides += spec.get("overrides", [])
        trainer = UnifiedTrainer(None, load_config(overrides=overrides), progress=False)
        try:
            backend = trainer.backend
            vocab = int(backend.model.get_input_embeddings().num_embeddings)
            steps = int(spec.get("steps", 1))
            for step in range(1, steps + 1):  # fresh groups each step: KL in the reward lowers their rewards
                groups = two_groups(vocab, roles=spec.get("roles"), sampler=bool(spec.get("sampler")))
                state = TrainerState(global_step=step, total_steps=steps, trajectory_groups=groups)
                state.backend_batch = backend.transform_to_backend_batch(state)
                asyncio.run(backend.process_backend_batch(state))
                old = state.backend_batch.old_logps  # the transformers backend fills them in the update's forward
                asyncio.run(backend.update_policy(state))
                old = state.backend_batch.old_logps if old is None else old
                if step == 1:
                    old_log_probs = (old * state.backend_batch.mask).contiguous()
                    if writes:
                        (out / f"{loss}.json").write_text(json.dumps(state.metrics))
                elif writes:
                    (out / f"{loss}-{step}.json").write_text(json.dumps(state.metrics))
            tensors = {key: value.detach().clone().contiguous() for key, value in backend.model.state_dict().items()}
            tensors["old_log_probs"] = old_log_probs
            if writes:
                save_file(tensors, str(out / f"{loss}.safetensors"))
        finally:
            trainer.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
