"""``rllm.transformers.num_threads=0``: one torch thread for a model too small to split on the CPU, by its size."""

from __future__ import annotations

from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import OmegaConf

from rllm_transformers.model import default_threads, tiny_model


def _model(hidden: int, layers: int) -> torch.nn.Module:
    return tiny_model(OmegaConf.create({"hidden_size": hidden, "num_layers": layers}), 15, 14, 13)


def test_a_small_model_on_the_cpu_gets_one_thread_a_larger_one_torchs_default() -> None:
    # hidden 64, 2 layers: about 75k parameters; hidden 256, 4 layers: 4 x (256*256*2 + 256*128*2 + 3*256*512) = 2.4M
    assert default_threads(_model(64, 2), torch.device("cpu")) == 1
    assert default_threads(_model(256, 4), torch.device("cpu")) == 0
    assert default_threads(_model(64, 2), torch.device("cuda")) == 0  # threads are the CPU's setting only
