"""rLLM's path of the verl actor's loss override: :mod:`rllm_verl.upstream.patch`."""

from rllm.plugins.aliases import become_plugin_module

become_plugin_module(__name__, "verl", "rllm_verl.upstream.patch")
