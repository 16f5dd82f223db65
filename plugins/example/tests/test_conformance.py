"""The example plugin against rllm's contract, with rllm.testing alone (run from a fresh install)."""

from rllm.testing import Estimator, parametrize_with_checks


@parametrize_with_checks(
    Estimator("median_baseline", properties=["shift_invariant", "group_independent"]),
    Estimator("rank", properties=["zero_mean", "shift_invariant", "scale_invariant", "group_independent"]),
    Estimator("scaled_median", properties=["shift_invariant", "group_independent"], options={"clip": 3.0}),
    plugin="example",  # and every grouping hook and backend the plugin registers
)
def test_conformance(check):
    check()
