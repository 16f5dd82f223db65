"""The documented ``rllm.experimental.common`` import paths."""
