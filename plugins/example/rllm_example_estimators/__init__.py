"""Example rllm plugin distribution; the hooks are in :mod:`rllm_example_estimators.plugin`."""
