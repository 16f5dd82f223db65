"""rllm's optimal token baselines against verl 0.9.1's ``optimal_token_baseline`` and its multi-turn twin.

Seeded groups of ragged responses (one empty, one group of one, groups whose longest response
is alone and groups where it is tied), the old policy's log-probs and sum of squared
probabilities from real softmax distributions over a small vocabulary, the reward on each
response's last token as verl's reward manager puts it: advantages within 1e-6 in float64 (and
float32 under ``preset="verl"``), through ``rllm.compute_advantages`` and through verl's own
registry (``rllm.<name>`` inside verl).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0+cpu)")

import rllm

NAMES = ["optimal_token_baseline", "tir_optimal_token_baseline"]


def batch(seed: int, dtype: Any = torch.float64, holes: bool = False) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    uids = np.array(["a"] * 4 + ["b"] * 3 + ["c"] + ["d"] * 4, dtype=object)
    rows, width = len(uids), 9
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    lengths[1] = 0  # an empty response in group a
    lengths[8], lengths[9] = width, width  # group d: its longest two are tied
    mask = (torch.arange(width)[None, :] < lengths[:, None]).to(dtype)
    if holes:  # multi-turn: observation tokens inside a response are outside the mask
        mask[:, 2] = 0.0
        mask[3, 5] = 0.0
    logits = torch.randn(rows, width, 5, generator=g, dtype=torch.float64) * 2.0
    probs = torch.softmax(logits, dim=-1)
    sampled = torch.multinomial(probs.reshape(-1, 5), 1, generator=g).reshape(rows, width)
    old = torch.log(probs.gather(-1, sampled[..., None]).squeeze(-1)).to(dtype)
    squares = (probs**2).sum(-1).to(dtype)
    scores = torch.randint(0, 2, (rows,), generator=g).to(dtype)
    rewards = torch.zeros(rows, width, dtype=dtype)
    last = (mask * torch.arange(1, width + 1)).argmax(dim=-1)
    has = mask.sum(-1) > 0
    rewards[has, last[has]] = scores[has]
    return {"rewards": rewards, "mask": mask, "uids": uids, "old": old, "squares": squares, "scores": scores}


def verl(name: str, data: dict[str, Any]) -> torch.Tensor:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    advantages, _ = get_adv_estimator_fn(name)(
        token_level_rewards=data["rewards"],
        response_mask=data["mask"],
        index=data["uids"],
        old_log_probs=data["old"],
        sum_pi_squared=data["squares"],
    )
    return advantages


def rows(tensor: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    return [tensor[i][mask[i].bool()].tolist() for i in range(len(mask))]


def ours(name: str, data: dict[str, Any], **options: Any) -> torch.Tensor:
    got = rllm.compute_advantages(
        name,
        data["scores"].double().numpy(),
        data["uids"],
        old_log_probs=rows(data["old"], data["mask"]),
        sum_pi_squared=rows(data["squares"], data["mask"]),
        **options,
    )
    assert got.per_token
    out = torch.zeros(data["mask"].shape, dtype=torch.float64)
    out[data["mask"].bool()] = torch.tensor(got.values, dtype=torch.float64)
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", NAMES)
def test_equal_to_verls_on_single_turn_responses(name: str, seed: int) -> None:
    data = batch(seed)
    expected = verl(name, data)
    assert torch.allclose(ours(name, data), expected, atol=1e-6, rtol=0)
    assert float(expected.abs().max()) > 0.1  # the case is not degenerate


@pytest.mark.parametrize("seed", range(3))
def test_the_multi_turn_twin_equals_verls_on_masks_with_observation_holes(seed: int) -> None:
    data = batch(seed, holes=True)
    expected = verl("tir_optimal_token_baseline", data)
    assert torch.allclose(ours("tir_optimal_token_baseline", data), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_float32_under_the_verl_preset(name: str) -> None:
    data = batch(7, dtype=torch.float32)
    expected = verl(name, data).double()
    assert torch.allclose(ours(name, data, preset="verl"), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_without_the_zero_tail(name: str) -> None:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    data = batch(2)
    expected, _ = get_adv_estimator_fn(name)(
        token_level_rewards=data["rewards"],
        response_mask=data["mask"],
        index=data["uids"],
        old_log_probs=data["old"],
        sum_pi_squared=data["squares"],
        handle_zero_tail=False,
    )
    assert torch.allclose(ours(name, data, handle_zero_tail=False), expected, atol=1e-6, rtol=0)


def test_a_hand_computed_group() -> None:
    """Two responses, rewards 1 and 0, lengths 2 and 1: B_0 = W_a0 / (W_a0 + W_b0), then the tail is 0."""
    pa, pb = np.array([0.5, 0.8]), np.array([0.6])
    sa, sb = np.array([0.3, 0.7]), np.array([0.4])
    got = rllm.compute_advantages(
        "optimal_token_baseline",
        [1.0, 0.0],
        ["g", "g"],
        old_log_probs=[np.log(pa), np.log(pb)],
        sum_pi_squared=[sa, sb],
        epsilon=0.0,
    )
    wa0, wb0 = 1 - 2 * 0.5 + 0.3, 1 - 2 * 0.6 + 0.4
    b0 = wa0 / (wa0 + wb0)
    assert got.values.tolist() == pytest.approx([1 - b0, 1.0, 0 - b0])


@pytest.mark.parametrize("name", NAMES)
def test_inside_verl_under_rllms_name(name: str) -> None:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from rllm_verl.inside_verl import register_in_verl

    register_in_verl()
    data = batch(3)
    advantages, _ = get_adv_estimator_fn("rllm." + name)(
        token_level_rewards=data["rewards"],
        response_mask=data["mask"],
        index=data["uids"],
        old_log_probs=data["old"],
        sum_pi_squared=data["squares"],
    )
    assert torch.allclose(advantages, verl(name, data), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_inside_verl_returns_are_verls_reward_to_go_not_the_advantages(name: str) -> None:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from rllm_verl.inside_verl import register_in_verl

    register_in_verl()
    data = batch(5, holes=True)
    kwargs = {
        "token_level_rewards": data["rewards"],
        "response_mask": data["mask"],
        "index": data["uids"],
        "old_log_probs": data["old"],
        "sum_pi_squared": data["squares"],
    }
    advantages, returns = get_adv_estimator_fn("rllm." + name)(**kwargs)
    _, their_returns = get_adv_estimator_fn(name)(**kwargs)
    assert torch.equal(returns, their_returns)
    assert not torch.allclose(returns, advantages)
    # by hand: the masked rewards summed from each token to the row's end (row 0's reward sits on its last token)
    row = data["rewards"][0] * data["mask"][0]
    assert returns[0].tolist() == [float(row[t:].sum()) for t in range(row.shape[0])]


def test_inside_verl_without_the_fields_names_them() -> None:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from rllm_verl.inside_verl import register_in_verl

    register_in_verl()
    data = batch(0)
    with pytest.raises(rllm.MissingInputError, match=r"old_log_probs.*sum_pi_squared"):
        get_adv_estimator_fn("rllm.optimal_token_baseline")(
            token_level_rewards=data["rewards"], response_mask=data["mask"], index=data["uids"]
        )
