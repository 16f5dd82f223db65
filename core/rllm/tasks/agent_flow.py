"""An agent for the text tasks that knows nothing of rllm: it talks to the policy with the stock ``openai`` client.

:class:`AnswerAgent` is an :class:`~rllm.types.AgentFlow` (it has ``run(task, config)``); this
module imports nothing from rllm, to show that an agent trained by rllm needs only the URL its
config gives. It asks for the completion of ``"<question> Answer: "``, one character by default
(the answer digit), through ``/v1/completions``. :class:`rllm.tasks.text.TextEvaluator` scores it.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["AnswerAgent"]


class AnswerAgent:
    """Completes the task's question after ``Answer: `` with at most ``max_tokens`` tokens."""

    def __init__(self, max_tokens: int = 1) -> None:
        self.max_tokens = int(max_tokens)
        self._clients = threading.local()

    def _client(self, base_url: str) -> Any:
        """One client per thread, re-pointed at each episode's URL (a new client per call costs more)."""
        import openai

        client = getattr(self._clients, "client", None)
        if client is None:
            client = self._clients.client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
        return client.with_options(base_url=base_url)

    def run(self, task: dict[str, Any], config: Any) -> None:
        self._client(config.base_url).completions.create(
            model=config.model, prompt=f"{task['question']} Answer: ", max_tokens=self.max_tokens
        )
