"""The hooks a plugin implements. This module is the plugin author's reference.

A plugin is any module or object with functions marked ``@rllm.hookimpl`` whose names are
the hooks below. Publish it under the ``rllm.estimators`` entry-point group::

    # pyproject.toml of your distribution
    [project.entry-points."rllm.estimators"]
    my_plugin = "my_package.plugin"

    # my_package/plugin.py
    import numpy as np
    import rllm

    def centred(rewards: list[np.ndarray], **kwargs) -> tuple[list[np.ndarray], list[np.ndarray]]:
        advantages = [group - group.mean() for group in rewards]
        return advantages, advantages

    @rllm.hookimpl
    def rllm_register_estimators(register):
        register("centred", centred)

Each hook receives a ``register`` callable bound to your plugin, so every entry is
attributed to it in ``rllm plugins`` and in error messages. Its type is the hook's own
Protocol (:class:`EstimatorRegistrar`, :class:`GroupingHookRegistrar`,
:class:`BackendRegistrar`, :class:`KernelRegistrar`, :class:`BatchFieldRegistrar`,
:class:`LossRegistrar`, :class:`ConfigSectionRegistrar`, :class:`WeightSyncRegistrar`,
:class:`TrackerRegistrar`, all in ``rllm.plugins``), for
annotating your hooks; the ``register`` rllm passes has exactly that signature. An
implementation may accept fewer arguments than the spec lists (pluggy passes only those
it names), so hooks can grow new arguments without breaking plugins.

rllm calls each plugin's hooks once, when a registry is first used (``import rllm`` only
discovers the entry points). The hookimpl options ``wrapper``, ``hookwrapper``,
``tryfirst`` and ``trylast`` have no meaning for registration hooks and are refused, as is a
hook name rllm does not define. What ``register`` receives is checked (see each hook), and
so is the call itself (an unknown keyword or a missing argument); a refusal names your
plugin and fails the whole plugin, so nothing half-registered stays.
"""

from __future__ import annotations

import pluggy

from rllm.contract.fields import OPTIONAL_FIELDS
from rllm.contract.names import (
    BACKEND_ABSTRACT_METHODS,
    BACKEND_METHODS,
    KERNEL_NAMES,
    LOSS_AGG_MODES,
    REFUSED_HOOKIMPL_OPTIONS,
    EstimatorStyle,
)
from rllm.plugins.protocols import (
    BackendRegistrar,
    BatchFieldRegistrar,
    ConfigSectionRegistrar,
    EstimatorRegistrar,
    GroupingHookRegistrar,
    KernelRegistrar,
    LossRegistrar,
    NamedRegistrar,
    TrackerRegistrar,
    WeightSyncRegistrar,
)

__all__ = [  # the words are rllm.contract's, the Protocols rllm.plugins.protocols', importable here as before
    "BACKEND_ABSTRACT_METHODS",
    "BACKEND_METHODS",
    "KERNEL_NAMES",
    "LOSS_AGG_MODES",
    "OPTIONAL_FIELDS",
    "PROJECT_NAME",
    "REFUSED_HOOKIMPL_OPTIONS",
    "BackendRegistrar",
    "BatchFieldRegistrar",
    "ConfigSectionRegistrar",
    "EstimatorRegistrar",
    "EstimatorStyle",
    "GroupingHookRegistrar",
    "KernelRegistrar",
    "LossRegistrar",
    "NamedRegistrar",
    "TrackerRegistrar",
    "WeightSyncRegistrar",
    "hookimpl",
    "hookspec",
    "rllm_register_backends",
    "rllm_register_batch_fields",
    "rllm_register_config_sections",
    "rllm_register_estimators",
    "rllm_register_grouping_hooks",
    "rllm_register_kernels",
    "rllm_register_losses",
    "rllm_register_trackers",
    "rllm_register_weight_syncs",
]

PROJECT_NAME = "rllm"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


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
def rllm_register_losses(register: LossRegistrar) -> None:
    """Register policy losses under names users put in ``rllm.algorithm.loss_fn``.

    Losses are written in torch, and ``import rllm`` never imports torch, so register the
    loss lazily as an import path: the module is imported the first time the loss is used.

    :param register: ``register(name, fn, *, options=(), aliases=(), agg_modes=None,
        needs_old_log_probs=True, additive=True, description="", replace=False)``.

        ``name`` (str)
            What users write as ``rllm.algorithm.loss_fn`` (or in ``loss_fn_map``), pass to
            :func:`rllm.losses.compute_policy_loss`, or, inside verl, as
            ``actor_rollout_ref.actor.policy_loss.loss_mode=rllm.<name>``.
        ``fn`` (callable, or ``"module:function"``)
            The loss, called as ``fn(ctx)`` with a :class:`rllm.losses.LossContext`:
            ``ctx.log_probs`` (current per-token log-probs, shape ``(batch, tokens)``, the
            tensor gradients flow to), ``ctx.old_log_probs``, ``ctx.advantages``,
            ``ctx.response_mask`` (1 for tokens that count), ``ctx.rollout_log_probs`` and
            ``ctx.ref_log_probs`` (None when the run has none), ``ctx.rollout_is_weights``
            (rollout-correction weights, or None), ``ctx.options`` (every declared option,
            with its default when the run gives none) and ``ctx.agg_mode``. It returns
            ``(loss, metrics)``: a scalar tensor with a gradient, and a dict of numbers (verl's
            names where they exist: ``pg_clipfrac``, ``ppo_kl``, ``pg_clipfrac_lower``);
            anything else is refused naming the loss and plugin. Aggregate with
            ``ctx.aggregate(per_token)``, which applies the run's ``loss_agg_mode`` with
            verl's global-batch normalisation (or ``ctx.sequence_mean(per_sequence)``), never
            with ``.mean()``, so that a batch's micro-batches add up to its loss. Padding
            reaches the loss as 0 in every tensor.
        ``options`` (sequence of :class:`rllm.toolkit.Option`)
            The options the loss reads (clip ratios, temperatures, ...): name, type, default,
            doc. A run giving an option no declaration names is refused before anything
            runs, with close matches.
        ``aliases`` (sequence of str)
            Other names for the same loss (peers' names: ``ppo``, ``dual_clip``); each is a
            claim of its own, so two plugins claiming one alias conflict.
        ``agg_modes`` (sequence of str, or None)
            The ``loss_agg_mode`` values the loss supports (None: all of
            :data:`~rllm.contract.names.LOSS_AGG_MODES`); a run asking for another is refused.
        ``needs_old_log_probs`` (bool)
            False for losses that never read ``ctx.old_log_probs`` (``cross_entropy``,
            ``gpg``), so a backend may skip that pass.
        ``additive`` (bool)
            False for a loss that picks tokens by statistics of the micro-batch it sees
            (``clip_cov``, ``kl_cov``, as in verl): its micro-batches do not add up to the
            batch's loss, so :mod:`rllm.testing` does not check that.
        ``description`` (str)
            One line for ``rllm losses`` (default: the first line of ``fn``'s docstring once
            it is imported).
        ``replace`` (bool)
            Required to take over a name the built-in plugin provides.

        Refused, naming your plugin: an empty or non-string name or alias, an ``fn`` that is
        neither callable nor a ``"module:function"`` string, an unknown aggregation mode, an
        unknown keyword.

    Example::

        from rllm.toolkit import Option

        @rllm.hookimpl
        def rllm_register_losses(register):
            register("clipped_pg", "my_package.losses:clipped_pg",
                     options=[Option("clip", (float,), 0.2, "clip range of the ratio", minimum=0.0)],
                     description="PPO clip with one symmetric range")

        # my_package/losses.py (imports torch; loaded only when the loss is used)
        import torch

        def clipped_pg(ctx):
            ratio = torch.exp(ctx.log_probs - ctx.old_log_probs)
            clip = ctx.options["clip"]
            per_token = -torch.minimum(ratio * ctx.advantages,
                                       ratio.clamp(1 - clip, 1 + clip) * ctx.advantages)
            return ctx.aggregate(per_token), {}
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


@hookspec
def rllm_register_backends(register: BackendRegistrar) -> None:
    """Register training backends that the trainer can run against.

    :param register: ``register(name, backend_cls, *, replace=False)``.

        ``name`` (str)
            What users write as ``rllm.backend``.
        ``backend_cls`` (type or str)
            A class implementing :class:`rllm.trainer.backend_protocol.BackendProtocol` (subclass it,
            or the embedded backend), constructed as ``backend_cls(config=config,
            algorithm=algorithm, **backend_args)`` (``algorithm``: the run's ``AlgorithmConfig``).
            Refused unless it is a class with every method in :data:`~rllm.contract.names.BACKEND_METHODS` (``async
            def``
            where marked), overrides those in :data:`~rllm.contract.names.BACKEND_ABSTRACT_METHODS`, and accepts
            ``config``
            and ``algorithm``. Or its path,
            ``"package.module:Class"``, imported (and the class checked) only when a run selects
            the backend: registering then imports nothing heavy (the transformers plugin does so).
            A path that cannot be imported is a one-line error naming the plugin.
        ``replace`` (bool)
            Required to take over a built-in name (``embedded``); without it your
            registration is ignored with a warning.

    Example::

        @rllm.hookimpl
        def rllm_register_backends(register):
            register("my_cluster", MyClusterBackend)
            register("my_gpu", "my_plugin.gpu_backend:GpuBackend")  # imported when selected
    """


@hookspec
def rllm_register_config_sections(register: ConfigSectionRegistrar) -> None:
    """Declare the config sections your plugin reads, so users can set them and see them.

    Keys declared here are checked (type, range, choices) before anything runs, get their
    defaults in every config, and are listed by ``rllm config --keys``.

    :param register: ``register(section, keys=None)``.

        ``section`` (str)
            Dotted path of the section, e.g. ``"rllm.my_backend"``; it must not be one of
            rllm's own keys or sections.
        ``keys`` (sequence of :class:`rllm.config.ConfigKey`, or None)
            One ``ConfigKey(name, type, default, doc, ...)`` per key, with ``name``
            relative to the section; ``type`` is ``"int"``, ``"float"``, ``"bool"``,
            ``"str"``, ``"list[str]"`` or ``"mapping"``, and ``choices``, ``minimum``,
            ``maximum`` and ``nullable`` bound the value. ``None`` accepts any key under the
            section without checking it (validate it in your backend's ``validate_config``).

    Example::

        from rllm.config import ConfigKey

        @rllm.hookimpl
        def rllm_register_config_sections(register):
            register("rllm.my_backend", [
                ConfigKey("endpoint", "str", "localhost:9000", "Address of the trainer service."),
                ConfigKey("retries", "int", 2, "Attempts per request.", minimum=0),
            ])
    """


@hookspec
def rllm_register_weight_syncs(register: WeightSyncRegistrar) -> None:
    """Register weight syncs: how a run's new policy weights reach the inference servers it samples from.

    A run whose rollouts come from servers (``rllm.rollout.openai.base_url``) names one as
    ``rllm.rollout.openai.weight_sync``; the backend's ``on_policy_updated`` hands it each
    update. Built in: ``disk`` (save the weights, then SGLang's ``/update_weights_from_disk``,
    which ``rllm serve`` serves) and ``tensor`` (the weights in the request body, ``rllm serve``'s
    ``/update_weights_from_tensor``); see docs/serve.md.

    :param register: ``register(name, sync_cls, *, replace=False)``.

        ``name`` (str)
            What users write as ``rllm.rollout.openai.weight_sync``.
        ``sync_cls`` (type or str)
            A subclass of :class:`rllm.engine.weight_sync.WeightSync`, constructed once per run
            as ``sync_cls(config=config, servers=base_urls)``; its ``push(update)`` gets a
            :class:`rllm.engine.weight_sync.PolicyUpdate` (the version, and ways to write or read
            the weights) and raises :class:`rllm.errors.WeightSyncError` when a server refuses it,
            which stops the run before it trains on stale weights. Or its ``"module:Class"``
            path, imported when a run selects it. Refused: anything else, or a class without
            ``push``.
        ``replace`` (bool)
            Required to take over a built-in name; without it your registration is ignored
            with a warning.

    Example::

        @rllm.hookimpl
        def rllm_register_weight_syncs(register):
            register("my_vllm", "my_plugin.sync:VllmCollectiveSync")  # imported when selected
    """


@hookspec
def rllm_register_trackers(register: TrackerRegistrar) -> None:
    """Register experiment trackers: where a run's metrics, config and learning curve go.

    Users list trackers by name in ``rllm.trainer.logger`` (``[console, jsonl, my_tracker]``); each
    receives every record the trainer logs, on rank 0 only in a data-parallel run.

    :param register: ``register(name, tracker_cls, *, replace=False)``.

        ``name`` (str)
            What users write in ``rllm.trainer.logger``.
        ``tracker_cls`` (type or str)
            A subclass of :class:`rllm.trainer.trackers.Tracker` (it must define ``log_metrics``), constructed
            as ``tracker_cls(run)`` with a :class:`rllm.trainer.trackers.TrackerRun` (the run directory, project
            and experiment names, the resolved config) before anything is written: the constructor
            only reads settings. Then ``start(total_steps)`` opens what it writes, ``log_config(config)``
            receives the resolved config (hyper-parameters), ``log_metrics(metrics, step, kind)`` every
            record (finite numbers by key; ``kind`` is ``"train"`` or ``"val"``),
            ``log_image(name, path, step)`` the learning curve and ``close()`` ends it.
            ``outputs()`` lists the files or folders it writes; those inside the run directory are
            rllm's, deleted when a run starts over. The class attributes ``needs`` (modules it
            imports) and ``install`` (what to ``pip install``) turn a missing package into one line
            before the run starts. Or its path, ``"package.module:Class"``, imported only when a run
            names the tracker. A tracker that raises during the run is switched off with one
            warning naming it; the run and the other trackers go on.
        ``replace`` (bool)
            Required to take over a built-in name (``console``, ``jsonl``); without it your
            registration is ignored with a warning.

        Refused, naming your plugin: an empty or non-string name, an object that is neither a
        class with ``log_metrics`` nor a ``"module:Class"`` path, an unknown keyword.

    Example::

        from rllm.trainer import Tracker

        class PrintTracker(Tracker):
            def log_metrics(self, metrics, step, kind):
                print(kind, step, metrics.get("reward/solver/mean"))

        @rllm.hookimpl
        def rllm_register_trackers(register):
            register("print", PrintTracker)
            register("my_service", "my_plugin.service:ServiceTracker")  # imported when named
    """
