"""The hooks of training: policy losses, backends, weight syncs and experiment trackers.

Part of the plugin author's reference, :mod:`rllm.plugins.hookspecs` (which says how a plugin is published and
what every hook shares).
"""

from __future__ import annotations

from rllm.plugins.markers import hookspec
from rllm.plugins.protocols import (
    BackendRegistrar,
    LossRegistrar,
    TrackerRegistrar,
    WeightSyncRegistrar,
)

__all__ = ["rllm_register_backends", "rllm_register_losses", "rllm_register_trackers", "rllm_register_weight_syncs"]


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
