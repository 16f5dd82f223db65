"""The ``register`` callable each registration hook receives: one per hook kind, typed by its Protocol.

Each function here builds the registrar of one kind for one plugin, with the signature of
that kind's Protocol in :mod:`rllm.plugins.hookspecs` (``EstimatorRegistrar``,
``GroupingHookRegistrar``, ...), so what a plugin author reads there is what the call
accepts. A call that does not fit the signature (an unknown keyword, a missing argument)
is refused like a wrong object: a one-line :class:`PluginContractError` naming the plugin,
with the closest keyword suggested.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from rllm.errors import PluginContractError
from rllm.plugins.discovery import Source
from rllm.plugins.hook_kinds import CONFIG_SECTIONS, HOOK_KIND
from rllm.plugins.hookspecs import (
    BackendRegistrar,
    BatchFieldRegistrar,
    ConfigSectionRegistrar,
    EstimatorRegistrar,
    GroupingHookRegistrar,
    KernelRegistrar,
    LossRegistrar,
    TrackerRegistrar,
    WeightSyncRegistrar,
)
from rllm.plugins.registry import LossEntry, first_unknown

if TYPE_CHECKING:
    from rllm.contract.fields import BatchField
    from rllm.contract.keys import ConfigKey, Option
    from rllm.contract.names import EstimatorStyle
    from rllm.plugins.registration import RegistrationMixin

F = TypeVar("F", bound=Callable[..., None])


def _checked(register: F, source: Source, what: str) -> F:
    """``register``, refusing a call its signature does not accept with an error naming the plugin.

    The signature is read only when a call raises ``TypeError``, so a call that fits costs
    nothing extra; ``inspect.signature`` of the result is that of ``register`` (``__wrapped__``).
    """

    @functools.wraps(register)
    def checked(*args: Any, **kwargs: Any) -> None:
        try:
            register(*args, **kwargs)
        except TypeError:
            signature = inspect.signature(register)
            try:
                signature.bind(*args, **kwargs)
            except TypeError as misfit:
                raise PluginContractError(_describe_misfit(signature, source, what, args, kwargs, misfit)) from None
            raise  # the arguments fit: the TypeError came from inside, and is reported as the hook's

    return checked  # type: ignore[return-value]


def _describe_misfit(
    signature: inspect.Signature,
    source: Source,
    what: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    exc: TypeError,
) -> str:
    """The refusal of a call that does not fit ``signature``: the unknown keyword (and the closest), or why not."""
    keywords = [p.name for p in signature.parameters.values() if p.kind is not inspect.Parameter.POSITIONAL_ONLY]
    name = args[0] if args else kwargs.get(keywords[0], "")
    unknown = first_unknown(kwargs, keywords)
    if unknown:
        key, hint = unknown
        problem = f"with unknown keyword {key!r}{hint}; register() accepts {', '.join(keywords)}"
    else:
        problem = f"with arguments that do not fit register{_plain(signature)}: {exc}"
    return f"{source.describe()} registered {what} {name!r} {problem}."


def _plain(signature: inspect.Signature) -> str:
    """The signature as a plugin author writes the call: ``(name, hook, *, replace=False)``."""
    parameters = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=parameters, return_annotation=inspect.Signature.empty))


def estimator_registrar(manager: RegistrationMixin, source: Source, names: list[str]) -> EstimatorRegistrar:
    """``register`` for ``rllm_register_estimators``: every keyword becomes a field of the EstimatorEntry."""

    def register_estimator(
        name: str,
        fn: Callable[..., Any],
        *,
        style: EstimatorStyle = "grouped",
        requires: Sequence[str] = (),
        options: Sequence[Option] | None = None,
        numerics: bool | str = False,
        replace: bool = False,
    ) -> None:
        declaration = {"style": style, "requires": requires, "options": options, "numerics": numerics}
        manager.add_estimator(name, fn, source, replace=replace, **declaration)
        names.append(name)

    return _checked(register_estimator, source, "estimator")


def loss_registrar(manager: RegistrationMixin, source: Source, names: list[str]) -> LossRegistrar:
    """``register`` for ``rllm_register_losses``: the loss and each alias become claims of their own."""

    def register_loss(
        name: str,
        fn: Callable[..., Any] | str,
        *,
        options: Sequence[Option] = (),
        aliases: Sequence[str] = (),
        agg_modes: Sequence[str] | None = None,
        needs_old_log_probs: bool = True,
        additive: bool = True,
        description: str = "",
        replace: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise PluginContractError(f"{source.describe()} registered a loss with an invalid name {name!r}.")
        declaration = {
            "options": options,
            "aliases": aliases,
            "agg_modes": agg_modes,
            "needs_old_log_probs": needs_old_log_probs,
            "additive": additive,
            "description": description,
        }
        for entry in LossEntry.declare(name, fn, source, replace=replace, **declaration):
            manager.losses.add(entry)
            names.append(entry.name)

    return _checked(register_loss, source, "loss")


def grouping_hook_registrar(manager: RegistrationMixin, source: Source, names: list[str]) -> GroupingHookRegistrar:
    """``register`` for ``rllm_register_grouping_hooks``."""
    kind = HOOK_KIND["grouping_hooks"]

    def register_grouping_hook(name: str, hook: Callable[..., Any], *, replace: bool = False) -> None:
        manager.add(kind, name, hook, source, replace=replace)
        names.append(name)

    return _checked(register_grouping_hook, source, kind.what)


def backend_registrar(manager: RegistrationMixin, source: Source, names: list[str]) -> BackendRegistrar:
    """``register`` for ``rllm_register_backends``: the class is checked, never constructed, here (a
    ``"module:Class"`` path is checked when a run first asks for the backend)."""
    kind = HOOK_KIND["backends"]

    def register_backend(name: str, backend_cls: type[Any] | str, *, replace: bool = False) -> None:
        manager.add(kind, name, backend_cls, source, replace=replace)
        names.append(name)

    return _checked(register_backend, source, kind.what)


def kernel_registrar(manager: RegistrationMixin, source: Source, names: list[str]) -> KernelRegistrar:
    """``register`` for ``rllm_register_kernels``: only the names in KERNEL_NAMES are accepted."""
    kind = HOOK_KIND["kernels"]

    def register_kernel(name: str, fn: Callable[..., Any], *, replace: bool = False) -> None:
        manager.add(kind, name, fn, source, replace=replace)
        names.append(name)

    return _checked(register_kernel, source, kind.what)


def batch_field_registrar(manager: RegistrationMixin, source: Source, names: list[str]) -> BatchFieldRegistrar:
    """``register`` for ``rllm_register_batch_fields``."""
    kind = HOOK_KIND["batch_fields"]

    def register_batch_field(name: str, field: BatchField, *, replace: bool = False) -> None:
        manager.add(kind, name, field, source, replace=replace)
        names.append(name)

    return _checked(register_batch_field, source, kind.what)


def config_section_registrar(manager: RegistrationMixin, source: Source, names: list[str]) -> ConfigSectionRegistrar:
    """``register`` for ``rllm_register_config_sections``: the keys (a tuple, or None) are the claim's target."""

    def register_config_section(section: str, keys: Sequence[ConfigKey] | None = None) -> None:
        if keys is not None and not isinstance(keys, Iterable):
            raise PluginContractError(
                f"{source.describe()} registered {CONFIG_SECTIONS.what} {section!r} with keys={keys!r}; "
                "give a list of rllm.config.ConfigKey, or None for an unchecked section."
            )
        manager.add(CONFIG_SECTIONS, section, None if keys is None else tuple(keys), source)
        names.append(section)

    return _checked(register_config_section, source, CONFIG_SECTIONS.what)


def weight_sync_registrar(manager: RegistrationMixin, source: Source, names: list[str]) -> WeightSyncRegistrar:
    """``register`` for ``rllm_register_weight_syncs``: the class is checked, never constructed, here."""
    kind = HOOK_KIND["weight_syncs"]

    def register_weight_sync(name: str, sync_cls: type[Any] | str, *, replace: bool = False) -> None:
        manager.add(kind, name, sync_cls, source, replace=replace)
        names.append(name)

    return _checked(register_weight_sync, source, kind.what)


def tracker_registrar(manager: RegistrationMixin, source: Source, names: list[str]) -> TrackerRegistrar:
    """``register`` for ``rllm_register_trackers``: the class is checked, never constructed, here (a
    ``"module:Class"`` path is checked when a run first names the tracker)."""
    kind = HOOK_KIND["trackers"]

    def register_tracker(name: str, tracker_cls: type[Any] | str, *, replace: bool = False) -> None:
        manager.add(kind, name, tracker_cls, source, replace=replace)
        names.append(name)

    return _checked(register_tracker, source, kind.what)


REGISTRARS: dict[str, Callable[[RegistrationMixin, Source, list[str]], Callable[..., None]]] = {
    "estimators": estimator_registrar,
    "grouping_hooks": grouping_hook_registrar,
    "backends": backend_registrar,
    "kernels": kernel_registrar,
    "batch_fields": batch_field_registrar,
    "losses": loss_registrar,
    "config_sections": config_section_registrar,
    "weight_syncs": weight_sync_registrar,
    "trackers": tracker_registrar,
}
"""The registrar factory of each hook kind, by ``HookKind.attribute``: ``factory(manager, source, names)``."""
