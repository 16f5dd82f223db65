"""The built-in rllm plugin, registered through the same hooks as any installed plugin.

Its hook implementations live in :mod:`rllm_builtin.plugin`; the estimators in
:mod:`rllm_builtin.estimators`.
"""
