"""rLLM's path of episodes -> verl ``DataProto``: :mod:`rllm_verl.upstream.transform`."""

from rllm.plugins.aliases import become_plugin_module

become_plugin_module(__name__, "verl", "rllm_verl.upstream.transform")
