"""What compute_policy_loss refuses or repairs for every caller: arguments, shapes, empty batches, plugin losses."""

from __future__ import annotations

import math
import sys
import types
from typing import Any

import pytest

from rllm import AlgorithmConfig
from rllm.errors import ConfigError, LossFailedError, LossOptionError, LossOutputError, RLLMWarning
from rllm.losses import LossSettings, resolve_loss_options

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0+cpu)")

from rllm.losses import aggregate, compute_policy_loss  # noqa: E402


def tensors(rows: int = 2, width: int = 3, **changed: Any) -> dict[str, Any]:
    base = {
        "log_probs": torch.full((rows, width), -1.0, dtype=torch.float64, requires_grad=True),
        "old_log_probs": torch.full((rows, width), -1.0, dtype=torch.float64),
        "advantages": torch.ones(rows, width, dtype=torch.float64),
        "response_mask": torch.ones(rows, width, dtype=torch.float64),
    }
    return {**base, **changed}


def test_geo_mean_micro_batches_add_up_to_the_mini_batch_by_hand() -> None:
    # one token per row, ratio 1: row losses -A = -1 and +2; the batch's mean over 2 sequences is 0.5
    logp = torch.zeros(2, 1, dtype=torch.float64, requires_grad=True)
    data = {"old_log_probs": torch.zeros(2, 1, dtype=torch.float64), "response_mask": torch.ones(2, 1)}
    adv = torch.tensor([[1.0], [-2.0]], dtype=torch.float64)
    mode = "seq-mean-token-mean"
    whole, _ = compute_policy_loss("geo_mean", log_probs=logp, advantages=adv, agg_mode=mode, **data)
    assert float(whole.detach()) == pytest.approx(0.5)
    halves = [
        compute_policy_loss(
            "geo_mean",
            log_probs=logp[[i]],
            advantages=adv[[i]],
            old_log_probs=data["old_log_probs"][[i]],
            response_mask=data["response_mask"][[i]],
            agg_mode=mode,
            global_batch_size=2,
        )[0].detach()
        for i in (0, 1)
    ]
    assert [float(h) for h in halves] == pytest.approx([-0.5, 1.0])  # each row's loss / 2 sequences: sum 0.5


@pytest.mark.parametrize(
    "mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "prompt-mean"]
)
def test_a_batch_without_response_tokens_has_loss_zero_and_says_so(mode: str) -> None:
    data = tensors(response_mask=torch.zeros(2, 3))
    loss, metrics = compute_policy_loss("vanilla", agg_mode=mode, prompt_ids=torch.tensor([0, 1]), **data)
    loss.backward()
    assert float(loss.detach()) == 0.0 and float(data["log_probs"].grad.abs().sum()) == 0.0
    assert metrics["no_response_tokens"] == 1.0
    assert (
        "no_response_tokens"
        not in compute_policy_loss("vanilla", agg_mode=mode, prompt_ids=torch.tensor([0, 1]), **tensors())[1]
    )


def test_float16_token_mean_over_more_than_65504_tokens_is_finite() -> None:
    per_token = torch.full((1, 70_000), 0.5, dtype=torch.float16)
    mask = torch.ones(1, 70_000, dtype=torch.float16)
    for mode in ("token-mean", "seq-mean-token-mean"):
        assert float(aggregate(per_token, mask, mode)) == 0.5
    assert float(aggregate(per_token, mask, "token-sum")) == 35_000.0


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({"advantages": torch.ones(2)}, r"^advantages has shape \(2,\) but log_probs has \(2, 3\); every per-token"),
        ({"response_mask": torch.ones(1, 3)}, r"^response_mask has shape \(1, 3\) but log_probs has \(2, 3\)"),
        ({"old_log_probs": torch.ones(2, 4)}, r"^old_log_probs has shape \(2, 4\) but log_probs has \(2, 3\)"),
        ({"log_probs": torch.ones(6)}, r"^log_probs must have shape \(batch, tokens\); got \(6,\)"),
    ],
)
def test_shapes_are_checked_not_broadcast(changed: dict[str, Any], message: str) -> None:
    with pytest.raises(LossOptionError, match=message) as caught:
        compute_policy_loss("vanilla", **tensors(**changed))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"dp_size": 0}, r"^dp_size must be an integer >= 1; got 0"),
        ({"batch_num_tokens": 0}, r"^batch_num_tokens must be a number > 0 \(or null\); got 0"),
        ({"global_batch_size": -2}, r"^global_batch_size must be a number > 0 \(or null\); got -2"),
        ({"kl_coef": True}, r"^kl_coef must be a number >= 0; got true \(bool\)"),
        ({"kl_coef": -0.1}, r"^kl_coef must be a number >= 0; got -0.1"),
        ({"kl_coef": math.nan}, r"^kl_coef must be a number >= 0; got nan"),
        ({"tis_cap": 0.0}, r"^tis_cap must be a number > 0; got 0.0"),
        ({"loss_scale_factor": math.inf}, r"^loss_scale_factor must be a number > 0 \(or null\); got inf"),
    ],
)
def test_direct_callers_meet_the_config_keys_rules(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(LossOptionError, match=message):
        compute_policy_loss("vanilla", ref_log_probs=torch.zeros(2, 3), **tensors(), **arguments)


def test_kl_coef_and_kl_beta_are_refused_by_one_rule() -> None:
    with pytest.raises(ConfigError) as config:
        AlgorithmConfig(kl_beta=-0.1)
    with pytest.raises(LossOptionError) as direct:
        compute_policy_loss("vanilla", ref_log_probs=torch.zeros(2, 3), kl_coef=-0.1, **tensors())
    assert str(config.value).replace("rllm.algorithm.kl_beta", "kl_coef") == str(direct.value)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("sapo", {"tau_pos": 0.0}, "Option 'tau_pos' of loss 'sapo' .* must be above 0.0; got 0.0"),
        ("sapo", {"tau_neg": 0}, "Option 'tau_neg' of loss 'sapo' .* must be above 0.0; got 0"),
        (
            "kl_cov",
            {"kl_cov_ratio": 1.5},
            "Option 'kl_cov_ratio' of loss 'kl_cov' .* above 0.0 and at most 1.0; got 1.5",
        ),
        (
            "clip_cov",
            {"clip_cov_ratio": 0.0},
            "Option 'clip_cov_ratio' of loss 'clip_cov' .* above 0.0 and at most 1.0",
        ),
        ("vanilla", {"clip_ratio_c": 1.0}, "Option 'clip_ratio_c' of loss 'vanilla' .* must be above 1.0; got 1.0"),
    ],
)
def test_option_ranges_that_break_a_loss_are_refused_before_it_runs(name, options, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(LossOptionError, match=message):
        resolve_loss_options(name, options)


def test_a_loss_that_fixes_its_aggregation_runs_on_the_default_and_says_so_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from rllm.losses import registry

    monkeypatch.setattr(registry, "_ANNOUNCED", set())
    with pytest.warns(RLLMWarning) as caught:
        first = LossSettings.from_algorithm(AlgorithmConfig(loss_fn="sapo"))
        LossSettings.from_algorithm(AlgorithmConfig(loss_fn="sapo"))
    assert first.agg_mode == "seq-mean-token-mean"
    from rllm import __version__

    assert [str(w.message) for w in caught] == [
        f"Loss 'sapo' (built-in plugin 'builtin', distribution rllm {__version__}) fixes its own aggregation, "
        "seq-mean-token-mean; rllm.algorithm.loss_agg_mode is left to it."
    ]
    with pytest.raises(
        LossOptionError,
        match=r"^rllm.algorithm.loss_agg_mode='token-sum' does not fit loss 'sapo' \(built-in plugin 'builtin', .*\), "
        r"which aggregates by seq-mean-token-mean only; set rllm.algorithm.loss_agg_mode to 'seq-mean-token-mean' "
        r"or leave it unset.$",
    ):
        LossSettings.from_algorithm(AlgorithmConfig(loss_fn="sapo", loss_agg_mode="token-sum"))


def _plugin_loss(plugin_manager: Any, name: str, fn: Any) -> None:
    from rllm.plugins.registry import LossEntry, Source

    plugin_manager.losses.add(LossEntry(name=name, target=fn, source=Source("plugin", "acme", "acme-rl", "2.1")))


WHO = r"Loss 'bad' \(plugin 'acme', distribution acme-rl 2.1\)"


@pytest.mark.parametrize(
    ("fn", "error", "message"),
    [
        (
            lambda ctx: ctx.aggregate(-ctx.log_probs),
            LossOutputError,
            "returned a Tensor of shape \\(\\); a loss returns",
        ),
        (lambda ctx: (-ctx.log_probs, {}), LossOutputError, r"returned a loss of shape \(2, 3\); it must be a scalar"),
        (
            lambda ctx: (ctx.aggregate(-ctx.log_probs).detach(), {}),
            LossOutputError,
            "returned a loss without a gradient",
        ),
        (lambda ctx: (1.5, {}), LossOutputError, "returned a loss of float 1.5; it must be a scalar tensor"),
        (lambda ctx: (ctx.aggregate(-ctx.log_probs), [1.0]), LossOutputError, "returned metrics of list"),
        (
            lambda ctx: (ctx.aggregate(-ctx.log_probs), {"kl": ctx.log_probs.mean()}),
            LossOutputError,
            "returned the metric 'kl': a Tensor of shape \\(\\); metrics are numbers",
        ),
        (lambda ctx: 1 / 0, LossFailedError, "raised ZeroDivisionError: division by zero"),
        (lambda ctx: sys.exit(0), LossFailedError, r"called sys.exit\(0\); a loss raises an exception to fail"),
    ],
)
def test_a_plugin_loss_that_misbehaves_is_one_line_naming_loss_and_plugin(plugin_manager, fn, error, message) -> None:  # type: ignore[no-untyped-def]
    _plugin_loss(plugin_manager, "bad", fn)
    with pytest.raises(error, match=f"^{WHO} {message}") as caught:
        compute_policy_loss("bad", **tensors())
    assert "\n" not in str(caught.value)


def test_a_plugin_loss_whose_module_fails_to_import_names_loss_plugin_and_distribution(
    plugin_manager, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from rllm.plugins.registry import LossEntry, Source

    class Broken(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("CUDA driver not found")

    monkeypatch.setitem(sys.modules, "acme_losses", Broken("acme_losses"))
    plugin_manager.losses.add(
        LossEntry(name="bad", target="acme_losses:loss", source=Source("plugin", "acme", "acme-rl", "2.1"))
    )
    with pytest.raises(
        LossFailedError,
        match=r"^Loss 'bad' of plugin 'acme', distribution acme-rl 2.1: importing 'acme_losses:loss' raised "
        "RuntimeError: CUDA driver not found$",
    ):
        compute_policy_loss("bad", **tensors())
