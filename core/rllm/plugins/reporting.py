"""What the plugin manager tells users: each plugin's :class:`PluginInfo`, its warnings and failures.

Also the environment switches (``RLLM_STRICT_PLUGINS`` and the lists of plugins to load or
skip) that decide whether a failure is a warning or an error and which plugins are loaded.
Every :class:`PluginWarning` is attributed to the first caller outside rllm, so the warning
points at the user's code rather than at the manager.
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any, Literal

from rllm.errors import PluginError, PluginWarning, RLLMError
from rllm.plugins.discovery import BUILTIN_DISTRIBUTION, _normalise
from rllm.plugins.hook_kinds import CONFIG_SECTIONS, HOOK_KINDS, HookKind
from rllm.plugins.registry import Registry

PluginStatus = Literal["ok", "failed", "blocked", "conflict", "inactive"]
SLOW_PLUGIN_SECONDS = 0.5
"""A plugin whose import and hooks take longer than this is named as slow by ``rllm plugins``."""


@dataclass
class PluginInfo:
    """What ``rllm plugins`` reports about one plugin."""

    name: str
    distribution: str | None
    version: str | None
    module: str | None
    status: PluginStatus = "ok"
    error: str | None = None
    hooks: list[str] = field(default_factory=list)
    estimators: list[str] = field(default_factory=list)
    grouping_hooks: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    batch_fields: list[str] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)
    config_sections: list[str] = field(default_factory=list)
    weight_syncs: list[str] = field(default_factory=list)
    trackers: list[str] = field(default_factory=list)
    load_seconds: float = 0.0

    @property
    def slow(self) -> bool:
        return self.load_seconds > SLOW_PLUGIN_SECONDS

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "load_seconds": round(self.load_seconds, 4), "slow": self.slow}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _env_names(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return {_normalise(part.strip()) for part in raw.split(",") if part.strip()}


def strict_from_env() -> bool:
    """Whether ``RLLM_STRICT_PLUGINS`` asks for plugin failures to be errors."""
    return _env_flag("RLLM_STRICT_PLUGINS")


_RLLM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _warn(message: str) -> None:
    """A :class:`PluginWarning` attributed to the first caller outside rllm (``sys:1`` under the ``rllm`` command)."""
    level = 2
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_RLLM_DIR):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, PluginWarning, stacklevel=level)


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


class ReportingMixin:
    """The plugin manager's reports: failures, ignored claims, each plugin's status, why a name is missing.

    The state it reads is created by :class:`rllm.plugins.manager.PluginManager`.
    """

    plugins: dict[str, PluginInfo]
    failures: list[PluginError]
    strict: bool | None
    _loading: bool

    def registry(self, kind: HookKind) -> Registry[Any]:
        """The registry that ``kind``'s hook fills."""
        return getattr(self, kind.attribute)

    def is_strict(self) -> bool:
        return strict_from_env() if self.strict is None else self.strict

    def why_missing(self, name: str) -> str:
        """For an unknown name: the plugin its prefix (``verl.grpo``) or itself names, if absent or not working."""
        plugin = name.split(".", 1)[0]
        info = self.plugins.get(plugin)
        if info is not None and info.status != "ok":
            return f" Plugin {plugin!r}, which would provide it, is {info.status}: {info.error}."
        if info is None and "." in name:
            return f" No plugin named {plugin!r} is installed; install it (`rllm plugins` lists the installed ones)."
        return ""

    def _fail(self, info: PluginInfo, error_type: type[PluginError], reason: str, cause: BaseException) -> None:
        where = f"distribution {info.distribution} {info.version}" if info.distribution else "no distribution"
        strict = self.is_strict()
        message = (
            f"rllm plugin {info.name!r} (module {info.module}, {where}) was not loaded: {reason}. "
            + ("" if strict else "rllm keeps working without it. ")
            + f"Fix or uninstall that distribution, or set RLLM_DISABLED_PLUGINS={info.name} to skip it"
            + ("." if strict else "; RLLM_STRICT_PLUGINS=1 makes this an error.")
        )
        info.status = "failed"
        info.error = f"{type(cause).__name__}: {cause}"
        error = error_type(message)
        error.__cause__ = cause
        self.failures.append(error)
        if not strict:
            _warn(message)
        elif not self._loading:
            raise error

    def warn_ignored(self) -> None:
        """Warn about every plugin claim on a built-in name made without ``replace=True`` (it never wins).

        Config sections have no ``replace``; a section that is taken is reported when the schema is built.
        """
        for kind in HOOK_KINDS:
            if kind is CONFIG_SECTIONS:
                continue
            registry = self.registry(kind)
            for entry in registry.ignored_claims():
                _warn(
                    f"{entry.source.describe()} registers {kind.what} {entry.name!r}, which is built in; "
                    f"{self._kept(registry, entry.name)}. To take the name over, plugin {entry.source.plugin!r} "
                    "must register it with replace=True."
                )

    @staticmethod
    def _kept(registry: Registry[Any], name: str) -> str:
        """Which claim is used instead of an ignored one."""
        try:
            winner = registry.resolve(name)
        except RLLMError:
            return "its version is ignored"
        if winner.source.kind == "builtin":
            return "the built-in is kept"
        return f"{winner.source.describe()} took it over with replace=True and is used"

    def plugin_infos(self) -> list[PluginInfo]:
        """Every known plugin, built-ins first, with conflicts on the names it claims marked."""
        for info in self.plugins.values():
            if info.status != "ok":
                continue
            problems = []
            for kind in HOOK_KINDS:
                if kind is CONFIG_SECTIONS:  # a taken section is reported when the schema is built
                    continue
                registry = self.registry(kind)
                for name in getattr(info, kind.attribute):
                    try:
                        winner = registry.resolve(name)
                    except RLLMError as exc:
                        problems.append(str(exc))
                        continue
                    mine = [c for c in registry.claims(name) if c.source.plugin == info.name]
                    ignored = any(c.source.kind == "plugin" and not c.replace for c in mine)
                    if ignored and winner.source.plugin != info.name and winner.source.kind != "runtime":
                        problems.append(
                            f"{kind.what} {name!r} is built in; the plugin's version is ignored "
                            f"because it did not register with replace=True ({self._kept(registry, name)})"
                        )
            if problems:
                info.status = "conflict"
                info.error = "; ".join(problems)
        builtin = {name for name, info in self.plugins.items() if info.distribution == BUILTIN_DISTRIBUTION}
        return sorted(self.plugins.values(), key=lambda info: (info.name not in builtin, info.name))
