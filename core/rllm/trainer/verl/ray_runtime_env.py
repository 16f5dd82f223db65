"""rLLM's path of the Ray runtime env for verl's workers: :mod:`rllm_verl.upstream.ray_runtime_env`."""

from rllm.plugins.aliases import become_plugin_module

become_plugin_module(__name__, "verl", "rllm_verl.upstream.ray_runtime_env")
