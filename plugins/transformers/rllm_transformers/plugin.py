"""The ``transformers`` plugin's hooks: the backend's name and its ``rllm.transformers`` settings.

Nothing here imports torch or transformers: the backend is registered as the path of
:class:`rllm_transformers.backend.TransformersBackend`, imported when a run selects it; that
module names the extra in one line when it is not installed.
"""

from __future__ import annotations

import importlib.util

from rllm import hookimpl
from rllm.config import TEMPERATURE_KEY, TOP_P_KEY, ConfigKey
from rllm.errors import ConfigError
from rllm.plugins import BackendRegistrar, ConfigSectionRegistrar

EXTRA = ("torch", "transformers", "safetensors")
TOKENIZERS = ("digits", "text")
"""``rllm.transformers.tokenizer``: the tiny model's tokenizer (the first is the default)."""
STRATEGIES = ("ddp", "fsdp")
"""``rllm.transformers.distributed.strategy`` under torchrun (the first is the default)."""
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "bf16-pure")
"""``rllm.transformers.precision`` (the first is the default); rllm_transformers.precision says what each keeps."""
TINY_HEADS = 4
"""Attention heads of the tiny model (2 key-value heads): its width must divide among them."""
INIT_STD = 0.02
"""``tiny``'s default std of its initial weights (``rllm.transformers.init_std``), transformers' own."""
LORA_EXTRA = ("peft",)
"""What ``rllm.transformers.lora.rank`` > 0 needs besides :data:`EXTRA` (also in the ``transformers`` extra)."""
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""``rllm.transformers.lora.target_modules``' default: every linear layer of attention and the MLP in
Qwen2/Llama/Mistral-style models (``tiny`` among them); the output head and the embeddings stay frozen."""


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules cannot be imported either
        return False


def missing_extra(names: tuple[str, ...] = EXTRA) -> list[str]:
    return [name for name in names if not _installed(name)]


def missing_extra_error(
    exc: ImportError, needed_by: str = "rllm.backend=transformers", names: tuple[str, ...] = EXTRA
) -> Exception:
    """What importing a module of this plugin without the extra raises: one line naming what ``needed_by`` needs.

    ``names``: the packages of the extra that ``needed_by`` imports. ``exc`` itself when they are installed (the
    import failed for another reason, reported as it is).
    """
    missing = missing_extra(names)
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
    ConfigKey(
        "precision",
        "str",
        PRECISIONS[0],
        "fp32; bf16-mixed or fp16-mixed (float32 weights, gradients and AdamW state, the forward under autocast in "
        "bfloat16 or float16, fp16 with loss scaling); bf16-pure (everything in bfloat16: updates under half a "
        "bfloat16 step are lost, warned). TF32 matmuls on CUDA. See docs/transformers.md.",
        choices=PRECISIONS,
    ),
    ConfigKey(
        "dtype",
        "str",
        None,
        "Earlier spelling of precision: float32 is fp32, bfloat16 is bf16-pure.",
        choices=("float32", "bfloat16"),
        nullable=True,
    ),
    ConfigKey(
        "gradient_checkpointing",
        "bool",
        False,
        "Activation checkpointing in the update (transformers' gradient_checkpointing_enable, use_reentrant=False): "
        "each layer's activations are recomputed in the backward pass instead of kept.",
    ),
    ConfigKey(
        "share_prompts",
        "bool",
        True,
        "Rows that begin with the same tokens (a task's rollouts) run them once in the log-prob passes and the "
        "update: a KV cache of the distinct prompts, copied to each row. The numbers are a forward's over whole rows "
        "up to rounding, which then depends on which rows share a pass; false: one forward over whole rows. Off "
        "under DDP, FSDP, activation checkpointing and active dropout.",
    ),
    ConfigKey(
        "max_tokens_per_micro_batch",
        "int",
        0,
        "Cut each micro-batch further so that rows x their longest row's tokens stays within this many (a longer "
        "row alone); 0: off. The gradient is the same sum.",
        minimum=0,
    ),
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
    TEMPERATURE_KEY,
    TOP_P_KEY,
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
        "lora.rank",
        "int",
        0,
        "LoRA (through peft): the adapters' rank; 0: off, the whole model trains. With a rank only the adapters "
        "train, checkpoints hold them, servers get merged weights (docs/transformers.md, LoRA).",
        minimum=0,
    ),
    ConfigKey(
        "lora.alpha", "float", 16.0, "LoRA: the adapters' output is scaled by alpha / rank.", minimum=0, above=True
    ),
    ConfigKey(
        "lora.target_modules",
        "list[str]",
        list(LORA_TARGETS),
        "LoRA: the linear layers that get adapters, by name (each must name a linear layer of the model); the "
        "default is attention's and the MLP's in Qwen2/Llama-style models.",
    ),
    ConfigKey(
        "lora.dropout", "float", 0.0, "LoRA: dropout on the adapters' input while training.", minimum=0, maximum=0.9
    ),
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
