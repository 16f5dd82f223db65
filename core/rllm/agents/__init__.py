"""The reference's ``rllm.agents`` import path for the data model."""
