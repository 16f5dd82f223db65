"""The ``transformers`` backend: trains a causal language model (a tiny one built from a config, or any
model transformers loads) with rllm's estimators, on the CPU or a GPU. Needs ``pip install 'rllm[transformers]'``."""
