"""rLLM's import paths of modules a plugin implements: the core path becomes the plugin's module.

Core never imports a shipped plugin by name (the import contract), so an rLLM path such as
``rllm.trainer.verl.transform`` names its module as a string and is replaced, in
``sys.modules``, by that module when first imported: both paths give the same objects, and a test
that patches a name on rLLM's path patches the code that reads it. Without the plugin, or with
it switched off, the import is one :class:`~rllm.errors.PluginLoadError` line naming the plugin.
"""

from __future__ import annotations

import importlib
import sys

from rllm.errors import PluginLoadError
from rllm.plugins.reporting import _env_names


def become_plugin_module(path: str, plugin: str, module: str) -> None:
    """Make the module being imported at ``path`` be ``plugin``'s ``module`` (imported now)."""
    if plugin in (_env_names("RLLM_DISABLED_PLUGINS") or set()):
        raise PluginLoadError(
            f"{path} is the {plugin} plugin's {module}, and RLLM_DISABLED_PLUGINS switches that plugin off; "
            f"remove {plugin} from RLLM_DISABLED_PLUGINS."
        )
    package = module.split(".")[0]
    try:
        target = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        what = "is not installed" if exc.name == package else f"needs {exc.name}, which is not installed"
        raise PluginLoadError(
            f"{path} is the {plugin} plugin's {module}, which {what}: pip install 'rllm[{plugin}]'."
        ) from None
    sys.modules[path] = target
