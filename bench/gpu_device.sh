#!/usr/bin/env bash
# The GPU check in one call of the device tool, from the repository's root there, after bench/gpu_wheels.sh here:
#   run(command="bash bench/gpu_device.sh", carry=[".whl"], timeout_s=540)
# It installs the carried wheels beside the image's CUDA torch, prints the versions it runs, then bench/gpu.py
# (the Qwen2.5-1.5B shape; rllm's side first, so its figures print even if TRL's side fails). The output is also
# written to $OUT/gpu.txt (the device tool brings it back). GPU_ARGS passes options to bench/gpu.py; GPU_PYTHON,
# GPU_SITE and GPU_WHEELS name the Python, the folder the wheels go to and the folder they come from (the test runs
# it on the CPU with its own).
set -uo pipefail
cd "$(dirname "$0")/.."
python=${GPU_PYTHON:-python3}
site=${GPU_SITE:-/tmp/site}
wheels=${GPU_WHEELS:-.whl}
out=${OUT:-$(mktemp -d)}
ls "$wheels"/*.whl > /dev/null 2>&1 || { echo "no wheels in $wheels/: run bench/gpu_wheels.sh here, carry .whl"; exit 2; }
"$python" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$wheels"/*.whl || exit 2
export PYTHONPATH="$site" PYTHONUNBUFFERED=1
"$python" - <<'PY' 2>&1 | tee "$out/gpu.txt"
import importlib.metadata as metadata

import rllm
import torch


def version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


names = ("rllm", "torch", "transformers", "tokenizers", "trl", "datasets", "pyarrow", "accelerate", "omegaconf")
print("versions:", ", ".join(f"{name} {version(name)}" for name in names))
print("rllm from:", rllm.__file__)
print("cuda:", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PY
# shellcheck disable=SC2086
"$python" bench/gpu.py ${GPU_ARGS:-} 2>&1 | tee -a "$out/gpu.txt"
