"""Sampling at a real vocabulary (Qwen's 151,936 tokens) on a tiny-width model built from a config.

Per generated token only the ``rows`` chosen ids (and their log-probs) may leave the model's
device: a :class:`~torch.overrides.TorchFunctionMode` records every conversion to the host
(``.cpu()``, ``.tolist()``, ``.item()``, ``.numpy()``, ``bool()`` ...) with its size. The first
forward computes one position's logits per row, the log-probs returned are a fresh forward
pass's, and an episode's draws depend on its seed only, whatever shares its batches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import numpy as np
import torch
from omegaconf import OmegaConf
from torch.overrides import TorchFunctionMode

from rllm.engine import Generation
from rllm_transformers.batch import token_log_probs
from rllm_transformers.engine import Sampling, TransformersEngine, UniformStream, draw_rows
from rllm_transformers.model import tiny_model

VOCAB = 151_936
PAD, EOS = VOCAB - 1, VOCAB - 2

TO_HOST = frozenset(
    {"tolist", "item", "numpy", "cpu", "__array__", "__bool__", "__int__", "__float__", "__index__", "__iter__"}
)
"""Tensor methods whose result lives on the host (Python numbers or lists, numpy, a CPU tensor)."""


class Tokenizer:
    """The little the engine asks of a tokenizer: pad and EOS ids and ``decode``."""

    pad_token_id = PAD
    eos_token_id = EOS
    chat_template = None

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return " ".join(str(i) for i in ids)


class HostCopies(TorchFunctionMode):
    """Records ``(method, elements)`` for each tensor moved to the host while active."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[tuple[str, int]] = []

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if source is not None and (name in TO_HOST or (name == "to" and _names_cpu(args, kwargs))):
            self.copies.append((name, source.numel()))
        return func(*args, **kwargs)


def _names_cpu(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """Whether a ``.to(...)`` asks for the host by name (``"cpu"``).

    A ``torch.device`` target is the device the code computes on (``.to(x.device)`` in the
    model, the engine's ``device``), the host itself on a CPU-only machine, so it does not count.
    """
    targets = [*args[1:], kwargs.get("device")]
    return any(isinstance(t, str) and t.startswith("cpu") for t in targets)


def _engine(max_new_tokens: int = 4, sampling: Sampling | None = None) -> TransformersEngine:
    torch.manual_seed(0)
    options = OmegaConf.create({"hidden_size": 16, "num_layers": 1, "init_std": 0.2})
    model = tiny_model(options, VOCAB, PAD, EOS)
    return TransformersEngine(
        model, Tokenizer(), torch.device("cpu"), UniformStream(0), sampling or Sampling(),
        max_new_tokens, 64, True,
    )  # fmt: skip


PROMPTS = ([5, 17, 151_000, 42], [7], [99_999, 3, 3], [120_000, 1, 2, 3, 4, 5, 6])


def _episodes(engine: TransformersEngine, seeds: Sequence[int], prompts: Sequence[Sequence[int]]) -> list[Generation]:
    """One call per episode, all submitted together (so batched), each from its episode's view."""

    async def run() -> list[Generation]:
        views = [engine.for_episode(seed) for seed in seeds]
        return list(await asyncio.gather(*(v.generate(p) for v, p in zip(views, prompts, strict=True))))

    return asyncio.run(run())


def test_no_generated_token_moves_more_than_rows_elements_to_the_host() -> None:
    """4 rows x 4 tokens: every copy is at most the results (rows x tokens), all together at most 4 per row and token.

    Copying the ``[rows, vocab]`` probabilities once (what drawing on the host did) breaks both bounds.
    """
    engine = _engine(max_new_tokens=4)
    rows, steps = len(PROMPTS), engine.max_new_tokens
    recorder = HostCopies()
    with recorder:
        generations = _episodes(engine, range(rows), PROMPTS)
    assert [len(g.response_ids) for g in generations] == [steps] * rows  # no EOS: every row ran every step
    assert recorder.copies, "the recorder saw nothing: the results themselves come back through tolist()"
    largest = max(elements for _, elements in recorder.copies)
    total = sum(elements for _, elements in recorder.copies)
    assert largest <= rows * steps, recorder.copies
    assert total <= 4 * rows * steps, (total, recorder.copies)


def test_each_draw_is_the_plain_inverse_cdf_of_its_uniform() -> None:
    """32 rows of random logits at this vocabulary against numpy's float64 running total and binary search."""
    rows = 32
    logits = 3.0 * torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(5))
    logits[:, 1000:1100] = float("-inf")  # a cut-away run inside a block
    log_p = torch.log_softmax(logits, dim=-1)
    uniforms = torch.rand(rows, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    drawn = draw_rows(log_p, uniforms).tolist()
    for row in range(rows):
        running = np.cumsum(log_p[row].exp().double().numpy())
        expected = int(np.searchsorted(running, float(uniforms[row]) * running[-1], side="right"))
        assert drawn[row] == expected, row
    assert len(set(drawn)) > rows // 2


def test_the_first_forward_computes_the_last_positions_logits_only() -> None:
    engine = _engine(max_new_tokens=3)
    shapes: list[tuple[int, ...]] = []
    engine.model.register_forward_hook(lambda _m, _i, out: shapes.append(tuple(out.logits.shape)))
    _episodes(engine, range(len(PROMPTS)), PROMPTS)
    assert shapes == [(len(PROMPTS), 1, VOCAB)] * 3


def test_the_sampled_log_probs_are_a_fresh_forward_passes() -> None:
    """At temperature 1 each returned log-prob equals one unpadded forward over prompt + reply (<= 1e-5)."""
    engine = _engine(max_new_tokens=5)
    generations = _episodes(engine, range(len(PROMPTS)), PROMPTS)
    for prompt, generation in zip(PROMPTS, generations, strict=True):
        ids = torch.tensor([[*prompt, *generation.response_ids]])
        with torch.no_grad():
            fresh, _ = token_log_probs(engine.model, ids, torch.ones_like(ids))
        expected = fresh[0, len(prompt) - 1 :]
        assert expected.shape == (len(generation.response_ids),)
        torch.testing.assert_close(torch.tensor(generation.logprobs), expected, rtol=0, atol=1e-5)
        assert float(expected.max() - expected.min()) > 0.1  # not the uniform -log(151,936) that any token gets


def test_an_episode_samples_the_same_tokens_alone_and_in_any_batch() -> None:
    engine = _engine(max_new_tokens=4, sampling=Sampling(temperature=0.8, top_k=50))
    alone = [_episodes(engine, [seed], [prompt])[0] for seed, prompt in enumerate(PROMPTS)]
    together = _episodes(engine, range(len(PROMPTS)), PROMPTS)
    reversed_ = _episodes(engine, range(len(PROMPTS))[::-1], PROMPTS[::-1])[::-1]
    for a, b, c in zip(alone, together, reversed_, strict=True):
        assert a.response_ids == b.response_ids == c.response_ids
        torch.testing.assert_close(torch.tensor(b.logprobs), torch.tensor(a.logprobs), rtol=0, atol=1e-5)
    assert len({tuple(g.response_ids) for g in alone}) == len(PROMPTS)


def test_rows_sharing_a_prompt_prefill_it_once_and_sample_as_they_would_alone() -> None:
    """A task's rollouts: 5 rows of 2 prompts prefill 2 rows; each row's draws are its episode's, as sampled alone."""
    engine = _engine(max_new_tokens=4, sampling=Sampling(temperature=0.8, top_k=50))
    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[0], PROMPTS[0], PROMPTS[2]]
    alone = [_episodes(engine, [seed], [prompt])[0] for seed, prompt in enumerate(prompts)]
    fed: list[int] = []
    engine.model.register_forward_pre_hook(lambda _m, _a, kw: fed.append(len(kw["input_ids"])), with_kwargs=True)
    together = _episodes(engine, range(len(prompts)), prompts)
    assert fed == [2, 5, 5, 5]  # the prefill of the distinct prompts, then every row's next tokens
    for a, b in zip(alone, together, strict=True):
        assert a.response_ids == b.response_ids
        torch.testing.assert_close(torch.tensor(b.logprobs), torch.tensor(a.logprobs), rtol=0, atol=1e-5)
    assert len({tuple(together[i].response_ids) for i in (0, 2, 3)}) > 1  # one prompt, several replies
