"""Log-probs and precision at Qwen's vocabulary (151,936) on a model 16 wide: what a real model's update meets.

The chunked log-probs equal a full ``log_softmax`` over the model's own logits computed here; no
tensor of more than one chunk of logits exists; the entropy's and the squares' passes run only
when asked; bf16-mixed moves the weights at an RL learning rate where bf16-pure leaves most of
them as they were.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import nullcontext
from typing import Any

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import OmegaConf
from torch.utils._python_dispatch import TorchDispatchMode

from rllm.errors import RLLMWarning
from rllm_transformers import logprobs, prefixes
from rllm_transformers.engine import Sampling, TransformersEngine, UniformStream
from rllm_transformers.logprobs import score_tokens
from rllm_transformers.model import tiny_model
from rllm_transformers.precision import precision_of

VOCAB = 151_936


def qwen_vocabulary_model(seed: int = 0) -> Any:
    """The tiny model's shape (4 heads, tied embeddings), 16 wide, one layer, at Qwen's vocabulary."""
    torch.manual_seed(seed)
    return tiny_model(OmegaConf.create({"hidden_size": 16, "num_layers": 1}), VOCAB, pad_id=0, eos_id=1)


def batch(rows: int = 3, width: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (rows, width), generator=torch.Generator().manual_seed(1))
    attention = torch.ones_like(ids)
    attention[-1, width - 3 :] = 0  # a right-padded row
    return ids, attention


def reference(model: Any, ids: torch.Tensor, attention: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The whole pass: every position's logits from the model, a float32 log-softmax over the vocabulary."""
    logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits[:, :-1].float()
    log_p = torch.log_softmax(logits, dim=-1)
    chosen = log_p.gather(-1, ids[:, 1:, None]).squeeze(-1)
    p = log_p.exp()
    keep = attention[:, 1:].float()
    return chosen * keep, -(p * log_p).sum(-1) * keep, (p * p).sum(-1) * keep


@pytest.mark.parametrize("chunk_elements", [logprobs.CHUNK_ELEMENTS, 4 * VOCAB])
def test_chunked_log_probs_equal_the_full_log_softmax(monkeypatch: pytest.MonkeyPatch, chunk_elements: int) -> None:
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", chunk_elements)  # 4 positions a chunk: 7 chunks here
    model = qwen_vocabulary_model()
    ids, attention = batch()
    expected = reference(model, ids, attention)
    scores = score_tokens(model, ids, attention, entropy=True, squares=True)
    for got, want in zip((scores.log_probs, scores.entropy, scores.sum_pi_squared), expected, strict=True):
        assert got is not None
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert float(expected[0].detach().abs().sum()) > 0


def test_the_gradient_of_the_chunked_log_probs_and_entropy_is_the_full_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", 4 * VOCAB)
    model = qwen_vocabulary_model()
    ids, attention = batch()
    weights = torch.randn(ids.shape[0], ids.shape[1] - 1, generator=torch.Generator().manual_seed(2))
    grads = []
    for chunked in (False, True):
        model.zero_grad()
        if chunked:
            scores = score_tokens(model, ids, attention, start=2, entropy_grad=True)
            chosen, entropy = scores.log_probs, scores.entropy
        else:
            chosen, entropy, _ = reference(model, ids, attention)
        assert entropy is not None
        ((chosen[:, 2:] + 0.3 * entropy[:, 2:]) * weights[:, 2:]).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)
    assert float(grads[0].abs().sum()) > 0


class _Watch(TorchDispatchMode):
    """Every op with an output that ends in the vocabulary (logits-like, not a view of the weights): its name, and
    the largest such output."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.largest = 0
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, tuple | list) else [out]:
            if not isinstance(tensor, torch.Tensor) or tensor.untyped_storage().data_ptr() in self.weights:
                continue
            if tensor.dim() and tensor.shape[-1] == VOCAB:
                self.largest = max(self.largest, tensor.numel())
                self.ops[func.overloadpacket.__name__] += 1
        return out


@pytest.mark.parametrize("grad", [False, True])
def test_no_logits_beyond_one_chunk_and_no_entropy_unless_asked(monkeypatch: pytest.MonkeyPatch, grad: bool) -> None:
    chunk = 4
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", chunk * VOCAB)
    model = qwen_vocabulary_model()
    ids, attention = batch(rows=4, width=16)  # 60 positions: the whole logits are 15 chunks
    counts = []
    for asked in ({}, {"entropy": True}, {"squares": True}):
        with torch.set_grad_enabled(grad), _Watch(model) as watch:
            scores = score_tokens(model, ids, attention, **asked)
            if grad:
                scores.log_probs.sum().backward()
        assert 0 < watch.largest <= chunk * VOCAB
        counts.append(watch.ops["exp"])
    assert counts[0] == (15 if grad else 0)  # the backward's softmax only: the forward takes no exp
    assert counts[1] > counts[0] and counts[2] > counts[0]


class _Tokenizer:
    """What the engine reads of a tokenizer to score ids: nothing but its pad and EOS ids."""

    pad_token_id, eos_token_id, chat_template = 0, 1, None


def test_the_engines_compute_logprobs_takes_no_entropy_pass() -> None:
    """compute_logprobs (the distillation teacher's scoring) returns the log-probs of a full log_softmax, and runs
    no exp over the vocabulary: no entropy is computed, since no caller reads one."""
    model = qwen_vocabulary_model()
    engine = TransformersEngine(model, _Tokenizer(), torch.device("cpu"), UniformStream(0), Sampling(), 4, 64, False)
    ids = batch(rows=1, width=12)[0]
    with _Watch(model) as watch:
        scored = asyncio.run(engine.compute_logprobs(ids[0].tolist()))
    assert watch.ops["exp"] == 0, watch.ops
    expected = reference(model, ids, torch.ones_like(ids))[0][0]
    assert scored[0] == 0.0 and len(scored) == ids.shape[1]
    torch.testing.assert_close(torch.tensor(scored[1:]), expected, rtol=0, atol=1e-5)


def test_a_one_token_sequence_scores_nothing_and_runs_no_forward() -> None:
    """compute_logprobs of one token (a distillation teacher's shortest sequence) is its leading 0.0, and
    score_tokens of one-token rows returns empty scores: no position has a next token, so the model is not run."""
    model = qwen_vocabulary_model()
    engine = TransformersEngine(model, _Tokenizer(), torch.device("cpu"), UniformStream(0), Sampling(), 4, 64, False)
    calls: list[int] = []
    model.register_forward_pre_hook(lambda _m, _a: calls.append(1))
    assert asyncio.run(engine.compute_logprobs([7])) == [0.0]
    scores = score_tokens(model, torch.tensor([[7], [9]]), torch.ones(2, 1, dtype=torch.long), entropy=True)
    assert scores.log_probs.shape == (2, 0) and scores.entropy is not None and scores.entropy.shape == (2, 0)
    assert calls == []


@pytest.mark.parametrize("grad", [False, True])
def test_the_tinker_servers_targets_are_scored_in_chunks_with_the_full_passes_numbers(
    monkeypatch: pytest.MonkeyPatch, grad: bool
) -> None:
    """The Tinker server's forward and forward_backward (``target_log_probs``): any target at any position (here not
    the next input token), right-padded datums; the log-probs and their gradient are a full float32 log-softmax's,
    and no tensor holds more than one chunk of logits."""
    from rllm_transformers.tinker_server.trainer import target_log_probs

    chunk = 4
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", chunk * VOCAB)
    model = qwen_vocabulary_model()
    draw = torch.Generator().manual_seed(5)
    rows = [torch.randint(0, VOCAB, (n,), generator=draw).tolist() for n in (9, 6, 9)]
    targets = [torch.randint(0, VOCAB, (len(r),), generator=draw).tolist() for r in rows]
    weights = torch.randn(3, 9, generator=draw)
    with torch.set_grad_enabled(grad), _Watch(model) as watch:
        got = target_log_probs(model, rows, targets, pad=0)
        if grad:
            (got * weights).sum().backward()
    assert 0 < watch.largest <= chunk * VOCAB  # the whole logits are 27 positions: 7 chunks
    chunked_grad = [p.grad.clone() for p in model.parameters()] if grad else []
    model.zero_grad()
    want = torch.zeros(3, 9)
    for i, (row, target) in enumerate(zip(rows, targets, strict=True)):
        with torch.set_grad_enabled(grad):
            logits = model(input_ids=torch.tensor([row]), use_cache=False).logits[0].float()
            want[i, : len(row)] = torch.log_softmax(logits, -1).gather(-1, torch.tensor(target)[:, None])[:, 0]
    torch.testing.assert_close(got.detach(), want.detach(), rtol=0, atol=1e-5)
    assert float(got.detach()[1, 6:].abs().sum()) == 0 and float(got.detach().abs().sum()) > 0
    if grad:
        (want * weights).sum().backward()
        for chunked, full in zip(chunked_grad, (p.grad for p in model.parameters()), strict=True):
            torch.testing.assert_close(chunked, full, rtol=1e-4, atol=1e-6)


def _one_step_changes(precision: str) -> float:
    """The fraction of the weights one AdamW step at lr 1e-6 changes, in ``precision``."""
    model = qwen_vocabulary_model()
    with pytest.warns(RLLMWarning, match="half a unit") if precision == "bf16-pure" else nullcontext():
        policy = precision_of(OmegaConf.create({"precision": precision}))
    policy.prepare(model, torch.device("cpu"))
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    ids, attention = batch()
    advantages = torch.randn(ids.shape[0], ids.shape[1] - 1, generator=torch.Generator().manual_seed(3))
    loss = -(score_tokens(model, ids, attention).log_probs * advantages).mean()
    loss.backward()
    optimizer.step()
    changed = sum(int((p.detach() != b).sum()) for p, b in zip(model.parameters(), before, strict=True))
    return changed / sum(p.numel() for p in model.parameters())


def test_bf16_mixed_moves_the_weights_at_an_rl_learning_rate_where_bf16_pure_does_not() -> None:
    mixed, pure = _one_step_changes("bf16-mixed"), _one_step_changes("bf16-pure")
    assert mixed >= 0.9
    assert pure < 0.1  # updates of 1e-6 are far under half a bfloat16 step of weights around 0.02


def _shared_prompt_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """8 rows of 2 prompts (10 tokens, 5 rows and 3) and 3 reply tokens each, one reply right-padded."""
    draw = torch.Generator().manual_seed(3)
    prompts = torch.randint(0, VOCAB, (2, 10), generator=draw)
    replies = torch.randint(0, VOCAB, (8, 3), generator=draw)
    ids = torch.cat([prompts[[0, 0, 1, 0, 1, 0, 1, 0]], replies], dim=1)
    attention = torch.ones_like(ids)
    attention[1, -2:] = 0
    return ids, attention


def test_rows_sharing_a_prompt_run_it_once_with_the_full_passes_numbers() -> None:
    """A task's rollouts: the first 9 tokens run once per distinct prompt (2 rows), the rest per row (8 x 4 tokens);
    log-probs, entropies and the gradient are the whole pass's over every row."""
    model = qwen_vocabulary_model().train()
    ids, attention = _shared_prompt_batch()
    start = 9  # the last prompt position: its next token is the first reply token
    weights = torch.randn(ids.shape[0], ids.shape[1] - 1, generator=torch.Generator().manual_seed(4))
    fed: list[tuple[int, ...]] = []
    hook = model.register_forward_pre_hook(
        lambda _m, _args, kwargs: fed.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    grads, values = [], []
    for shared in (False, True):
        model.zero_grad()
        if shared:
            scores = score_tokens(model, ids, attention, start=start, entropy_grad=True, share_prompts=True)
            chosen, entropy = scores.log_probs, scores.entropy
        else:
            chosen, entropy, _ = reference(model, ids, attention)
        assert entropy is not None
        ((chosen[:, start:] + 0.3 * entropy[:, start:]) * weights[:, start:]).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        values.append((chosen[:, start:].detach(), entropy[:, start:].detach()))
    hook.remove()
    assert fed == [(8, 13), (2, 9), (8, 3)]  # the reference's whole pass, then the prompts once, the rest but the last
    for got, want in zip(values[1], values[0], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert float(values[0][0][1, -2:].abs().sum()) == 0  # the padded positions score 0 on both sides
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)
    assert float(grads[0].abs().sum()) > 0


def test_dropout_the_switch_or_a_short_prompt_keep_one_forward_over_every_row() -> None:
    """Shared prompts would share one dropout mask: with dropout on (training) rows run whole; in eval they share,
    unless ``share_prompts`` is off, a row is padded within the prompt or sharing would not halve the positions."""
    model = qwen_vocabulary_model()
    model.config.attention_dropout = 0.1
    ids, attention = _shared_prompt_batch()
    fed: list[tuple[int, ...]] = []
    model.register_forward_pre_hook(lambda _m, _a, kw: fed.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    with torch.no_grad():
        score_tokens(model.train(), ids, attention, start=9, share_prompts=True)
        assert fed == [(8, 12)]  # rows of 13 run as 12: their last token is only ever a target
        score_tokens(model.eval(), ids, attention, start=9, share_prompts=False)  # rllm.transformers.share_prompts
        assert fed == [(8, 12)] * 2
        score_tokens(model.eval(), ids, attention, start=3, share_prompts=True)  # 2 x 3 + 8 x 9 of 96: not half
        assert fed == [(8, 12)] * 3
        left_padded = attention.clone()
        left_padded[0, 0] = 0  # a row that does not attend to all of its first 9 tokens
        score_tokens(model.eval(), ids, left_padded, start=9, share_prompts=True)
        assert fed == [(8, 12)] * 4
        score_tokens(model.eval(), ids, attention, start=9, share_prompts=True)
    assert fed == [(8, 12)] * 4 + [(2, 9), (8, 3)]


@pytest.mark.parametrize(
    "rows",
    [
        [[5, 7], [5, 7], [9, 7], [5, 7], [9, 7], [0, 0]],
        [[1_000_003, 0], [0, 1], [0, 1]],  # the two rows' keys collide: 1_000_003 * 1 == 1 * 1_000_003
        [[VOCAB - 1] * 3],
    ],
)
def test_distinct_rows_are_the_rowwise_uniques_even_where_keys_collide(rows: list[list[int]]) -> None:
    """Prefix sharing's dedup: the same distinct rows as a Python set of the rows, each row mapped to its own copy."""
    tensor = torch.tensor(rows)
    distinct, copies = prefixes.distinct_rows(tensor)
    assert sorted(map(tuple, distinct.tolist())) == sorted(set(map(tuple, rows)))
    assert distinct[copies].tolist() == rows
