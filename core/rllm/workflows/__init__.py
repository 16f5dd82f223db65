"""The reference's ``rllm.workflows`` import path."""
