"""The documented ``rllm.agents`` import path for the data model."""
