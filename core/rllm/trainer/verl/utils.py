"""rLLM's path of ``sync_config`` (rllm.* keys and verl's own): :mod:`rllm_verl.upstream.utils`."""

from rllm.plugins.aliases import become_plugin_module

become_plugin_module(__name__, "verl", "rllm_verl.upstream.utils")
