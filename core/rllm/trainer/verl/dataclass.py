"""rLLM's path of the per-step rows the verl transform gathers: :mod:`rllm_verl.upstream.dataclass`."""

from rllm.plugins.aliases import become_plugin_module

become_plugin_module(__name__, "verl", "rllm_verl.upstream.dataclass")
