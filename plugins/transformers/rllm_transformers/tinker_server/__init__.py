"""A Tinker API server over the transformers backend (``rllm serve --tinker``, docs/tinker.md)."""
