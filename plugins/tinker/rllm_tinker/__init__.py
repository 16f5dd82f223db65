"""rllm.backend=tinker: rllm's trainer driving a Tinker-API service through the official SDK (docs/tinker.md)."""
