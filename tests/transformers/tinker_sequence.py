"""The Tinker SDK's train -> sample sequence against a server, as a script: ``python tinker_sequence.py URL MODEL``.

Run by tests/transformers/test_tinker_server.py with each SDK version under test (an older one
lives in its own environment), so it uses only what the SDK's versions share. It prints one JSON
object: the SDK's version, the losses, the sampled tokens and log-probs, and the server's
``forward`` log-probs of the same tokens.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import tinker
from tinker import types

TOKENS = [3, 14, 15, 9, 26, 5, 35, 8, 9, 7]
SAMPLED = [-3.9, -4.6, -4.2, -5.0, -4.4, -4.8, -4.1, -4.7, -4.5]
ADVANTAGES = [0.0, 0.0, 1.0, 1.0, -0.5, -0.5, 2.0, 2.0, 1.0]
WEIGHTS = [0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


def _done(value: Any) -> Any:
    """A future's result (SDK 0.38 returns futures where 0.18 returned some objects directly)."""
    return value.result() if hasattr(value, "result") else value


def datum(loss: str) -> types.Datum:
    inputs: dict[str, Any] = {"target_tokens": np.array(TOKENS[1:], dtype=np.int64)}
    if loss == "cross_entropy":
        inputs["weights"] = np.array(WEIGHTS, dtype=np.float32)
    else:
        inputs["logprobs"] = np.array(SAMPLED, dtype=np.float32)
        inputs["advantages"] = np.array(ADVANTAGES, dtype=np.float32)
    return types.Datum(model_input=types.ModelInput.from_ints(TOKENS[:-1]), loss_fn_inputs=inputs)


def main(url: str, model: str) -> None:
    service = tinker.ServiceClient(base_url=url, api_key="tml-rllm-test")
    try:
        training = _done(service.create_lora_training_client(base_model=model, rank=8))
        losses = {}
        for loss in ("cross_entropy", "importance_sampling", "ppo"):
            losses[loss] = _done(training.forward_backward([datum(loss)], loss)).metrics["loss:sum"]
        _done(training.optim_step(types.AdamParams(learning_rate=1e-2)))
        sampler = _done(training.save_weights_and_get_sampling_client())
        prompt = TOKENS[:4]
        params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=7)
        answer = _done(sampler.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=2, sampling_params=params))
        sequences, forward = [], []
        for sequence in answer.sequences:
            whole = prompt + list(sequence.tokens)
            check = types.Datum(
                model_input=types.ModelInput.from_ints(whole[:-1]),
                loss_fn_inputs={"target_tokens": np.array(whole[1:], dtype=np.int64)},
            )
            out = _done(training.forward([check], "cross_entropy")).loss_fn_outputs[0]["logprobs"]
            forward.append(list(np.asarray(out.tolist(), dtype=float))[len(prompt) - 1 :])
            sequences.append({"tokens": list(sequence.tokens), "logprobs": list(sequence.logprobs)})
        print(json.dumps({"version": tinker.__version__, "losses": losses, "sequences": sequences, "forward": forward}))
    finally:
        if hasattr(service, "close"):  # SDK 0.38; 0.18 has none (its session ends when its heartbeats stop)
            service.close("success").result()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
