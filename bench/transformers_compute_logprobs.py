"""What the entropy cost ``TransformersEngine.compute_logprobs`` at a real vocabulary, which no caller reads.

``compute_logprobs(ids)`` scores a sequence (distillation's teacher scores every step with it).
Two ways, timed in the same process on the same model and ids (Qwen's vocabulary, 151,936, by
default, one decoder layer ``--hidden`` wide, tied embeddings):

1. ``with entropy`` (the engine before): :func:`~rllm_transformers.logprobs.score_tokens` with
   ``entropy=True``, the entropy then dropped;
2. ``log-probs only`` (the engine now): :meth:`TransformersEngine.compute_logprobs`, whose pass
   asks for the log-probs alone.

Each figure is the median of ``--rounds`` timed calls (after one untimed); the ratio is before / now.
Needs ``pip install 'rllm[transformers]'``; ``python bench/transformers_compute_logprobs.py`` (under
a minute on two CPU cores).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable

import torch
from omegaconf import OmegaConf

from rllm_transformers.engine import Sampling, TransformersEngine
from rllm_transformers.logprobs import score_tokens
from rllm_transformers.model import tiny_model

VOCAB = 151_936


class _Tokenizer:
    pad_token_id, eos_token_id, chat_template = 0, 1, None


def _seconds(call: Callable[[], object], rounds: int) -> float:
    call()
    series = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        series.append(time.perf_counter() - start)
    return statistics.median(series)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=VOCAB)
    parser.add_argument("--hidden", type=int, default=256, help="the model's width (Qwen2.5-0.5B: 896)")
    parser.add_argument("--tokens", type=int, default=256, help="the scored sequence's length")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = tiny_model(OmegaConf.create({"hidden_size": args.hidden, "num_layers": 1}), args.vocab, 0, 1).eval()
    device = torch.device("cpu")
    engine = TransformersEngine(model, _Tokenizer(), device, torch.Generator(), Sampling(), 4, args.tokens, False)
    ids = torch.randint(0, args.vocab, (args.tokens,), generator=torch.Generator().manual_seed(1)).tolist()
    row = torch.tensor([ids])

    def before() -> object:
        with torch.no_grad():
            return score_tokens(model, row, torch.ones_like(row), entropy=True).log_probs

    def now() -> object:
        return asyncio.run(engine.compute_logprobs(ids))

    torch.testing.assert_close(torch.tensor(now()[1:]), before()[0], rtol=0, atol=1e-5)  # the same log-probs
    old, new = _seconds(before, args.rounds), _seconds(now, args.rounds)
    print(
        f"vocab {args.vocab:,}, hidden {args.hidden}, {args.tokens} tokens, {args.threads} thread(s), "
        f"median of {args.rounds}"
    )
    print(f"with entropy (before): {old * 1e3:8.1f} ms")
    print(f"log-probs only (now):  {new * 1e3:8.1f} ms")
    print(f"ratio before / now:    {old / new:8.2f}x")


if __name__ == "__main__":
    main()
