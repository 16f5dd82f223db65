"""Each ``trl.<loss_type>`` rllm loss equals TRL 1.16's ``GRPOTrainer`` loss on the same tensors, value and gradient.

TRL's side is its own ``_compute_loss`` (driven by ``parity.TRLLossStub``); rllm's is
``compute_policy_loss`` with the counts a caller inside TRL passes: the accumulation window's
tokens per process (``batch_num_tokens``), its sequences (``global_batch_size``) and
``max_completion_length`` (``loss_scale_factor``). Ragged masks with an empty row, log-ratios up
to +-2.5 (clipping on both sides), a reference within 1 nat of the
policy (rllm's k3 is clamped at 10, as verl's; TRL's is not), float64, gradients with respect to the current log-probs.
"""

from __future__ import annotations

import pytest
from extras import skip_module_without

skip_module_without("torch", "trl", install="pip install 'rllm[trl]' (CI does)")

import torch

from rllm.losses import compute_policy_loss

STEPS = 2
"""Micro-batches per generation batch (TRL's steps_per_generation)."""
GENERATION_TOKENS = 3
"""The generation batch holds this many times the micro-batch's tokens."""

LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo"]


def batch(seed: int, rows: int = 6, tokens: int = 7) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, tokens + 1, (rows,), generator=generator)
    lengths[2] = 0  # a completion masked out entirely (mask_truncated_completions does this)
    mask = (torch.arange(tokens).unsqueeze(0) < lengths.unsqueeze(1)).long()
    old = -torch.rand(rows, tokens, generator=generator, dtype=torch.float64) * 3
    drift = (torch.rand(rows, tokens, generator=generator, dtype=torch.float64) - 0.5) * 5
    # rllm's k3 is clamped at 10 (verl's); TRL's is not: references within 1 nat of the policy stay below it.
    ref = old + drift + (torch.rand(rows, tokens, generator=generator, dtype=torch.float64) - 0.5) * 2
    advantages = torch.randn(rows, generator=generator, dtype=torch.float64)
    entropy = torch.rand(rows, tokens, generator=generator, dtype=torch.float64) * 2
    return {"mask": mask, "old": old, "new": old + drift, "ref": ref, "advantages": advantages, "entropy": entropy}


def trl_loss(loss_type: str, data: dict, accumulation: int, **config) -> tuple[float, torch.Tensor]:
    from parity import TRLLossStub, trl_inputs
    from trl import GRPOConfig

    args = GRPOConfig(
        output_dir="/tmp/unused", loss_type=loss_type, max_completion_length=9, report_to=[], use_cpu=True, **config
    )
    args.steps_per_generation = STEPS
    new = data["new"].clone().requires_grad_(True)
    stub = TRLLossStub(args, new, data["entropy"], accumulation)
    mask = data["mask"]
    inputs = trl_inputs(
        mask, data["advantages"], data["old"], GENERATION_TOKENS * int(mask.sum()), data["ref"] if args.beta else None
    )
    loss = stub.loss(inputs)
    loss.backward()
    return float(loss.detach()), new.grad


def rllm_loss(
    loss_type: str, data: dict, accumulation: int, beta: float = 0.0, **options
) -> tuple[float, torch.Tensor]:
    new = data["new"].clone().requires_grad_(True)
    mask = data["mask"]
    rows, tokens = mask.shape
    loss, _ = compute_policy_loss(
        f"trl.{loss_type}",
        log_probs=new,
        old_log_probs=data["old"],
        advantages=data["advantages"].unsqueeze(1).expand(rows, tokens),
        response_mask=mask,
        ref_log_probs=data["ref"] if beta else None,
        entropy=data["entropy"],
        options=options,
        kl_coef=beta,
        kl_kind="low_var_kl",
        batch_num_tokens=tokens_counted(loss_type, mask, accumulation),
        global_batch_size=rows * accumulation,
        loss_scale_factor=9,
    )
    loss.backward()
    return float(loss.detach()), new.grad


def tokens_counted(loss_type: str, mask: torch.Tensor, accumulation: int) -> float:
    """What TRL's token mean divides by, over the accumulation window: bnpo the micro-batch's tokens
    (then divided by the accumulation steps), the others the generation batch's tokens x window / steps."""
    if loss_type == "bnpo":
        return float(mask.sum()) * accumulation
    return GENERATION_TOKENS * float(mask.sum()) * accumulation / STEPS


CASES = [
    ({}, {}),
    ({"epsilon": 0.1, "epsilon_high": 0.3}, {"epsilon": 0.1, "epsilon_high": 0.3}),
    ({"importance_sampling_level": "sequence"}, {"importance_sampling_level": "sequence"}),
    ({"top_entropy_quantile": 0.3}, {"top_entropy_quantile": 0.3}),
    ({"delta": 1.5}, {"delta": 1.5}),
    ({"beta": 0.04, "use_bias_correction_kl": False}, {"beta": 0.04}),
]


CLIPPED = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


def applies(loss_type: str, config: dict) -> bool:
    """Whether TRL's loss reads the case's settings: delta clips only the clipped losses, SAPO and VESPO
    have no clip range, and VESPO weighs sequences itself (TRL warns for a sequence level there)."""
    if "delta" in config:
        return loss_type in CLIPPED
    if "epsilon" in config:
        return loss_type not in ("sapo", "vespo")
    return not (loss_type == "vespo" and "importance_sampling_level" in config)


PAIRS = [
    (loss_type, case) for case in range(len(CASES)) for loss_type in LOSS_TYPES if applies(loss_type, CASES[case][0])
]


@pytest.mark.parametrize(("loss_type", "case"), PAIRS)
@pytest.mark.parametrize("accumulation", [1, 2])
def test_value_and_gradient_equal_trl(loss_type: str, case: int, accumulation: int) -> None:
    config, options = CASES[case]
    options = dict(options)
    beta = options.pop("beta", 0.0)
    for seed in range(3):
        data = batch(seed)
        theirs, their_grad = trl_loss(loss_type, data, accumulation, **config)
        ours, our_grad = rllm_loss(loss_type, data, accumulation, beta, **options)
        assert abs(ours - theirs) <= 1e-6 * max(1.0, abs(theirs)), (seed, ours, theirs)
        assert torch.allclose(our_grad, their_grad, rtol=0, atol=1e-6), (seed, (our_grad - their_grad).abs().max())
        assert their_grad.abs().sum() > 0
