"""The engine samples with transformers' Cache API, so a run prints none of transformers' warnings
(its deprecation of ``past_key_values`` given as tuples, or of a cache the model returned being passed back)."""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import DictConfig, OmegaConf
from transformers import Cache

from rllm.tasks import EQUALS
from rllm.trainer import UnifiedTrainer
from rllm_transformers.engine import Sampling, TransformersEngine, UniformStream
from rllm_transformers.model import char_tokenizer, tiny_model


@contextmanager
def transformers_warnings() -> Iterator[list[str]]:
    """What transformers says while the block runs: its Python warnings and its logger's warnings."""
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(f"logger {record.name}: {record.getMessage()}")

    once = getattr(logging.Logger, "warning_once", None)  # transformers' lru-cached warning_once
    if once is not None and hasattr(once, "cache_clear"):
        once.cache_clear()
    logger, handler = logging.getLogger("transformers"), Keep(logging.WARNING)
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield said
    finally:
        logger.removeHandler(handler)
    for warning in caught:
        deprecation = issubclass(warning.category, (DeprecationWarning, FutureWarning))
        if "transformers" in warning.filename or deprecation:
            said.append(f"{warning.category.__name__} at {warning.filename}:{warning.lineno}: {warning.message}")


def test_sample_passes_one_cache_object_and_warns_nothing() -> None:
    tokenizer = char_tokenizer()
    torch.manual_seed(0)
    options = OmegaConf.create({"hidden_size": 32, "num_layers": 1})
    model = tiny_model(options, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    engine = TransformersEngine(model, tokenizer, torch.device("cpu"), UniformStream(0), Sampling(), 4, 8, True)
    caches: list[object] = []
    forward = model.forward

    def spy(*args: object, **kwargs: object) -> object:
        caches.append(kwargs.get("past_key_values"))
        return forward(*args, **kwargs)

    model.forward = spy  # type: ignore[method-assign]

    async def calls() -> list:
        return await asyncio.gather(engine.generate([1, 2, EQUALS]), engine.generate([7, EQUALS]))

    with transformers_warnings() as said:
        generations = asyncio.run(calls())
    longest = max(len(g.response_ids) for g in generations)
    assert longest >= 2  # so the cache is handed back at least once (seed 0 gives this)
    assert len(caches) == longest  # one forward per token, each given the cache created before the loop
    assert all(isinstance(cache, Cache) for cache in caches)
    assert all(cache is caches[0] for cache in caches)
    assert said == []


def test_a_short_training_run_warns_nothing_from_transformers(tiny_config: Callable[..., DictConfig]) -> None:
    with transformers_warnings() as said:
        trainer = UnifiedTrainer(None, tiny_config("rllm.transformers.max_new_tokens=4"), progress=False)
        try:
            trainer.fit()
        finally:
            trainer.shutdown()
    assert said == []


def test_the_warning_catcher_sees_a_transformers_deprecation() -> None:
    """The check above can fail: a deprecation that transformers' logger prints is caught."""
    from transformers.utils import logging as hf_logging

    with transformers_warnings() as said:
        hf_logging.get_logger("transformers.cache_utils").warning_once("past_key_values as a tuple is deprecated")
        warnings.warn("a tuple cache is deprecated", FutureWarning, stacklevel=1)
    assert len(said) == 2 and "tuple" in said[0] and "tuple" in said[1]
