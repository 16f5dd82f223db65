"""The ``tinker`` plugin's hooks: the backend's name and its ``rllm.tinker`` settings.

Nothing here imports the ``tinker`` SDK: the backend is registered as the path of
:class:`rllm_tinker.backend.TinkerBackend`, imported when a run selects it; that module names
the extra (and the SDK versions it was tested with) in one line when they are not installed.
"""

from __future__ import annotations

from rllm import hookimpl
from rllm.config import TEMPERATURE_KEY, TOP_P_KEY, ConfigKey
from rllm.plugins import BackendRegistrar, ConfigSectionRegistrar

TINKER_LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro")
"""The losses ``rllm serve --tinker`` implements (Tinker's names): ``rllm.tinker.server_losses``' default."""
SDK_RANGE = ((0, 38), (0, 39))
"""The ``tinker`` SDK versions this backend was tested with: at least the first, below the second."""


@hookimpl
def rllm_register_backends(register: BackendRegistrar) -> None:
    register("tinker", "rllm_tinker.backend:TinkerBackend")  # imports the SDK only when selected


def _task_names() -> list[str]:
    from rllm.tasks import TASKS

    return list(TASKS)


TINKER_KEYS = (
    ConfigKey(
        "base_url",
        "str",
        None,
        "The Tinker service's root URL (e.g. http://127.0.0.1:8000 for rllm serve --tinker); null: the SDK's "
        "TINKER_BASE_URL, else its own default.",
        nullable=True,
    ),
    ConfigKey(
        "api_key",
        "str",
        None,
        "The API key, only as an interpolation such as ${oc.env:MY_KEY} (config.yaml keeps the interpolation, "
        "never the key); null: the SDK's TINKER_API_KEY. A literal key is refused.",
        nullable=True,
    ),
    ConfigKey(
        "base_model", "str", None, "The served model to train (required): its name on the server.", nullable=True
    ),
    ConfigKey("rank", "int", 32, "LoRA rank of the training client.", minimum=1),
    ConfigKey("train_mlp", "bool", True, "LoRA adapters on the MLP layers."),
    ConfigKey("train_attn", "bool", True, "LoRA adapters on the attention layers."),
    ConfigKey("train_unembed", "bool", True, "LoRA adapter on the output head."),
    ConfigKey(
        "server_losses",
        "list[str]",
        list(TINKER_LOSSES),
        "The losses the server implements (Tinker's names); a run whose roles route to another is refused before "
        "it trains. The default is rllm serve --tinker's.",
    ),
    ConfigKey(
        "server_snapshots",
        "int",
        3,
        "Unnamed sampler snapshots the server keeps (rllm serve --tinker --tinker-snapshots; its default 3); an "
        "asynchronous run whose lead needs more than this (lead + 1) is refused before it trains.",
        minimum=1,
    ),
    ConfigKey("lr", "float", 1e-4, "Adam learning rate (scaled by rllm.algorithm.lr_schedule).", minimum=0, above=True),
    ConfigKey("adam_beta1", "float", 0.9, "Adam beta1.", minimum=0, maximum=1),
    ConfigKey("adam_beta2", "float", 0.95, "Adam beta2.", minimum=0, maximum=1),
    ConfigKey("adam_eps", "float", 1e-8, "Adam epsilon.", minimum=0, above=True),
    ConfigKey("weight_decay", "float", 0.0, "Adam weight decay.", minimum=0),
    TEMPERATURE_KEY,
    TOP_P_KEY,
    ConfigKey("top_k", "int", 0, "Sample among the k likeliest tokens; 0: off.", minimum=0),
    ConfigKey("max_new_tokens", "int", 16, "Most tokens one sampling call returns.", minimum=1),
    ConfigKey(
        "max_prompt_length",
        "int",
        None,
        "Longer prompts are not sent: the workflow ends with max_prompt_length_exceeded; null: no limit here.",
        minimum=1,
        nullable=True,
    ),
    ConfigKey("greedy_validation", "bool", True, "Validation samples at temperature 0 (the server's greedy path)."),
    ConfigKey(
        "tokenizer",
        "str",
        None,
        "A directory or hub id of the model's tokenizer, for reply text and chat (get_model_response); null: "
        "token ids only (the replies' text is empty, chat is refused).",
        nullable=True,
    ),
    ConfigKey(
        "tasks", "list[str]", ["digit_max"], "Built-in task families (as rllm.embedded.tasks).", names=_task_names
    ),
    ConfigKey("seed", "int", 0, "Seed of the LoRA initialisation, sampling and the task order.", minimum=0),
)
"""The ``rllm.tinker`` section."""


@hookimpl
def rllm_register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("rllm.tinker", TINKER_KEYS)
