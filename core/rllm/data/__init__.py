"""Sample data shipped with rllm (a rollout file for ``rllm advantages``)."""
