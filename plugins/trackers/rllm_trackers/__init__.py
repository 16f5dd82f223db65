"""rllm's experiment trackers beyond the console and metrics.jsonl: ``tensorboard``, ``mlflow`` and ``wandb``.

Each is an optional extra (``rllm[tensorboard]``, ``rllm[mlflow]``, ``rllm[wandb]``) whose library is imported
only when a run names the tracker; see docs/trackers.md.
"""
