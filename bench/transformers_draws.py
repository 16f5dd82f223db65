"""What drawing one token per row costs the transformers engine at a real vocabulary: host draw vs device draw.

Each row's randomness comes from its own episode's stream, so an episode's samples do not
depend on its batch neighbours. Two ways to keep that, timed per generated token on the same
``[rows, vocab]`` log-probabilities (Qwen's vocabulary, 151,936, by default):

1. ``host`` (the engine before): the probabilities copied to the host, one exponential number
   per token from each row's CPU generator in a Python loop over the rows, ``argmax(p / e)``;
2. ``device`` (the engine now, :mod:`rllm_transformers.engine`): each row's uniforms drawn
   once per call of ``--tokens`` tokens (:func:`row_uniforms`, its cost spread over those
   tokens and included), then per token one inverse-CDF draw for the batch on the device
   (:func:`draw_rows`).

Both run in the same process on the same tensors; the ratio is host / device. Each figure is
the median of ``--rounds`` timed draws (after one untimed). One torch thread on the CPU.
Needs ``pip install 'rllm[transformers]'``; ``python bench/transformers_draws.py`` (about a
minute on one CPU core), ``--device cuda`` on a GPU.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import torch

from rllm_transformers.engine import UniformStream, draw_rows, row_uniforms

VOCAB = 151_936
ROWS = (8, 64, 256)


def host_draw(log_p: torch.Tensor, alive: torch.Tensor, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """The engine's draw before: per token, ``[rows, vocab]`` to the host and one generator call per row."""
    probs = log_p.exp().cpu()
    race = torch.ones_like(probs)
    live = alive.cpu().tolist()
    for draws, generator, drawing in zip(race.unbind(), generators, live, strict=True):
        if drawing:
            draws.exponential_(generator=generator)
    token = (probs / race).argmax(dim=-1)
    return torch.where(torch.tensor(live), token, 0).to(log_p.device)


def _seconds(draw: Callable[[], object], rounds: int, sync: Callable[[], None]) -> float:
    draw()
    sync()
    series = []
    for _ in range(rounds):
        start = time.perf_counter()
        draw()
        sync()
        series.append(time.perf_counter() - start)
    return statistics.median(series)


def measure(rows: int, vocab: int, tokens: int, rounds: int, device: torch.device) -> tuple[float, float]:
    """Milliseconds per generated token: (host, device)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(rows)).to(device)
    log_p = torch.log_softmax(logits, dim=-1)
    alive = torch.ones(rows, dtype=torch.bool, device=device)
    generators = [torch.Generator().manual_seed(row) for row in range(rows)]
    host = _seconds(lambda: host_draw(log_p, alive, generators), rounds, sync)
    streams = [UniformStream(row) for row in range(rows)]
    per_call = _seconds(lambda: row_uniforms(streams, [tokens] * rows, device), rounds, sync)
    noise = row_uniforms(streams, [tokens] * rows, device)
    on_device = _seconds(lambda: draw_rows(log_p, noise[:, 0]), rounds, sync) + per_call / tokens
    return host * 1e3, on_device * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=VOCAB)
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    parser.add_argument("--tokens", type=int, default=256, help="tokens per call (the uniforms are drawn per call)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU, one thread"
    print(f"one token per row, vocabulary {args.vocab:,}, {name}; median of {args.rounds} (ms per generated token)")
    print(f"{'rows':>6}{'host (before)':>16}{'device (now)':>15}{'host / device':>16}")
    for rows in args.rows:
        host, on_device = measure(rows, args.vocab, args.tokens, args.rounds, device)
        print(f"{rows:>6}{host:>16.2f}{on_device:>15.3f}{host / on_device:>15.1f}x")


if __name__ == "__main__":
    main()
