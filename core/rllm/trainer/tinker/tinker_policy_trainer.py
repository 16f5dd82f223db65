"""rLLM's path of the Tinker loss names: :mod:`rllm_tinker.upstream`."""

from rllm.plugins.aliases import become_plugin_module

become_plugin_module(__name__, "tinker", "rllm_tinker.upstream")
