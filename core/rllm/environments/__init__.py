"""rLLM's ``rllm.environments`` path: what an agent acts in (:class:`rllm.environments.base.base_env.BaseEnv`)."""
