"""The ``register`` argument of each hook, as a Protocol: what a plugin annotates its hooks with.

:mod:`rllm.plugins.hookspecs` says what each argument means; these say its signature, which the
``register`` rllm passes has exactly (:mod:`rllm.plugins.registrars`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rllm.contract.fields import BatchField
    from rllm.contract.keys import ConfigKey, Option
    from rllm.contract.names import EstimatorStyle


class EstimatorRegistrar(Protocol):
    """The ``register`` argument of :func:`rllm_register_estimators`: claims ``name`` for the estimator ``fn``.

    The keywords declare how ``fn`` is called and what it needs; the hook's docstring says what each means.
    """

    def __call__(
        self,
        name: str,
        fn: Callable[..., Any],
        *,
        style: EstimatorStyle = "grouped",
        requires: Sequence[str] = (),
        options: Sequence[Option] | None = None,
        numerics: bool | str = False,
        replace: bool = False,
    ) -> None: ...


class NamedRegistrar(Protocol):
    """The shape the grouping-hook, backend, kernel and batch-field registrars share: a name and one object.

    Kept for plugins written against it; each of those hooks now annotates ``register`` with
    its own Protocol (:class:`GroupingHookRegistrar`, :class:`BackendRegistrar`,
    :class:`KernelRegistrar`, :class:`BatchFieldRegistrar`), which names the object.
    """

    def __call__(self, name: str, target: Any, *, replace: bool = False) -> None: ...


class LossRegistrar(Protocol):
    """The ``register`` argument of :func:`rllm_register_losses`: claims ``name`` (and each alias) for the loss ``fn``.

    ``fn`` may be a ``"module:function"`` path, imported when the loss is first used.
    """

    def __call__(
        self,
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
    ) -> None: ...


class GroupingHookRegistrar(Protocol):
    """The ``register`` argument of :func:`rllm_register_grouping_hooks`: claims ``name`` for the grouping ``hook``.

    ``hook(episodes, **options)`` returns the trajectory groups an estimator compares.
    """

    def __call__(self, name: str, hook: Callable[..., Any], *, replace: bool = False) -> None: ...


class KernelRegistrar(Protocol):
    """The ``register`` argument of :func:`rllm_register_kernels`: ``fn`` stands in for the primitive ``name``.

    ``name`` is one of :data:`~rllm.contract.names.KERNEL_NAMES`; ``fn`` takes and returns what that numpy primitive
    does.
    """

    def __call__(self, name: str, fn: Callable[..., Any], *, replace: bool = False) -> None: ...


class BatchFieldRegistrar(Protocol):
    """The ``register`` argument of :func:`rllm_register_batch_fields`: declares the batch field ``name``.

    ``field`` (an :class:`rllm.toolkit.BatchField`) says how each trajectory's value is read.
    """

    def __call__(self, name: str, field: BatchField, *, replace: bool = False) -> None: ...


class BackendRegistrar(Protocol):
    """The ``register`` argument of :func:`rllm_register_backends`: claims ``name`` for the backend class.

    rllm constructs ``backend_cls(config=config, algorithm=algorithm, **backend_args)``, so register the class (or the
    ``"module:Class"`` path to import it from when a run selects it), not an instance.
    """

    def __call__(self, name: str, backend_cls: type[Any] | str, *, replace: bool = False) -> None: ...


class ConfigSectionRegistrar(Protocol):
    """The ``register`` argument of :func:`rllm_register_config_sections`: declares the section ``section``.

    ``keys`` are its checked keys; None leaves the section open (any key, unchecked).
    """

    def __call__(self, section: str, keys: Sequence[ConfigKey] | None = None) -> None: ...


class WeightSyncRegistrar(Protocol):
    """The ``register`` argument of :func:`rllm_register_weight_syncs`: claims ``name`` for the weight-sync class.

    rllm constructs ``sync_cls(config=config, servers=base_urls)`` once per run and calls its ``push(update)``
    after every policy update; register the class, or its ``"module:Class"`` path.
    """

    def __call__(self, name: str, sync_cls: type[Any] | str, *, replace: bool = False) -> None: ...


class TrackerRegistrar(Protocol):
    """The ``register`` argument of :func:`rllm_register_trackers`: claims ``name`` for the tracker class.

    rllm constructs ``tracker_cls(run)`` with a :class:`rllm.trainer.trackers.TrackerRun`, so register the class (or the
    ``"module:Class"`` path to import it from when a run names the tracker), not an instance.
    """

    def __call__(self, name: str, tracker_cls: type[Any] | str, *, replace: bool = False) -> None: ...
