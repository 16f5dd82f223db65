"""rLLM's path of the verl backend and its loss names: :mod:`rllm_verl.upstream.verl_backend`."""

from rllm.plugins.aliases import become_plugin_module

become_plugin_module(__name__, "verl", "rllm_verl.upstream.verl_backend")
