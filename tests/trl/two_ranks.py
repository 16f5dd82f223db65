"""Run by torchrun with two ranks (tests/trl/test_trl_bridge_ranks.py): two steps of an unpatched GRPOTrainer and of
RLLMGRPOTrainer(estimator="grpo", loss="trl.dapo"), each rank writing what it saw to ``OUT/rank<N>.json``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import tiny_trl
from trl import GRPOTrainer

from rllm_trl import RLLMGRPOTrainer


def main(out: Path) -> None:
    seen = {}
    for cls, bridge in [(GRPOTrainer, {}), (RLLMGRPOTrainer, {"estimator": "grpo", "loss": "trl.dapo"})]:
        trainer = tiny_trl.recorded(
            cls(
                model=tiny_trl.model(),
                processing_class=tiny_trl.tokenizer(),
                reward_funcs=tiny_trl.REWARDS,
                args=tiny_trl.config(out / cls.__name__, per_device_train_batch_size=4),
                train_dataset=tiny_trl.dataset(),
                **bridge,
            )
        )
        tiny_trl.train(trainer)
        seen[cls.__name__] = {
            "processes": trainer.accelerator.num_processes,
            "advantages": [a.tolist() for a in trainer.seen["advantages"]],
            "loss": trainer.seen["loss"],
        }
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
