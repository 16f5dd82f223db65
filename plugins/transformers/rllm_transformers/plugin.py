"""The ``transformers`` plugin's hooks: the backend's name and its ``rllm.transformers`` settings.

Nothing here imports torch or transformers: the backend is registered as the path of
:class:`rllm_transformers.backend.TransformersBackend`, imported when a run selects it; that
module names the extra in one line when it is not installed.
"""

from __future__ import annotations

import importlib.util

from rllm import hookimpl
from rllm.config import ConfigKey
from rllm.errors import ConfigError
from rllm.plugins import BackendRegistrar, ConfigSectionRegistrar

EXTRA = ("torch", "transformers", "safetensors")
TOKENIZERS = ("digits", "text")
"""``rllm.transformers.tokenizer``: the tiny model's tokenizer (the first is the default)."""
STRATEGIES = ("ddp", "fsdp")
"""``rllm.transformers.distributed.strategy`` under torchrun (the first is the default)."""
TINY_HEADS = 4
"""Attention heads of the tiny model (2 key-value heads): its width must divide among them."""
INIT_STD = 0.02
"""``tiny``'s default std of its initial weights (``rllm.transformers.init_std``), transformers' own."""


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules cannot be imported either
        return False


def missing_extra() -> list[str]:
    return [name for name in EXTRA if not _installed(name)]


def missing_extra_error(exc: ImportError, needed_by: str = "rllm.backend=transformers") -> Exception:
    """What importing a module of this plugin without the extra raises: one line naming what ``needed_by`` needs.

    ``exc`` itself when the extra is installed (the import failed for another reason, reported as it is).
    """
    missing = missing_extra()
    if not missing:
        return exc
    return ConfigError(
        f"{needed_by} needs {', '.join(missing)}: pip install 'rllm[transformers]' "
        "(on a machine without a GPU, install torch's CPU build first)."
    )


@hookimpl
def rllm_register_backends(register: BackendRegistrar) -> None:
    register("transformers", "rllm_transformers.backend:TransformersBackend")  # imports torch only when selected


def _task_names() -> list[str]:
    from rllm.tasks import TASKS

    return list(TASKS)


TRANSFORMERS_KEYS = (
    ConfigKey(
        "model",
        "str",
        "tiny",
        "tiny (a small Qwen2-style model built from a config, random weights, a character tokenizer), a "
        "directory save_pretrained wrote, or a hub id.",
    ),
    ConfigKey(
        "tokenizer",
        "str",
        TOKENIZERS[0],
        "tiny's tokenizer: digits (the digit tasks' 15 tokens, their own ids) or text (printable ASCII, bos/eos/pad, "
        "chat role markers and a chat template); a model directory or hub id brings its own.",
        choices=TOKENIZERS,
    ),
    ConfigKey(
        "teacher",
        "str",
        None,
        "On-policy distillation's teacher (estimator distill reads its log-probs, the field teacher_log_probs): tiny "
        "(seeded with seed + 1), a directory save_pretrained wrote or a hub id, with the student's tokenizer.",
        nullable=True,
    ),
    ConfigKey(
        "tasks", "list[str]", ["digit_max"], "Built-in task families (as rllm.embedded.tasks).", names=_task_names
    ),
    ConfigKey("device", "str", "auto", "auto (cuda if available), cpu or cuda.", choices=("auto", "cpu", "cuda")),
    ConfigKey("dtype", "str", "float32", "Parameter dtype.", choices=("float32", "bfloat16")),
    ConfigKey("seed", "int", 0, "Seed of the initialisation, sampling and mini-batch order.", minimum=0),
    ConfigKey(
        "num_threads",
        "int",
        0,
        "torch CPU threads; 0: one for a model under 1M parameters on the CPU, else torch's default.",
        minimum=0,
    ),
    ConfigKey(
        "hidden_size",
        "int",
        64,
        f"tiny: width (the MLP is twice as wide); a multiple of {2 * TINY_HEADS}, so each of its {TINY_HEADS} "
        "attention heads has an even width (rotary embeddings turn pairs).",
        minimum=2 * TINY_HEADS,
        multiple_of=2 * TINY_HEADS,
    ),
    ConfigKey("num_layers", "int", 2, "tiny: transformer layers.", minimum=1),
    ConfigKey(
        "init_std",
        "float",
        INIT_STD,
        "tiny: std of the random initial weights (transformers' initializer_range).",
        minimum=0,
        above=True,
    ),
    ConfigKey(
        "lr", "float", 0.003, "AdamW learning rate (scaled by rllm.algorithm.lr_schedule).", minimum=0, above=True
    ),
    ConfigKey("weight_decay", "float", 0.0, "AdamW weight decay.", minimum=0),
    ConfigKey("adam_beta1", "float", 0.9, "AdamW beta1.", minimum=0, maximum=1),
    ConfigKey("adam_beta2", "float", 0.999, "AdamW beta2.", minimum=0, maximum=1),
    ConfigKey("max_grad_norm", "float", 1.0, "Gradient-norm clipping.", minimum=0, above=True),
    ConfigKey("ppo_epochs", "int", 1, "Passes over each batch.", minimum=1),
    ConfigKey("mini_batches", "int", 1, "Optimizer steps per pass (later ones are off-policy).", minimum=1),
    ConfigKey("micro_batches", "int", 1, "Gradient-accumulation chunks per mini-batch.", minimum=1),
    ConfigKey("temperature", "float", 1.0, "Sampling temperature.", minimum=0, above=True),
    ConfigKey("top_p", "float", 1.0, "Nucleus sampling mass; 1: off.", minimum=0, maximum=1, above=True),
    ConfigKey("top_k", "int", 0, "Sample among the k likeliest tokens; 0: off.", minimum=0),
    ConfigKey(
        "max_new_tokens",
        "int",
        None,
        "Most tokens one generate() call returns (EOS stops earlier); null: a sixteenth of the model's context "
        "(max_position_embeddings), at most 4096 (the tiny models: 16).",
        minimum=1,
        nullable=True,
    ),
    ConfigKey(
        "max_prompt_length",
        "int",
        None,
        "Longer prompts are not generated: the workflow ends with max_prompt_length_exceeded; null: what the "
        "model's context leaves after max_new_tokens, at least 512 (the tiny models: 512).",
        minimum=1,
        nullable=True,
    ),
    ConfigKey("greedy_validation", "bool", True, "Validation answers greedily (argmax) instead of sampling."),
    ConfigKey(
        "distributed.strategy",
        "str",
        STRATEGIES[0],
        "Under torchrun (WORLD_SIZE > 1): ddp (every rank holds the model, gradients all-reduced) or fsdp (the "
        "update shards weights, gradients and optimizer state with FSDP2; rollouts use the gathered weights). "
        "See docs/scaling.md.",
        choices=STRATEGIES,
    ),
    ConfigKey(
        "distributed.timeout",
        "float",
        300.0,
        "Seconds the ranks wait for each other: the rendezvous at start and every collective.",
        minimum=0,
        above=True,
    ),
)
"""The ``rllm.transformers`` section."""


@hookimpl
def rllm_register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("rllm.transformers", TRANSFORMERS_KEYS)
