"""Losses verl does not have, by hand on 3 tokens; the checks every door applies before a loss runs."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from rllm.errors import ConfigError, LossNotFoundError, LossOptionError, RLLMError
from rllm.losses import check_kl_kind, kl_controller, loss_entry, resolve_loss_options

LOGP = [-0.5, -1.0, -2.0]
OLD = [-1.0, -1.0, -1.5]
ADV = [2.0, -1.0, 0.5]
MASK = [1.0, 1.0, 1.0]


def _torch():
    return pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0+cpu)")


def _run(name: str, mode: str = "token-mean", **kwargs):
    torch = _torch()
    from rllm.losses import compute_policy_loss

    logp = torch.tensor([LOGP], dtype=torch.float64, requires_grad=True)
    loss, metrics = compute_policy_loss(
        name,
        log_probs=logp,
        old_log_probs=torch.tensor([OLD], dtype=torch.float64),
        advantages=torch.tensor([ADV], dtype=torch.float64),
        response_mask=torch.tensor([MASK], dtype=torch.float64),
        agg_mode=mode,
        **kwargs,
    )
    loss.backward()
    return float(loss.detach()), logp.grad[0].tolist(), metrics


def test_reinforce_by_hand() -> None:
    # -(A * logp) per token: 1.0, -1.0, 1.0 -> token-mean 1/3; d/dlogp = -A/3
    loss, grad, _ = _run("reinforce")
    assert loss == pytest.approx(1.0 / 3)
    assert grad == pytest.approx([-2.0 / 3, 1.0 / 3, -0.5 / 3])


def test_importance_sampling_by_hand() -> None:
    # ratios e^0.5, 1, e^-0.5; -(ratio * A) summed with token-sum
    r = [math.exp(0.5), 1.0, math.exp(-0.5)]
    loss, grad, metrics = _run("importance_sampling", "token-sum")
    assert loss == pytest.approx(-(r[0] * 2.0 - 1.0 + r[2] * 0.5))
    assert grad == pytest.approx([-r[0] * 2.0, 1.0, -r[2] * 0.5])  # d(-ratio*A)/dlogp = -ratio*A
    assert metrics["ppo_kl"] == pytest.approx((-0.5 + 0.0 + 0.5) / 3, abs=1e-7)


def test_cross_entropy_by_hand() -> None:
    # -logp, seq-mean-token-sum over one sequence: 0.5 + 1 + 2
    loss, grad, _ = _run("cross_entropy", "seq-mean-token-sum")
    assert loss == pytest.approx(3.5)
    assert grad == pytest.approx([-1.0, -1.0, -1.0])


def test_aliases_are_the_same_loss() -> None:
    _torch()
    assert _run("ppo") == _run("vanilla") == _run("dual_clip") == _run("regular")
    assert loss_entry("ppo").alias_of == "vanilla"


def test_vanilla_dual_clip_by_hand() -> None:
    # ratio e^0.5=1.6487 A=2: clipped at 1.2 -> -2.4, no grad; token 2 ratio 1, -(-1)=1; token 3 ratio e^-0.5=0.6065,
    # A=0.5: min(0.6065, 0.8)*0.5 -> plain binds: -0.30327, grad -ratio*A
    r3 = math.exp(-0.5)
    loss, grad, metrics = _run("vanilla", options={"clip_ratio": 0.2})
    assert loss == pytest.approx((-2.4 + 1.0 - 0.5 * r3) / 3)
    assert grad == pytest.approx([0.0, 1.0 / 3, -0.5 * r3 / 3])
    assert metrics["pg_clipfrac"] == pytest.approx(1 / 3)
    # clip_ratio_c=1.5 caps token 2's loss when its ratio is 2: -A*ratio=2 > -A*1.5=1.5
    torch = _torch()
    from rllm.losses import compute_policy_loss

    logp = torch.tensor([[math.log(2.0)]], dtype=torch.float64, requires_grad=True)
    loss2, metrics2 = compute_policy_loss(
        "vanilla",
        log_probs=logp,
        old_log_probs=torch.zeros(1, 1, dtype=torch.float64),
        advantages=-torch.ones(1, 1, dtype=torch.float64),
        response_mask=torch.ones(1, 1),
        options={"clip_ratio_c": 1.5},
    )
    assert float(loss2.detach()) == pytest.approx(1.5) and metrics2["pg_clipfrac_lower"] == 1.0


def test_kl_term_and_straight_through_by_hand() -> None:
    torch = _torch()
    from rllm.losses import kl_penalty

    logp = torch.tensor([-0.5, -1.0], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-1.0, -0.5], dtype=torch.float64)
    k3 = kl_penalty(logp, ref, "k3+")
    # value k3: e^(ref-logp) - (ref-logp) - 1; gradient k2's: logp - ref
    expected = [math.exp(-0.5) + 0.5 - 1, math.exp(0.5) - 0.5 - 1]
    assert k3.detach().tolist() == pytest.approx(expected)
    k3.sum().backward()
    assert logp.grad.tolist() == pytest.approx([0.5, -0.5])


def test_rollout_correction_sequence_level_by_hand() -> None:
    torch = _torch()
    from rllm.losses import truncated_is_weights

    old = torch.tensor([[-1.0, -1.0, 0.0]], dtype=torch.float64)
    rollout = torch.tensor([[-1.5, -1.2, 5.0]], dtype=torch.float64)  # the third token is padding
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    seq = truncated_is_weights(old, rollout, mask, "sequence", 10.0)
    assert seq[0].tolist() == pytest.approx([math.exp(0.7), math.exp(0.7), 0.0])
    token = truncated_is_weights(old, rollout, mask, "token", 1.5)
    assert token[0].tolist() == pytest.approx([1.5, math.exp(0.2), 0.0])


def test_adaptive_controller_by_hand() -> None:
    ctrl = kl_controller("adaptive", 0.1, target_kl=0.1, horizon=100)
    ctrl.update(1.0, 10)  # error clipped to 0.2: 0.1 * (1 + 0.2 * 10 / 100)
    assert ctrl.value == pytest.approx(0.102)
    fixed = kl_controller("fixed", 0.3)
    fixed.update(5.0, 1000)
    assert fixed.value == 0.3


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: resolve_loss_options("gspo", {"clip_ratoi": 0.2}),
            "Loss 'gspo' .* has no option 'clip_ratoi'. Did you mean 'clip_ratio'",
        ),
        (
            lambda: resolve_loss_options("sapo", {}, "token-mean"),
            "loss_agg_mode='token-mean' does not fit loss 'sapo' .* aggregates by seq-mean-token-mean only",
        ),
        (
            lambda: resolve_loss_options("vanilla", {}, "token_mean"),
            "loss_agg_mode='token_mean' .* Did you mean 'token-mean'",
        ),
        (
            lambda: resolve_loss_options("vanilla", {"clip_ratio": "wide"}),
            "Option 'clip_ratio' of loss 'vanilla' .* must be a number",
        ),
        (lambda: check_kl_kind("k4"), "kl_loss_type='k4' is not a KL kind; .* Did you mean 'kl', 'k3', 'k2'"),
        (lambda: kl_controller("adaptve", 0.1), "kl_ctrl.type='adaptve' .* Did you mean 'adaptive'"),
        (lambda: loss_entry("gpso"), "Unknown loss 'gpso'. Did you mean 'gspo'"),
    ],
)
def test_bad_choices_are_one_line_named_errors_before_anything_runs(call, message) -> None:
    with pytest.raises(RLLMError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, LossOptionError | LossNotFoundError)


def test_compute_refuses_a_bad_kl_kind_before_calling_the_loss() -> None:
    torch = _torch()
    from rllm.losses import compute_policy_loss

    x = torch.zeros(1, 2)
    with pytest.raises(LossOptionError, match="kl_loss_type='k5'"):
        compute_policy_loss(
            "gpg",
            log_probs=x,
            old_log_probs=x,
            advantages=x,
            response_mask=x + 1,
            kl_coef=0.1,
            kl_kind="k5",
            ref_log_probs=x,
        )
    with pytest.raises(LossOptionError, match="dro_beta"):
        compute_policy_loss("dro", log_probs=x, old_log_probs=x, advantages=x, response_mask=x + 1)


def test_import_rllm_and_listing_losses_import_no_torch() -> None:
    code = (
        "import sys, rllm\nfrom rllm.losses import loss_names, loss_entry\n"
        "assert 'vanilla' in loss_names() and loss_entry('gspo').options\n"
        "from rllm.cli.main import main\nmain(['losses'])\n"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_settings_from_a_run_config_map_rllms_keys_and_check_them() -> None:
    from rllm import AlgorithmConfig
    from rllm.losses import LossSettings

    algorithm = AlgorithmConfig(
        loss_fn="ppo",
        loss_fn_map={"judge": "gspo"},
        eps_clip=0.1,
        eps_clip_high=0.3,
        loss_options={"clip_ratio_c": 2.0},
        loss_agg_mode="seq-mean-token-sum",
        use_kl_loss=True,
        kl_beta=0.05,
        kl_loss_type="k3+",
    )
    settings = LossSettings.from_algorithm(algorithm)
    assert (settings.name, settings.agg_mode, settings.kl_coef, settings.kl_kind) == (
        "ppo",
        "seq-mean-token-sum",
        0.05,
        "k3+",
    )
    assert settings.options == {"clip_ratio": 0.1, "clip_ratio_low": None, "clip_ratio_high": 0.3, "clip_ratio_c": 2.0}
    with pytest.raises(LossOptionError, match=r"Loss 'gspo' .* has no option 'clip_ratio_c'"):
        LossSettings.from_algorithm(algorithm, role="judge")
    assert LossSettings.from_algorithm(AlgorithmConfig()).name == "vanilla"
    with pytest.raises(ConfigError, match=r"rllm.algorithm.kl_loss_type must be one of .*; got 'k9'"):
        AlgorithmConfig(kl_loss_type="k9")


ON_POLICY_ALIKE = ["dppo_tv", "dppo_kl", "gspo", "cispo", "importance_sampling", "gpg", "reinforce", "dro", "kl_cov"]


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_losses_coincide_at_ratio_one_as_docs_losses_md_says(mode: str) -> None:
    """With the current policy equal to the old one, these losses have vanilla's gradient, -A d log p."""
    torch = _torch()
    from rllm.losses import compute_policy_loss

    g = torch.Generator().manual_seed(0)
    old = -torch.rand(6, 8, generator=g, dtype=torch.float64) * 2
    advantages = torch.randn(6, 1, generator=g, dtype=torch.float64).expand(6, 8).clone()  # one per sequence
    mask = (torch.arange(8)[None] < torch.tensor([8, 3, 5, 1, 8, 6])[:, None]).double()

    def gradient(name: str, **options: float):
        logp = old.clone().requires_grad_(True)
        loss, _ = compute_policy_loss(
            name,
            log_probs=logp,
            old_log_probs=old,
            advantages=advantages,
            response_mask=mask,
            agg_mode=mode,
            options=options,
        )
        loss.backward()
        return logp.grad

    tokens = mask.sum(-1, keepdim=True)
    by_hand = -advantages * mask / (mask.sum() if mode == "token-mean" else tokens * 6)
    assert torch.allclose(gradient("vanilla"), by_hand, atol=1e-12)
    alike = ON_POLICY_ALIKE + (["sapo", "geo_mean"] if mode == "seq-mean-token-mean" else [])
    for name in alike:
        assert torch.allclose(gradient(name, **({"dro_beta": 0.1} if name == "dro" else {})), by_hand, atol=1e-8), name
    assert not torch.allclose(gradient("clip_cov"), by_hand, atol=1e-8)


def test_the_plugin_loss_of_docs_losses_md_runs_without_a_warning(plugin_manager) -> None:  # type: ignore[no-untyped-def]
    """The page's ``clipped_pg``, as written there, registered and run: no warning (a metric from a grad tensor)."""
    import re
    import warnings
    from pathlib import Path

    torch = _torch()
    from rllm.losses import compute_policy_loss
    from rllm.plugins.registry import LossEntry, Source
    from rllm.toolkit import Option

    page = (Path(__file__).resolve().parents[2] / "docs" / "losses.md").read_text(encoding="utf-8")
    (source,) = re.findall(r"^def clipped_pg\(ctx\):\n(?:    .*\n)+", page, flags=re.MULTILINE)
    namespace: dict = {"torch": torch}
    exec(source, namespace)
    clip = Option("clip", (float,), 0.2, "clip range of the ratio", minimum=0.0)
    entry = LossEntry(name="clipped_pg", target=namespace["clipped_pg"], source=Source("runtime", "t"), options=(clip,))
    plugin_manager.losses.add(entry)
    old = -torch.rand(3, 4, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, metrics = compute_policy_loss(
            "clipped_pg",
            log_probs=(old + 0.1).requires_grad_(True),
            old_log_probs=old,
            advantages=torch.ones(3, 4, dtype=torch.float64),
            response_mask=torch.ones(3, 4, dtype=torch.float64),
        )
    assert metrics["ratio_mean"] == pytest.approx(math.exp(0.1))
