"""The hooks of advantage estimation: estimators, trajectory grouping, kernels and batch fields.

Part of the plugin author's reference, :mod:`rllm.plugins.hookspecs` (which says how a plugin is published and
what every hook shares).
"""

from __future__ import annotations

from rllm.plugins.markers import hookspec
from rllm.plugins.protocols import (
    BatchFieldRegistrar,
    EstimatorRegistrar,
    GroupingHookRegistrar,
    KernelRegistrar,
)

__all__ = [
    "rllm_register_batch_fields",
    "rllm_register_estimators",
    "rllm_register_grouping_hooks",
    "rllm_register_kernels",
]


@hookspec
def rllm_register_estimators(register: EstimatorRegistrar) -> None:
    """Register advantage estimators under names users put in their config.

    :param register: ``register(name, fn, *, style="grouped", requires=(), options=None,
        numerics=False, replace=False)``.

        ``name`` (str)
            What users write as ``rllm.algorithm.adv_estimator`` or pass to
            ``rllm.compute_advantages``.
        ``fn`` (callable)
            The estimator. With ``style="grouped"`` (the documented list-of-arrays convention) it is called
            as ``fn(rewards=list_of_group_arrays, **options)`` and returns one advantage
            array per group, or the pair ``(advantages, returns)``. With ``style="batch"`` it
            is called as ``fn(batch, **options)`` with an :class:`rllm.AdvantageBatch` and
            returns one advantage per trajectory, in the batch's order, as a 1-D array
            (or an :class:`rllm.Ragged` with one row of per-step advantages per trajectory).
            Its inputs are read-only: copy before writing. Build it from :mod:`rllm.toolkit`.
        ``style`` ("grouped" | "batch")
            The calling convention of ``fn``.
        ``requires`` (sequence of str)
            Batch fields beyond rewards that ``fn`` needs (``"response_lengths"``,
            ``"baseline_rewards"``, ``"reward_components"``, ``"step_rewards"``,
            ``"step_values"``, ...); a call without them fails naming the field.
        ``options`` (sequence of :class:`rllm.toolkit.Option`, or None)
            The keyword options ``fn`` takes: name, accepted types, default and a one-line
            doc. Every door checks callers' options against them (an unknown or ill-typed
            option is a named error with a close-match suggestion) and passes each declared
            option, with its default when the caller gives none. Run-level settings
            (``norm_adv_by_std_in_grpo``, ``gamma``, ``lam``, ``epsilon``, ``preset``) reach
            ``fn`` only if declared. ``None`` (the default) derives the options from ``fn``'s
            signature, as for code written before declarations; ``rllm estimators`` lists
            them either way.
        ``numerics`` (bool or str)
            ``True`` gives ``fn`` the numerics options of the built-ins (``preset``, ``std``,
            ``eps``, ``single``, ``zero_variance``, ``dtype``, ``whiten``, ...), resolved
            into one :class:`rllm.toolkit.Numerics` passed as ``numerics=``. A preset name
            (``"verl"``) does the same with that preset as the default, for an estimator
            that reproduces one framework.
        ``replace`` (bool)
            Required to take over a name the built-in plugin already provides; without
            it your registration is ignored with a warning.

        Refused, naming your plugin: an empty or non-string name, a non-callable ``fn``, an
        unknown ``style``, an unknown field in ``requires``, an unknown keyword.

    Example::

        from rllm.toolkit import Option, normalise_groups, rewards_as

        def scaled(batch, *, by_std, numerics):
            return normalise_groups(batch, rewards_as(batch, numerics), numerics, "scaled", by_std)

        @rllm.hookimpl
        def rllm_register_estimators(register):
            register("centred", centred)
            register("scaled", scaled, style="batch", numerics=True,
                     options=[Option("by_std", (bool,), True, "divide by the group std")])
            register("length_weighted", length_weighted, style="batch",
                     requires=["response_lengths"], options=[])
    """


@hookspec
def rllm_register_grouping_hooks(register: GroupingHookRegistrar) -> None:
    """Register trajectory grouping hooks that turn episodes into trajectory groups.

    :param register: ``register(name, hook, *, replace=False)``.

        ``name`` (str)
            What users write as ``rllm.grouping_hook`` (or pass to the trainer as
            ``traj_grouping_hook``).
        ``hook`` (callable)
            Called as ``hook(episodes, **options)`` with a list of :class:`rllm.Episode` and
            the run's ``rllm.grouping_hook_options`` (an option the hook's signature does not
            take is refused before the run starts); returns a list of
            :class:`rllm.TrajectoryGroup` (all rollouts an estimator compares with each
            other). A non-callable ``hook`` is refused.
        ``replace`` (bool)
            Required to take over a built-in name (``task_and_role``); without it your
            registration is ignored with a warning.

    Example::

        def by_task_only(episodes, **options):
            ...  # one group per task, all roles together
            return groups

        @rllm.hookimpl
        def rllm_register_grouping_hooks(register):
            register("by_task_only", by_task_only)
    """


@hookspec
def rllm_register_kernels(register: KernelRegistrar) -> None:
    """Register faster implementations of the toolkit's named primitives.

    :param register: ``register(name, fn, *, replace=False)``.

        ``name`` (str)
            One of :data:`~rllm.contract.names.KERNEL_NAMES` (``"group_centre"``, ``"sorted_runs"``,
            ``"run_starts"``); any other name is refused, since nothing would call it.
        ``fn`` (callable)
            The implementation of the numpy path it stands in for: the arguments it takes
            and the values it returns, per name, are in :mod:`rllm.estimators.acceleration`
            (``rllm.toolkit.PRIMITIVES`` is the same tuple as :data:`~rllm.contract.names.KERNEL_NAMES`; the
            toolkit's ``CENTRE``, ``DIVIDE_BY_STD`` and ``RLOO_FACTOR`` are
            ``group_centre``'s modes). A non-callable ``fn`` is refused.
        ``replace`` (bool)
            Required to take over a kernel the built-in plugin provides; without it your
            registration is ignored with a warning.

    Example::

        @rllm.hookimpl
        def rllm_register_kernels(register):
            from my_package import fast

            register("group_centre", fast.group_centre)
    """


@hookspec
def rllm_register_batch_fields(register: BatchFieldRegistrar) -> None:
    """Declare new batch fields: per-trajectory inputs your estimators can ``require``.

    :param register: ``register(name, field, *, replace=False)``.

        ``name`` (str)
            The field's name, a Python identifier that is not a built-in field; estimators
            list it in ``requires`` and read it as ``batch.require(name, ...)``.
        ``field`` (:class:`rllm.toolkit.BatchField`)
            How the field is filled: ``read(trajectory)`` returns a number (or, with
            ``per_step=True``, one number per step), used by the collection step;
            ``rllm.compute_advantages`` takes it as a keyword array; ``rllm advantages``
            reads the per-line key ``jsonl_key`` (default: ``name``). ``doc`` says what it
            holds (``rllm advantages --help`` lists it).
        ``replace`` (bool)
            Required to take over a field another plugin declares.

    Example::

        from rllm.toolkit import BatchField

        @rllm.hookimpl
        def rllm_register_batch_fields(register):
            register("difficulty", BatchField(read=lambda t: t.info["difficulty"],
                                              doc="number: the task's difficulty in [0, 1]"))
    """
