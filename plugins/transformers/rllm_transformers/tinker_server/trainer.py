"""The compute behind the Tinker routes: the transformers backend's model trained with full weights, and a sampler.

One :class:`TinkerTrainer` per server, called from one worker thread at a time (the service
queues every request), so a sample never sees half-updated weights and gradients of
consecutive ``forward_backward`` calls add up until ``optim_step``, as Tinker's do.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rllm.engine import Generation
from rllm_transformers.checkpoint import MODEL_DIR, STATE_FILE, load_training_state, save_training_state
from rllm_transformers.engine import SampleRequest, Sampling, TransformersEngine, UniformStream
from rllm_transformers.logprobs import score_targets
from rllm_transformers.model import Policy, set_training
from rllm_transformers.tinker_server.losses import tinker_loss
from rllm_transformers.tinker_server.sampling import SampleJob
from rllm_transformers.tinker_server.wire import Batch, Sequence

ADAM_DEFAULTS = {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0}
"""``AdamParams``' defaults in the SDK: the optimizer's settings until the first ``optim_step`` sets them."""


def target_log_probs(model: Any, rows: list[list[int]], targets: list[list[int]], pad: int) -> torch.Tensor:
    """``log p(targets[i][t] | rows[i][: t + 1])`` for a right-padded batch, ``(datums, longest)``; 0 past a row.

    Chunked (:func:`~rllm_transformers.logprobs.score_targets`): at a real vocabulary the batch's whole logits would
    be its largest tensor, and a log-softmax over them as much again."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    wanted = torch.zeros((len(rows), width), dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, target) in enumerate(zip(rows, targets, strict=True)):
        ids[i, : len(row)], wanted[i, : len(row)], attention[i, : len(row)] = (
            torch.tensor(row),
            torch.tensor(target),
            1,
        )
    device = next(model.parameters()).device
    return score_targets(model, ids.to(device), attention.to(device), wanted.to(device))


class TinkerTrainer:
    """The trained model and its AdamW, and a second copy of the model that samples from saved weights."""

    def __init__(self, policy: Policy, seed: int) -> None:
        self.policy = policy
        self.model = policy.model
        self.pad = int(policy.tokenizer.pad_token_id)
        self.vocab = int(self.model.get_input_embeddings().weight.shape[0])
        self.context_limit = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.base_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.optimizer = self._new_optimizer()
        self.sampler = copy.deepcopy(self.model)
        self.sampler_weights: str | None = None
        """The directory whose weights the sampler holds (None: the base model's)."""
        self.stream = UniformStream(seed)
        limit = self.context_limit
        self.engine = TransformersEngine(
            self.sampler, policy.tokenizer, policy.device, self.stream, Sampling(), limit, limit, True
        )

    def _new_optimizer(self) -> torch.optim.AdamW:
        d = ADAM_DEFAULTS
        return torch.optim.AdamW(
            self.model.parameters(),
            lr=d["learning_rate"],
            betas=(d["beta1"], d["beta2"]),
            eps=d["eps"],
            weight_decay=d["weight_decay"],
        )

    def reset(self) -> None:
        """Back to the base weights with a new optimizer: what a new ``create_model`` starts from."""
        self.model.load_state_dict(self.base_state)
        self.model.zero_grad(set_to_none=True)
        self.optimizer = self._new_optimizer()

    def forward_backward(self, batch: Batch, settings: dict[str, float]) -> tuple[list[np.ndarray], dict[str, float]]:
        """Each datum's target log-probs and the summed loss; with a backward pass unless ``forward_only``."""
        rows = [d.tokens for d in batch.data]
        targets = [d.inputs["target_tokens"].astype(np.int64).tolist() for d in batch.data]
        set_training(self.model, not batch.forward_only)
        with torch.set_grad_enabled(not batch.forward_only):
            log_probs = target_log_probs(self.model, rows, targets, self.pad)
            mask = torch.zeros_like(log_probs, dtype=torch.bool)
            inputs: dict[str, torch.Tensor] = {}
            for i, datum in enumerate(batch.data):
                mask[i, : len(datum.tokens)] = True
                for name, values in datum.inputs.items():
                    if name != "target_tokens":
                        column = inputs.setdefault(name, torch.zeros_like(log_probs, dtype=torch.float32))
                        column[i, : len(values)] = torch.from_numpy(values.astype(np.float32))
            loss, metrics = tinker_loss(batch.loss_fn, settings, log_probs, inputs, mask)
            if not batch.forward_only:
                loss.backward()
        outputs = [log_probs[i, : len(r)].detach().cpu().numpy() for i, r in enumerate(rows)]
        return outputs, {"loss:sum": float(loss.detach()), **{f"{k}:mean": v for k, v in metrics.items()}}

    def optim_step(self, params: dict[str, float]) -> dict[str, float]:
        """One AdamW step with the request's ``AdamParams`` (decoupled weight decay, as Tinker's), then zero grads."""
        for group in self.optimizer.param_groups:
            group["lr"] = params["learning_rate"]
            group["betas"] = (params["beta1"], params["beta2"])
            group["eps"] = params["eps"]
            group["weight_decay"] = params["weight_decay"]
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = (
            float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) if grads else 0.0
        )
        if params.get("grad_clip_norm", 0.0) > 0 and grads:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), params["grad_clip_norm"])
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm:mean": norm}

    def save_state(self, directory: Path) -> None:
        """Weights and optimizer, as the transformers backend's checkpoints are (safetensors and JSON)."""
        directory.mkdir(parents=True, exist_ok=True)
        state = self.optimizer.state_dict()
        save_training_state(directory, self.model, self.policy.tokenizer, state, {"sampler": self.stream}, {})

    def load_state(self, directory: Path, with_optimizer: bool) -> None:
        """What :meth:`save_state` wrote; without ``with_optimizer`` a new optimizer (Tinker's ``load_weights``)."""
        saved = json.loads((directory / STATE_FILE).read_text(encoding="utf-8"))["param_groups"]
        for group, stored in zip(self.optimizer.param_groups, saved, strict=False):
            group.update({k: (tuple(v) if k == "betas" else v) for k, v in stored.items() if k != "params"})
        load_training_state(directory, self.model, self.optimizer, {})
        if not with_optimizer:
            self.optimizer = self._new_optimizer()

    def save_sampler(self, directory: Path) -> None:
        """The weights as ``save_pretrained`` writes them: a model directory ``rllm serve`` can serve too.

        The sampler takes them from memory at once, so the first sample from a fresh snapshot (the
        next step's rollouts) does not read them back from disk.
        """
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(directory, safe_serialization=True)
        self.policy.tokenizer.save_pretrained(directory)
        self.sampler.load_state_dict(self.model.state_dict())
        self.sampler_weights = str(directory)

    def _use_weights(self, directory: str | None) -> None:
        if directory == self.sampler_weights:
            return
        if directory is None:
            self.sampler.load_state_dict(self.base_state)
        else:
            from transformers import AutoModelForCausalLM

            path = Path(directory)
            source = path / MODEL_DIR if (path / MODEL_DIR).is_dir() else path
            self.sampler.load_state_dict(AutoModelForCausalLM.from_pretrained(str(source)).state_dict())
        self.sampler_weights = directory

    def sample(self, jobs: list[SampleJob]) -> list[tuple[list[Sequence], list[float] | None]]:
        """Each job's continuations and, if asked, its prompt's log-probs, from one batched call of the engine.

        The jobs share their weights and sampling settings (:func:`~.sampling.batches`); each row
        draws from its job's stream (the server's when the job has no seed). The tokens and
        log-probs are the transformers engine's (those of the distribution drawn from); a stop
        token ends a sequence after it, a stop string after the token completing it.
        """
        self._use_weights(jobs[0].weights)
        sampling = jobs[0].sampling
        self.engine.sampling = sampling
        self.engine.is_validation = sampling.temperature == 0  # the engine's greedy path
        requests = []
        for job in jobs:
            stream = self.stream if job.seed is None else UniformStream(job.seed)
            requests += [SampleRequest(list(job.prompt), job.max_tokens, None, stream) for _ in range(job.count)]  # type: ignore[arg-type]
        generations = iter(self.engine.sample(requests))
        answers = []
        for job in jobs:
            sequences = [self._cut(job, next(generations)) for _ in range(job.count)]
            answers.append((sequences, self._prompt_log_probs(job.prompt) if job.with_prompt_logprobs else None))
        return answers

    def _cut(self, job: SampleJob, generation: Generation) -> Sequence:
        """The generation ended at the job's first stop token or stop string."""
        from rllm_transformers.serve import apply_stop

        tokens, logprobs, reason = generation.response_ids, generation.logprobs, generation.finish_reason
        cut = next((i for i, t in enumerate(tokens) if t in job.stop_ids), None)
        if cut is not None:
            tokens, logprobs, reason = tokens[: cut + 1], logprobs[: cut + 1], "stop"
        if job.stop_texts:
            stopped = apply_stop(
                Generation(tokens, logprobs, "", reason, job.prompt), list(job.stop_texts), self.policy.tokenizer
            )
            tokens, logprobs, reason = stopped.response_ids, stopped.logprobs, stopped.finish_reason
        return Sequence(list(tokens), [float(v) for v in logprobs], "stop" if reason == "stop" else "length")

    def _prompt_log_probs(self, prompt: list[int]) -> list[float]:
        """The prompt's log-probs under the sampler's weights; its first token has none (NaN)."""
        set_training(self.sampler, False)
        with torch.no_grad():
            scored = target_log_probs(self.sampler, [prompt[:-1]], [prompt[1:]], self.pad)[0] if len(prompt) > 1 else []
        return [float("nan")] + [float(v) for v in scored]
