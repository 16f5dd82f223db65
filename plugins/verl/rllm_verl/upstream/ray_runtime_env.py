"""rLLM's Ray ``runtime_env`` for verl's workers: its defaults, the launching shell's library variables, the job's.

Ray merges the ``runtime_env`` given to ``ray.init`` with the one ``ray job submit`` set and fails
on a key both hold, so every variable the job sets is left out here (the job's value wins).
``RLLM_EXCLUDE`` (``VLLM*,CUDA*,NCCL_IB_DISABLE``) keeps variables or whole prefixes at home.
A job config that is not JSON is Ray's to report; here it counts as no job config, as in rLLM.
"""

from __future__ import annotations

import json
import os
from typing import Any

PPO_RAY_RUNTIME_ENV: dict[str, dict[str, str]] = {
    "env_vars": {
        "TOKENIZERS_PARALLELISM": "true",
        "NCCL_DEBUG": "WARN",
        "VLLM_LOGGING_LEVEL": "WARN",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "VLLM_DISABLE_COMPILE_CACHE": "1",  # vLLM's compile cache can be corrupted (vllm-project/vllm#31199)
        "NCCL_CUMEM_ENABLE": "0",  # weight sync between actor and separate rollout servers hangs without it
    },
}
FORWARD_PREFIXES = tuple(
    f"{name}_"
    for name in (
        "VLLM", "SGL", "SGLANG", "HF", "TOKENIZERS", "DATASETS", "TORCH", "PYTORCH", "DEEPSPEED",
        "MEGATRON", "NCCL", "CUDA", "CUBLAS", "CUDNN", "NV", "NVIDIA", "RLLM",
    )
)  # fmt: skip
"""The variables of these libraries travel from the launching shell to the workers."""
EXCLUDE = "RLLM_EXCLUDE"


def _get_forwarded_env_vars() -> dict[str, str]:
    """The launching shell's variables with a forwarded prefix, less those ``RLLM_EXCLUDE`` names (and itself)."""
    prefixes = set(FORWARD_PREFIXES)
    names = {EXCLUDE}
    for item in os.environ.get(EXCLUDE, "").split(","):
        if "*" in item:  # VLLM* drops the prefix VLLM_
            prefixes.discard(item.replace("*", "_"))
        elif item:
            names.add(item)
    return {k: v for k, v in os.environ.items() if k.startswith(tuple(prefixes)) and k not in names}


def get_ppo_ray_runtime_env() -> dict[str, Any]:
    """The ``runtime_env`` for ``ray.init``: rllm's defaults under the forwarded variables, less the job's keys."""
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

    env = {**PPO_RAY_RUNTIME_ENV["env_vars"], **_get_forwarded_env_vars()}
    try:
        job = json.loads(os.environ.get(RAY_JOB_CONFIG_JSON_ENV_VAR, "{}")).get("runtime_env") or {}
    except (json.JSONDecodeError, AttributeError):
        job = {}
    for key in job.get("env_vars") or {}:
        env.pop(key, None)
    runtime_env: dict[str, Any] = {"env_vars": env}
    if job.get("working_dir") is None:
        runtime_env["working_dir"] = None
    return runtime_env


__all__ = ["PPO_RAY_RUNTIME_ENV", "_get_forwarded_env_vars", "get_ppo_ray_runtime_env"]
