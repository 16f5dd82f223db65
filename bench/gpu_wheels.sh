#!/usr/bin/env bash
# Run here, before the device call: what bench/gpu.py needs and the GPU machines' image lacks, as wheels in .whl/
# (ignored by git; the device tool carries it: `carry: [".whl"]`). The image has Python 3.12 with a CUDA torch,
# accelerate, huggingface_hub, safetensors, pyarrow, pandas and numpy; it lacks omegaconf, TRL and datasets, and its
# transformers is newer than the releases rllm is tested with. So: rllm itself (a wheel of this checkout: its entry
# points register the plugins), and the versions CI tests (.ci/run). About 18 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${GPU_PYTHON_VERSION:-3.12}
rm -rf .whl
mkdir .whl
python3 -m pip wheel --quiet --disable-pip-version-check --no-deps -w .whl .
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "$python" --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    omegaconf==2.4.0 transformers==5.10.4 tokenizers==0.22.2 trl==1.16.0 datasets==5.2.0 dill==0.4.1 \
    multiprocess==0.70.19
du -sh .whl
