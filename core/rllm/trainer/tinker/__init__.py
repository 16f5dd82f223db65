"""rLLM's ``rllm.trainer.tinker`` paths: each module is the tinker plugin's module of the same job (docs/tinker.md)."""
