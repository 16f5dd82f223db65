"""``bench/memory.py --fsdp-only``: rank 0's FSDP tensors for the Qwen2.5-1.5B shape, checked against the shape's
parameter count worked out by hand, and the per-rank peaks printed as the items' sums."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from extras import skip_module_without

skip_module_without("torch", "transformers", install="pip install 'rllm[transformers]'")

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3
HIDDEN, LAYERS, KV, MLP, VOCAB = 1536, 28, 2 * 128, 8960, 151_936
LAYER = (HIDDEN * HIDDEN + HIDDEN) + 2 * (HIDDEN * KV + KV) + HIDDEN * HIDDEN + 3 * HIDDEN * MLP + 2 * HIDDEN
WHOLE = 4 * (VOCAB * HIDDEN + LAYERS * LAYER + HIDDEN)
"""Bytes of Qwen2.5-1.5B's float32 weights: tied embedding, 28 layers (q/k/v with biases, o, the MLP's three
matrices, two norms), the final norm."""
ROOT_UNIT = VOCAB * HIDDEN + HIDDEN
"""Parameters of FSDP's root unit: the tied embedding and the final norm (the decoder layers are their own units)."""


def test_the_fsdp_table_shards_the_reference_drops_the_whole_copies_and_gathers_bf16_units() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "memory.py"), "--fsdp-only", "--ranks", "2", "8"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line[:40].strip(): [float(x) for x in line[40:].split()] for line in done.stdout.splitlines()[3:11]}
    whole, half, eighth = (round(WHOLE / n / GIB, 2) for n in (1, 2, 8))
    # columns: 2 ranks before, now, mixed (bf16-mixed's FSDP policy), served (rollouts from servers); 8 ranks the same
    assert rows["whole model (rollouts, old log-probs)"] == [whole, whole, whole, 0.0] * 2
    assert rows["reference policy"] == [whole, half, half, half, whole, eighth, eighth, eighth]
    assert rows["checkpoint's optimizer, kept"] == [round(2 * WHOLE / GIB, 2), 0.0, 0.0, 0.0] * 2
    assert rows["AdamW state (shard)"][4:] == [round(2 * WHOLE / 8 / GIB, 2)] * 4
    embedding = round(4 * VOCAB * HIDDEN / GIB, 2)  # the largest tensor, gathered alone after the update
    assert rows["gather after the update (passing)"][:4] == [whole, embedding, embedding, embedding]
    # the root unit stays gathered through forward and backward, beside a layer and the next one prefetched: float32
    # (4 bytes) without a policy, bfloat16 (2 bytes) under bf16-mixed's
    units = ROOT_UNIT + 2 * LAYER
    four, two = round(4 * units / GIB, 2), round(2 * units / GIB, 2)
    assert rows["FSDP's unit gathers (passing)"] == [four, four, two, two] * 2
    eight = re.findall(
        r"^8 ranks: peak per rank before +([\d.]+) GiB, now +([\d.]+) GiB .*mixed +([\d.]+) GiB .*served +([\d.]+) GiB",
        done.stdout,
        re.M,
    )
    before, now, mixed, served = (float(x) for x in eight[0])
    columns = list(zip(*rows.values(), strict=True))
    for column, peak in zip(columns[4:], (before, now, mixed, served), strict=True):  # kept rows + largest passing
        assert abs(peak - (sum(column[:6]) + max(column[6:]))) <= 0.05
    assert now < before / 2
    assert abs((now - mixed) - (4 * units - max(2 * units, 4 * VOCAB * HIDDEN)) / GIB) <= 0.01
    assert abs((mixed - served) - WHOLE / GIB) <= 0.01  # with servers no rank keeps the whole model on its device
