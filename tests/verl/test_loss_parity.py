"""rllm's built-in losses against verl 0.9.1's own functions: loss, gradient and metrics.

Every loss verl has, every aggregation mode the loss supports, on seeded ragged batches with
log-ratios up to ±6 (so every clip, the dual clip and the truncations engage), in float64:
loss and d loss / d log_probs within 1e-6, the same metrics where verl reports them.
KL kinds are checked against ``verl.trainer.ppo.core_algos.kl_penalty``.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0+cpu)")

from rllm.losses import KL_KINDS, LOSS_AGG_MODES, compute_policy_loss, kl_penalty

VERL_MODES = tuple(mode for mode in LOSS_AGG_MODES if mode != "prompt-mean")  # SkyRL's mode is not verl's

SHARED = ["vanilla", "dppo_tv", "dppo_kl", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "dro", "cispo"]
PINNED = {"sapo": ["seq-mean-token-mean"], "geo_mean": ["seq-mean-token-mean"]}
"""verl's sapo and geo_mean ignore loss_agg_mode; rllm declares the one mode they compute."""


def as_verl_counts(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """verl's geo_mean is ``torch.mean`` over the micro-batch, empty rows included; rllm's divides by the
    batch's sequences with a token unless told the whole batch's count, so it is told every row."""
    return {"global_batch_size": data["response_mask"].shape[0]} if name == "geo_mean" else {}


OPTIONS = {
    "clip_ratio": 0.2,
    "clip_ratio_low": 0.15,
    "clip_ratio_high": 0.28,
    "clip_ratio_c": 3.0,
    "tau_pos": 1.0,
    "tau_neg": 1.05,
    "clip_cov_ratio": 0.05,
    "clip_cov_lb": -1.0,
    "clip_cov_ub": 5.0,
    "kl_cov_ratio": 0.05,
    "ppo_kl_coef": 0.1,
    "dro_beta": 0.3,
}
TOLERANCE = 1e-6


def batch(seed: int, rows: int = 7, width: int = 11) -> dict[str, Any]:
    """Ragged right-padded batch: lengths 0..width, one empty row; log-probs <= 0, ratios up to e^±6."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    lengths[0] = 0
    mask = (torch.arange(width)[None, :] < lengths[:, None]).to(torch.float64)
    old = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 3.0
    shift = (torch.rand(rows, width, generator=g, dtype=torch.float64) - 0.5) * 12.0
    logp = torch.clamp(old + shift, max=-1e-3)
    advantages = torch.randn(rows, width, generator=g, dtype=torch.float64) * 2.0
    ref = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 3.0
    return {"log_probs": logp, "old_log_probs": old, "advantages": advantages, "response_mask": mask, "ref": ref}


def verl_config(options: dict[str, Any]) -> Any:
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    policy = {k: options[k] for k in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef")}
    return ActorConfig(
        strategy="fsdp",
        ppo_mini_batch_size=4,
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=1,
        clip_ratio=options["clip_ratio"],
        clip_ratio_low=options["clip_ratio_low"],
        clip_ratio_high=options["clip_ratio_high"],
        clip_ratio_c=options["clip_ratio_c"],
        tau_pos=options["tau_pos"],
        tau_neg=options["tau_neg"],
        policy_loss=PolicyLossConfig(dro_beta=options["dro_beta"], **policy),
    )


def rllm_options(name: str) -> dict[str, Any]:
    from rllm.losses import loss_entry

    return {o.name: OPTIONS[o.name] for o in loss_entry(name).options}


def run_verl(name: str, data: dict[str, Any], mode: str, seed: int) -> tuple[float, Any, dict[str, float]]:
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    logp = data["log_probs"].clone().requires_grad_(True)
    torch.manual_seed(seed)
    loss, metrics = get_policy_loss_fn(name)(
        data["old_log_probs"], logp, data["advantages"], data["response_mask"], mode, verl_config(OPTIONS)
    )
    loss.backward()
    return float(loss.detach()), logp.grad, {k.removeprefix("actor/"): float(v) for k, v in metrics.items()}


def run_rllm(name: str, data: dict[str, Any], mode: str, seed: int) -> tuple[float, Any, dict[str, float]]:
    logp = data["log_probs"].clone().requires_grad_(True)
    torch.manual_seed(seed)
    loss, metrics = compute_policy_loss(
        name,
        log_probs=logp,
        old_log_probs=data["old_log_probs"],
        advantages=data["advantages"],
        response_mask=data["response_mask"],
        options=rllm_options(name),
        agg_mode=mode,
        **as_verl_counts(name, data),
    )
    loss.backward()
    return float(loss.detach()), logp.grad, metrics


CASES = [(name, mode) for name in SHARED for mode in PINNED.get(name, VERL_MODES)]


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_loss_grad_and_metrics_match_verl(name: str, mode: str) -> None:
    for seed in (0, 1, 2):
        data = batch(seed)
        verl_loss, verl_grad, verl_metrics = run_verl(name, data, mode, seed)
        loss, grad, metrics = run_rllm(name, data, mode, seed)
        assert abs(loss - verl_loss) <= TOLERANCE, (name, mode, seed, loss, verl_loss)
        assert float((grad - verl_grad).abs().max()) <= TOLERANCE, (name, mode, seed)
        assert float(grad.abs().max()) > 0, "the batch must move the loss"
        for key, value in verl_metrics.items():
            assert metrics[key] == pytest.approx(value, abs=TOLERANCE), (name, mode, key)


def test_the_batches_engage_every_clip() -> None:
    """Without this the parity above could hold on batches where no clip binds."""
    _, _, metrics = run_rllm("vanilla", batch(0), "token-mean", 0)
    assert 0 < metrics["pg_clipfrac"] < 1 and metrics["pg_clipfrac_lower"] > 0
    _, _, dppo = run_rllm("dppo_tv", batch(0), "token-mean", 0)
    assert 0 < dppo["pg_clipfrac"] < 1 and dppo["pg_clipfrac_lower"] > 0
    _, _, cov = run_rllm("clip_cov", batch(0), "token-mean", 0)
    assert cov["pg_clipfrac"] > 0


def test_rollout_is_weights_reach_the_loss_as_in_verl() -> None:
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from rllm.losses import truncated_is_weights

    data = batch(3)
    rollout = data["old_log_probs"] + 0.7 * torch.randn(data["old_log_probs"].shape, dtype=torch.float64)
    weights = truncated_is_weights(data["old_log_probs"], rollout, data["response_mask"], "token", 2.0)
    assert float(weights.max()) == pytest.approx(2.0)
    for name in ("vanilla", "cispo", "geo_mean"):
        mode = PINNED.get(name, ["token-mean"])[0]
        logp = data["log_probs"].clone().requires_grad_(True)
        expected, _ = get_policy_loss_fn(name)(
            data["old_log_probs"], logp, data["advantages"], data["response_mask"], mode, verl_config(OPTIONS), weights
        )
        loss, _ = compute_policy_loss(
            name,
            log_probs=data["log_probs"],
            old_log_probs=data["old_log_probs"],
            advantages=data["advantages"],
            response_mask=data["response_mask"],
            rollout_log_probs=rollout,
            options=rllm_options(name),
            agg_mode=mode,
            tis_mode="token",
            tis_cap=2.0,
            **as_verl_counts(name, data),
        )
        assert float(loss.detach()) == pytest.approx(float(expected.detach()), abs=TOLERANCE)


def test_reinforce_matches_verls_function() -> None:
    from verl.trainer.ppo.core_algos import compute_policy_loss_reinforce

    data = batch(4)
    for mode in VERL_MODES:
        expected, metrics = compute_policy_loss_reinforce(
            data["old_log_probs"],
            data["log_probs"],
            data["advantages"],
            data["response_mask"],
            mode,
            verl_config(OPTIONS),
        )
        loss, mine = compute_policy_loss(
            "reinforce",
            log_probs=data["log_probs"],
            old_log_probs=data["old_log_probs"],
            advantages=data["advantages"],
            response_mask=data["response_mask"],
            rollout_log_probs=data["old_log_probs"],
            agg_mode=mode,
        )
        assert float(loss) == pytest.approx(float(expected), abs=TOLERANCE)
        assert mine["ppo_kl"] == pytest.approx(metrics["actor/ppo_kl"], abs=TOLERANCE)


@pytest.mark.parametrize("kind", [*KL_KINDS, *(k + "+" for k in KL_KINDS)])
def test_kl_kinds_match_verl(kind: str) -> None:
    from verl.trainer.ppo.core_algos import kl_penalty as verl_kl

    data = batch(5)
    grads = []
    values = []
    for fn in (verl_kl, kl_penalty):
        logp = data["log_probs"].clone().requires_grad_(True)
        value = fn(logp, data["ref"], kind)
        (value * data["response_mask"]).sum().backward()
        values.append(value.detach())
        grads.append(logp.grad)
    assert float((values[0] - values[1]).abs().max()) <= TOLERANCE
    assert float((grads[0] - grads[1]).abs().max()) <= TOLERANCE


@pytest.mark.parametrize("kind", ["k1", "k3", "k3+", "abs"])
@pytest.mark.parametrize("mode", VERL_MODES)
def test_kl_loss_term_is_verls_aggregated_kl(kind: str, mode: str) -> None:
    """``kl_coef`` adds verl's ``use_kl_loss`` term: ``agg_loss(kl_penalty(logp, ref, kind), mask, mode) * coef``."""
    from verl.trainer.ppo.core_algos import agg_loss
    from verl.trainer.ppo.core_algos import kl_penalty as verl_kl

    data = batch(6)
    tensors = {key: data[key] for key in ("log_probs", "old_log_probs", "advantages", "response_mask")}
    plain, _ = compute_policy_loss("gpg", agg_mode=mode, **tensors)
    with_kl, metrics = compute_policy_loss(
        "gpg", agg_mode=mode, ref_log_probs=data["ref"], kl_coef=0.25, kl_kind=kind, **tensors
    )
    kl = agg_loss(verl_kl(data["log_probs"], data["ref"], kind), data["response_mask"], mode)
    assert float(with_kl - plain) == pytest.approx(0.25 * float(kl), abs=TOLERANCE)
    assert metrics["kl_loss"] == pytest.approx(float(kl), abs=TOLERANCE)


@pytest.mark.parametrize("mode", VERL_MODES)
def test_global_batch_normalisation_matches_verl(mode: str) -> None:
    from verl.trainer.ppo.core_algos import agg_loss

    from rllm.losses import aggregate

    data = batch(7)
    info = {"dp_size": 4, "batch_num_tokens": 123, "global_batch_size": 19, "loss_scale_factor": 7}
    expected = agg_loss(data["advantages"], data["response_mask"], mode, **info)
    assert float(aggregate(data["advantages"], data["response_mask"], mode, **info)) == pytest.approx(
        float(expected), abs=TOLERANCE
    )


def test_adaptive_kl_controller_follows_verls() -> None:
    from verl.trainer.ppo.core_algos import AdaptiveKLController as VerlAdaptive

    from rllm.losses import kl_controller

    theirs, mine = VerlAdaptive(0.001, 0.1, 10000), kl_controller("adaptive", 0.001, 0.1, 10000)
    for kl, steps in [(0.5, 256), (0.01, 256), (0.12, 1000), (0.0, 64)]:
        theirs.update(kl, steps)
        mine.update(kl, steps)
        assert mine.value == pytest.approx(theirs.value, rel=1e-12)


@pytest.mark.parametrize("name", ["gspo", "vanilla", "ppo", "dro"])
def test_rllm_losses_run_inside_verl_by_name(name: str) -> None:
    """verl's own lookup finds ``rllm.<name>`` (the ``verl.plugins`` entry point registered it) and matches verl."""
    import verl  # noqa: F401  (runs verl's plugin discovery)
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    data = batch(8)
    verl_name = {"ppo": "vanilla"}.get(name, name)
    config = verl_config(OPTIONS)
    expected, expected_metrics = get_policy_loss_fn(verl_name)(
        data["old_log_probs"], data["log_probs"], data["advantages"], data["response_mask"], "token-mean", config
    )
    loss, metrics = get_policy_loss_fn(f"rllm.{name}")(
        data["old_log_probs"], data["log_probs"], data["advantages"], data["response_mask"], "token-mean", config
    )
    assert float(loss) == pytest.approx(float(expected), abs=TOLERANCE)
    assert metrics == pytest.approx(expected_metrics, abs=TOLERANCE)


@pytest.mark.parametrize("name", ["sapo", "geo_mean"])
def test_losses_that_fix_their_aggregation_take_verls_default_mode_as_verls_own_do(name: str, monkeypatch) -> None:
    """verl's sapo and geo_mean ignore loss_agg_mode; rllm.<name> takes verl's default too, and says so once."""
    import verl  # noqa: F401
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    import rllm
    from rllm.errors import RLLMWarning
    from rllm.losses import registry

    monkeypatch.setattr(registry, "_ANNOUNCED", set())
    data = batch(8)
    config = verl_config(OPTIONS)
    config.global_batch_info.update(as_verl_counts(name, data))
    args = (data["old_log_probs"], data["log_probs"], data["advantages"], data["response_mask"], "token-mean", config)
    expected, _ = get_policy_loss_fn(name)(*args)
    with pytest.warns(RLLMWarning) as caught:
        first, _ = get_policy_loss_fn(f"rllm.{name}")(*args)
        second, _ = get_policy_loss_fn(f"rllm.{name}")(*args)
    assert float(first) == pytest.approx(float(expected), abs=TOLERANCE) and float(second) == float(first)
    said = [str(w.message) for w in caught if "fixes its own aggregation" in str(w.message)]
    assert said == [
        f"Loss {name!r} (built-in plugin 'builtin', distribution rllm {rllm.__version__}) fixes its own aggregation, "
        "seq-mean-token-mean; actor_rollout_ref.actor.loss_agg_mode is left to it."
    ]


def test_prompt_mean_inside_verl_is_refused_in_one_line() -> None:
    import verl  # noqa: F401
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from rllm.errors import LossOptionError

    data = batch(8)
    args = (data["old_log_probs"], data["log_probs"], data["advantages"], data["response_mask"], "prompt-mean")
    with pytest.raises(LossOptionError, match=r"^actor_rollout_ref\.actor\.loss_agg_mode='prompt-mean' needs each"):
        get_policy_loss_fn("rllm.vanilla")(*args, verl_config(OPTIONS))
