"""rLLM's ``rllm.trainer.verl`` paths: each module is the verl plugin's module of the same job (docs/verl.md)."""
