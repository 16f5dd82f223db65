"""``rllm.transformers.max_new_tokens`` and ``max_prompt_length`` left null follow the model's context.

A sixteenth of ``max_position_embeddings`` (at most 4,096) for a reply, the rest (at least 512)
for a prompt: the tiny models keep 16 and 512, a model loaded from a directory gets limits of
its own size, and values that are set win.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

from omegaconf import DictConfig, OmegaConf

from rllm.trainer import UnifiedTrainer
from rllm_transformers.model import token_limits

MakeConfig = Callable[..., DictConfig]


def _model(context: int | None) -> SimpleNamespace:
    return SimpleNamespace(config=SimpleNamespace(max_position_embeddings=context))


@pytest.mark.parametrize(
    ("context", "expected"),
    [(256, (16, 512)), (32_768, (2_048, 30_720)), (131_072, (4_096, 126_976)), (None, (128, 1_920)), (8, (1, 512))],
)
def test_null_limits_come_from_the_models_context(context: int | None, expected: tuple[int, int]) -> None:
    options = OmegaConf.create({"max_new_tokens": None, "max_prompt_length": None})
    assert token_limits(options, _model(context)) == expected


def test_a_limit_that_is_set_wins_and_the_prompt_takes_what_it_leaves() -> None:
    model = _model(32_768)
    assert token_limits(OmegaConf.create({"max_new_tokens": 100, "max_prompt_length": None}), model) == (100, 32_668)
    assert token_limits(OmegaConf.create({"max_new_tokens": None, "max_prompt_length": 7}), model) == (2_048, 7)


def test_the_engine_of_a_directory_model_gets_its_contexts_limits(tiny_config: MakeConfig, tmp_path: Path) -> None:
    trainer = UnifiedTrainer(None, tiny_config("rllm.transformers.tokenizer=text"), progress=False)
    engine = trainer.backend.init_rollout_engine()
    assert (engine.max_new_tokens, engine.max_prompt_length) == (16, 512)  # tiny: context 256
    trainer.backend.model.config.max_position_embeddings = 4_096
    trainer.backend.model.save_pretrained(tmp_path / "saved")
    trainer.backend.tokenizer.save_pretrained(tmp_path / "saved")
    trainer.shutdown()
    trainer = UnifiedTrainer(None, tiny_config(f"rllm.transformers.model={tmp_path / 'saved'}"), progress=False)
    engine = trainer.backend.init_rollout_engine()
    assert (engine.max_new_tokens, engine.max_prompt_length) == (256, 3_840)
    trainer.shutdown()
