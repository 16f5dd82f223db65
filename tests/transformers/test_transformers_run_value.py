"""One run value on the transformers backend: a role's (estimator, loss) pair as a keyword trains as in the config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

from omegaconf import DictConfig

from rllm.trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics

MakeConfig = Callable[..., DictConfig]
OFF_POLICY = ("rllm.transformers.ppo_epochs=2", "rllm.transformers.mini_batches=2", "rllm.algorithm.eps_clip=0.01")
"""Later mini-batches are off-policy, where the default loss (vanilla PPO) and cispo differ."""


def _run(config: DictConfig, **kwargs: object) -> tuple[UnifiedTrainer, list[dict]]:
    trainer = UnifiedTrainer(None, config, progress=False, **kwargs)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    records = [r for r in read_metrics(trainer.output_dir / METRICS_FILE) if r["kind"] == "train"]
    numbers = [
        {k: v for k, v in r.items() if k != "wall_time" and not k.startswith(("time/", "perf/"))} for r in records
    ]
    return trainer, numbers


def test_the_keyword_and_the_config_route_of_a_role_pair_train_alike(tiny_config: MakeConfig, tmp_path: Path) -> None:
    by_config, expected = _run(tiny_config(*OFF_POLICY, "rllm.algorithm.estimator_map.solver=[rloo,cispo]"))
    assert by_config.backend._settings("solver").name == "cispo"
    keyword = tiny_config(*OFF_POLICY, f"rllm.trainer.output_dir={tmp_path / 'keyword'}")
    by_keyword, numbers = _run(keyword, traj_group_adv_estimator_map={"solver": ("rloo", "cispo")})
    assert by_keyword.backend._settings("solver").name == "cispo"
    assert by_keyword.backend.algorithm is by_keyword.algorithm_config
    assert len(expected) == 2 and numbers == expected
    rloo = tiny_config(
        *OFF_POLICY, "rllm.algorithm.estimator_map.solver=rloo", f"rllm.trainer.output_dir={tmp_path / 'd'}"
    )
    _, default_loss = _run(rloo)
    assert default_loss != expected  # the pair's loss is what made these numbers
