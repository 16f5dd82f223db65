"""rllm.testing passes the built-in parts and fails a broken plugin, naming the property and the input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rllm.errors import ConformanceError
from rllm.testing import Estimator, all_checks, check_grouping_hook, estimator_checks

pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    "check",
    all_checks(
        Estimator("grpo", properties=["zero_mean", "shift_invariant", "scale_invariant", "group_independent"]),
        Estimator("rloo", properties=["zero_mean", "shift_invariant", "group_independent"]),
        "opo",
        grouping_hooks=["task_and_role"],
        backends=["embedded"],
    ),
    ids=repr,
)
def test_builtin_parts_conform(check) -> None:  # type: ignore[no-untyped-def]
    check()


def test_a_property_the_estimator_lacks_fails_naming_group_and_input() -> None:
    # RLOO's advantages change when a group's rewards are scaled: it is not scale-invariant.
    failing = [c for c in estimator_checks("rloo", properties=["scale_invariant"]) if "scale_invariant" in c.id]
    with pytest.raises(
        ConformanceError, match=r"estimator 'rloo' breaks 'scale_invariant': multiplying .* input: rewards="
    ):
        failing[0]()


def test_a_grouping_hook_that_repeats_a_trajectory_fails(plugin_manager) -> None:  # type: ignore[no-untyped-def]
    from rllm.plugins.registry import Entry, Source
    from rllm.trainer.grouping import group_by_task_and_role

    def doubled(episodes, **options):  # type: ignore[no-untyped-def]
        groups = group_by_task_and_role(episodes)
        return [*groups, groups[0]]

    plugin_manager.grouping_hooks.add(Entry("doubled", doubled, Source("runtime", "tests")))
    with pytest.raises(ConformanceError, match="grouping hook 'doubled' breaks 'each trajectory once'"):
        check_grouping_hook("doubled")


BROKEN = '''
import numpy as np
from rllm.experimental.common.advantage import register_rllm_adv_estimator
from rllm.testing import parametrize_with_checks


@register_rllm_adv_estimator("reversed_rloo")
def reversed_rloo(rewards, **kwargs):
    """Leave-one-out advantages, written back in reverse order within each group (the bug)."""
    out = [(g - (g.sum() - g) / max(len(g) - 1, 1))[::-1] for g in rewards]
    return out, out


@parametrize_with_checks("reversed_rloo")
def test_conformance(check):
    check()
'''


def test_a_reordering_estimator_fails_the_kit_naming_property_and_input(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken=BROKEN)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    assert result.ret == 1
    out = result.stdout.str()
    assert "FAILED test_broken.py::test_conformance[reversed_rloo-order_preserved-0]" in out
    assert "estimator 'reversed_rloo' breaks 'order preserved': after permuting the inputs by [" in out
    assert "input: rewards=[" in out and "group_ids=[" in out
    assert "passed" in out  # the checks it does pass still pass: finite output


def test_import_rllm_does_not_import_pytest_or_the_kit() -> None:
    code = (
        "import sys, rllm; rllm.compute_advantages('grpo', [1, 0], [0, 0]); "
        "print('pytest' in sys.modules, 'rllm.testing' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_the_fixtures_come_from_the_entry_point(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fixtures="""
        def test_episodes(rllm_episodes, rllm_config):
            assert len(rllm_episodes) == 12
            assert rllm_config("rllm.trainer.total_batches=3").rllm.trainer.total_batches == 3
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def _loss_checks() -> list:  # type: ignore[type-arg]
    from rllm.losses import loss_names
    from rllm.testing import Loss

    return all_checks(losses=[Loss("dro", {"dro_beta": 0.5}) if n == "dro" else n for n in loss_names()])


@pytest.mark.parametrize("check", _loss_checks(), ids=repr)
def test_builtin_losses_conform(check) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    check()


def _register(plugin_manager, name: str, fn, **declaration) -> None:  # type: ignore[no-untyped-def]
    from rllm.plugins.registry import LossEntry, Source

    plugin_manager.losses.add(LossEntry(name=name, target=fn, source=Source("runtime", "tests"), **declaration))


def _pg(ctx):  # type: ignore[no-untyped-def]
    """The per-token loss of every fixture: -A * ratio."""
    import torch

    return -ctx.advantages * torch.exp(ctx.log_probs - ctx.old_log_probs)


def unmasked(ctx):  # type: ignore[no-untyped-def]
    return _pg(ctx).mean(), {}  # the bug: a mean over padding too


def seq_modes_as_token_mean(ctx):  # type: ignore[no-untyped-def]
    mode = "token-mean" if ctx.agg_mode.startswith("seq-mean") else ctx.agg_mode  # the bug
    return ctx.aggregate(_pg(ctx), mode), {}


def nan_on_an_empty_sequence(ctx):  # type: ignore[no-untyped-def]
    counts = ctx.response_mask.sum(dim=-1)
    per_sequence = (_pg(ctx) * ctx.response_mask).sum(dim=-1) / counts  # the bug: 0 / 0 for an empty sequence
    return per_sequence.sum() / (counts > 0).sum(), {}


def micro_batch_mean(ctx):  # type: ignore[no-untyped-def]
    return ctx.aggregate(_pg(ctx), "token-sum") / ctx.response_mask.sum(), {}  # the bug: ignores batch_num_tokens


def tensor_metrics(ctx):  # type: ignore[no-untyped-def]
    per_token = _pg(ctx)
    return ctx.aggregate(per_token), {"mean": per_token.mean()}  # the bug: a tensor, not a number


def flipped_sign(ctx):  # type: ignore[no-untyped-def]
    return ctx.aggregate(-_pg(ctx)), {}  # the bug: +A * ratio, a descent step lowers the good tokens' log-probs


def float32_pg(ctx):  # type: ignore[no-untyped-def]
    return ctx.aggregate(_pg(ctx).float()), {"ratio": 1.0}  # correct, in float32


@pytest.mark.parametrize(
    ("fn", "declaration", "check", "message"),
    [
        (unmasked, {}, "masked_positions", r"breaks 'masked tokens contribute nothing \(token-mean\)': padding moved"),
        (seq_modes_as_token_mean, {}, "modes", r"breaks 'aggregation modes honoured': sequence 0 alone .* seq-mean"),
        (
            nan_on_an_empty_sequence,
            {"agg_modes": ["seq-mean-token-mean"]},
            "masked_positions",
            r"breaks 'masked tokens contribute nothing \(seq-mean-token-mean\)': padding moved the loss from .* to nan",
        ),
        (
            micro_batch_mean,
            {"agg_modes": ["token-mean"]},
            "micro_batches",
            r"breaks 'micro-batches add up \(token-mean\)': micro-batches of sequences \[\[0, 3\], \[1\], \[2, 4\]\]",
        ),
        (
            flipped_sign,
            {},
            "direction",
            # +A / 20 tokens: the largest advantage, 2 (sequence 3), gives the worst token, gradient 2 / 20
            r"breaks 'gradient follows the advantage \(token-mean\)': a descent step moves the log-prob of token 0 "
            r"of sequence 3 \(advantage 2\) against its advantage \(gradient 0\.1\)",
        ),
        (
            tensor_metrics,
            {},
            "scalar_gradient",
            r"breaks 'scalar with a finite gradient \(token-mean\)': LossOutputError: .* returned the metric 'mean'",
        ),
    ],
)
def test_each_loss_check_fails_its_wrong_plugin(plugin_manager, fn, declaration, check, message) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    from rllm.testing.losses import LOSS_CHECKS, check_loss

    _register(plugin_manager, "wrong", fn, **declaration)
    with pytest.raises(ConformanceError, match=f"^loss 'wrong' {message}"):
        LOSS_CHECKS[check]("wrong", {})
    _register(plugin_manager, "right", float32_pg, **declaration)
    LOSS_CHECKS[check]("right", {})
    check_loss("right")  # a correct loss computing in float32 passes every check


def test_an_estimator_whose_advantages_scale_with_the_number_of_groups_is_not_group_independent() -> None:
    from rllm.experimental.common.advantage import register_rllm_adv_estimator

    @register_rllm_adv_estimator("centred_times_groups")
    def centred_times_groups(rewards, **kwargs):  # type: ignore[no-untyped-def]
        out = [(g - g.mean()) * len(rewards) for g in rewards]  # the bug: scaled by the number of groups
        return out, out

    checks = estimator_checks("centred_times_groups", properties=["group_independent", "zero_mean"])
    for check in checks:
        if "group_independent" not in check.id and "group_count" not in check.id:
            check()  # centred: every other check passes
    failing = [c for c in checks if "group_independent" in c.id]
    with pytest.raises(
        ConformanceError, match=r"estimator 'centred_times_groups' breaks 'group_independent': leaving group .* out"
    ):
        failing[0]()
    # declaring nothing does not hide it: the group-count check runs for every estimator
    (always, *_) = [c for c in estimator_checks("centred_times_groups") if "group_count" in c.id]
    # 15 trajectories in 5 groups: each centred reward x 5, copied into 10 groups: x 10
    with pytest.raises(
        ConformanceError,
        match=r"breaks 'advantages do not scale with the number of groups': with each of the 5 groups copied under a "
        r"new label, trajectory 0's advantage went from (-?[\d.]+) to ",
    ):
        always()


def test_a_loss_that_is_nan_on_a_fully_masked_batch_fails_the_kit(plugin_manager) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    from rllm.testing.losses import LOSS_CHECKS

    def nan_when_empty(ctx):  # type: ignore[no-untyped-def]
        per_token = _pg(ctx) * ctx.response_mask
        return per_token.sum() / ctx.response_mask.sum(), {}  # the bug: 0 / 0 when no token counts

    _register(plugin_manager, "nan_when_empty", nan_when_empty, agg_modes=["token-mean"])
    with pytest.raises(
        ConformanceError,
        match=r"^loss 'nan_when_empty' breaks 'a fully masked batch is finite \(token-mean\)': loss nan",
    ):
        LOSS_CHECKS["empty_batch"]("nan_when_empty", {})
    _register(plugin_manager, "guarded", float32_pg, agg_modes=["token-mean"])
    LOSS_CHECKS["empty_batch"]("guarded", {})  # ctx.aggregate guards the count


def test_an_estimator_that_hands_back_its_input_does_not_own_its_output(plugin_manager) -> None:  # type: ignore[no-untyped-def]
    import rllm

    rllm.register_rllm_adv_estimator("handed_back", style="batch", options=())(lambda batch: batch.rewards[:])
    rllm.register_rllm_adv_estimator("fresh", style="batch", options=())(lambda batch: batch.rewards - 0.5)
    (fresh,) = [c for c in estimator_checks("fresh") if c.id == "fresh-owns_output"]
    fresh()
    (owned,) = [c for c in estimator_checks("handed_back") if c.id == "handed_back-owns_output"]
    with pytest.raises(
        ConformanceError,
        match=r"estimator 'handed_back' breaks 'owns its output': it returned a view of its input batch.rewards; ",
    ):
        owned()
    rllm.compute_advantages("handed_back", [1.0, 0.0], [0, 0])  # the door itself copies it: only the kit says so


def test_an_estimator_with_a_flipped_sign_fails_the_direction_check_and_only_it() -> None:
    from rllm.experimental.common.advantage import register_rllm_adv_estimator

    @register_rllm_adv_estimator("flipped_grpo")
    def flipped_grpo(rewards, **kwargs):  # type: ignore[no-untyped-def]
        out = [(g.mean() - g) / (g.std() + 1e-6) for g in rewards]  # the bug: mean - reward
        return out, out

    checks = estimator_checks("flipped_grpo", properties=["zero_mean", "shift_invariant", "group_independent"])
    failing = [c for c in checks if "reward_direction" in c.id]
    assert len(failing) == 2  # one per input of the kit
    for check in checks:
        if check not in failing:
            check()  # centred, order-preserving, finite: every other check passes
    for check in failing:
        with pytest.raises(
            ConformanceError,
            match=r"estimator 'flipped_grpo' breaks 'higher reward, higher advantage': in group .* trajectory \d+ "
            r"\(reward [\d.]+\) got advantage -?[\d.]+, below trajectory \d+'s",
        ):
            check()


def test_an_estimator_that_ignores_the_rewards_has_no_direction_to_keep(plugin_manager) -> None:  # type: ignore[no-untyped-def]
    import rllm

    rllm.register_rllm_adv_estimator("constant", style="batch", options=())(lambda batch: batch.rewards * 0 + 1.0)
    for check in estimator_checks("constant"):
        if "reward_direction" in check.id:
            check()
