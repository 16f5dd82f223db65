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


def test_a_loss_that_counts_masked_tokens_fails(plugin_manager) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    from rllm.plugins.registry import LossEntry, Source
    from rllm.testing.losses import check_loss

    def unmasked(ctx):  # type: ignore[no-untyped-def]
        per_token = -ctx.advantages * ctx.log_probs
        return per_token.mean(), {}  # ignores response_mask (the bug)

    plugin_manager.losses.add(LossEntry(name="unmasked", target=unmasked, source=Source("runtime", "tests")))
    with pytest.raises(ConformanceError, match="loss 'unmasked' breaks 'masked tokens contribute nothing'"):
        check_loss("unmasked")
