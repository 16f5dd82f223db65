"""SkyRL's prompt_mean aggregation (``prompt-mean``): every prompt weighs alike, whatever its responses' lengths."""

from __future__ import annotations

import pytest

from rllm.errors import LossOptionError

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0+cpu)")

from rllm.losses import aggregate, compute_policy_loss, prompt_counts  # noqa: E402

PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [5.0, 6.0, 0.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.float64)


def test_prompt_mean_is_the_mean_of_each_prompts_token_mean_by_hand() -> None:
    # prompt 7: rows 0-1, tokens 1+2+3+4 over 4 -> 2.5; prompt 3: row 2, (5+6)/2 -> 5.5; mean of 2.5, 5.5 = 4
    assert float(aggregate(PER_TOKEN, MASK, "prompt-mean", prompt_ids=torch.tensor([7, 7, 3]))) == 4.0
    # token-mean would weigh by tokens: 21 / 6 = 3.5; one prompt per row: (2 + 4 + 5.5) / 3
    assert float(aggregate(PER_TOKEN, MASK, "token-mean")) == 3.5
    assert float(aggregate(PER_TOKEN, MASK, "prompt-mean", prompt_ids=[0, 1, 2])) == pytest.approx(11.5 / 3)


def test_a_prompt_without_response_tokens_is_not_counted() -> None:
    mask = MASK.clone()
    mask[2] = 0  # prompt 3 has no token left: the mean is over prompt 7 alone
    assert float(aggregate(PER_TOKEN, mask, "prompt-mean", prompt_ids=[7, 7, 3])) == 2.5
    tokens, prompts = prompt_counts(mask, torch.tensor([7, 7, 3]))
    assert tokens.tolist() == [4.0, 4.0, 0.0] and float(prompts) == 1.0


def test_micro_batches_given_the_whole_batchs_prompt_counts_add_up() -> None:
    tokens, prompts = torch.tensor([4.0, 4.0, 2.0]), 2.0  # by hand: prompt 7 has 4 tokens, prompt 3 has 2
    parts = [[0, 2], [1]]
    total = sum(
        float(
            aggregate(PER_TOKEN[rows], MASK[rows], "prompt-mean", prompt_num_tokens=tokens[rows], num_prompts=prompts)
        )
        for rows in parts
    )
    assert total == pytest.approx(4.0)


def test_the_loss_door_passes_prompt_ids_to_the_aggregation() -> None:
    # vanilla at ratio 1 is -advantage per token: with PER_TOKEN as the advantages, minus the first test's 4
    logp = torch.zeros(3, 3, dtype=torch.float64, requires_grad=True)
    adv = PER_TOKEN.clone()
    loss, _ = compute_policy_loss(
        "vanilla",
        log_probs=logp,
        old_log_probs=torch.zeros(3, 3, dtype=torch.float64),
        advantages=adv,
        response_mask=MASK,
        agg_mode="prompt-mean",
        prompt_ids=torch.tensor([7, 7, 3]),
    )
    assert float(loss.detach()) == pytest.approx(-4.0)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({}, r"^loss_agg_mode='prompt-mean' needs prompt_ids \(the prompt each sequence answers\)"),
        ({"prompt_num_tokens": torch.ones(3)}, r"^loss_agg_mode='prompt-mean': give prompt_num_tokens and num_prompts"),
        ({"prompt_ids": torch.tensor([0, 1])}, r"^prompt_ids has shape \(2,\) but log_probs has 3 sequences"),
        ({"prompt_ids": torch.tensor([0, 1, 2]), "dp_size": 2}, r"with dp_size=2 needs the global prompt_num_tokens"),
        ({"prompt_ids": torch.tensor([0, 1, 2]), "num_prompts": -1.0}, r"num_prompts"),
    ],
)
def test_what_prompt_mean_refuses_is_one_line(given: dict, message: str) -> None:
    with pytest.raises(LossOptionError, match=message) as caught:
        compute_policy_loss(
            "vanilla",
            log_probs=torch.zeros(3, 3, dtype=torch.float64),
            old_log_probs=torch.zeros(3, 3, dtype=torch.float64),
            advantages=torch.ones(3, 3, dtype=torch.float64),
            response_mask=MASK,
            agg_mode="prompt-mean",
            **given,
        )
    assert "\n" not in str(caught.value)
