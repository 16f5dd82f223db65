"""What per-episode random streams cost the transformers engine: one token's draw for a batch of rows.

The engine draws each row's token with that row's own generator (the episode's), so an
episode's samples do not depend on its batch neighbours. Three ways to draw one token per
row over the tiny model's vocabulary (15 tokens), one torch thread:

1. one batched ``torch.multinomial`` with one generator (what the engine did before: every row
   from one stream);
2. ``torch.multinomial`` once per row, each row its generator;
3. :func:`rllm_transformers.engine.draw_rows` (what the engine does): each row's exponential
   numbers from its generator, one division and argmax for the batch.

Each figure is the median of ``--rounds`` rounds of 400 draws. Needs ``pip install
'rllm[transformers]'``; ``python bench/transformers_draws.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from rllm_transformers.engine import draw_rows

VOCAB = 15
DRAWS = 400


def _microseconds(draw: Callable[[], torch.Tensor], rounds: int) -> float:
    for _ in range(50):
        draw()
    series = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(DRAWS):
            draw()
        series.append((time.perf_counter() - start) / DRAWS * 1e6)
    return statistics.median(series)


def measure(rows: int, rounds: int) -> dict[str, float]:
    log_p = torch.log_softmax(torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(rows)), -1)
    alive = torch.ones(rows, dtype=torch.bool)
    one = torch.Generator().manual_seed(0)
    own = [torch.Generator().manual_seed(row) for row in range(rows)]
    ways: dict[str, Callable[[], torch.Tensor]] = {
        "batched multinomial": lambda: torch.multinomial(log_p.exp(), 1, generator=one).squeeze(-1),
        "multinomial per row": lambda: torch.stack(
            [torch.multinomial(log_p[row].exp(), 1, generator=own[row])[0] for row in range(rows)]
        ),
        "draw_rows": lambda: draw_rows(log_p, alive, own, VOCAB - 1),
    }
    return {name: _microseconds(draw, rounds) for name, draw in ways.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"one token per row, vocabulary {VOCAB}, median of {args.rounds} rounds of {DRAWS} draws (µs per draw)")
    print(f"{'rows':>6}{'batched multinomial':>22}{'multinomial per row':>22}{'draw_rows':>12}")
    for rows in (8, 32, 160):
        times = measure(rows, args.rounds)
        print(
            f"{rows:>6}{times['batched multinomial']:>22.1f}{times['multinomial per row']:>22.1f}"
            f"{times['draw_rows']:>12.1f}"
        )


if __name__ == "__main__":
    main()
