"""The documented ``rllm.experimental`` import paths."""
