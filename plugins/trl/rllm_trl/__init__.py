"""The bridge between rllm and TRL (``pip install 'rllm[trl]'``).

* TRL's loss types in rllm: the ``rllm.estimators`` entry point (:mod:`rllm_trl.plugin`) registers
  each ``GRPOConfig.loss_type`` of TRL 1.16 as the rllm loss ``trl.<loss_type>``
  (:mod:`rllm_trl.losses`, torch only).
* rllm inside TRL: :class:`rllm_trl.trainer.GRPOTrainer`, TRL's ``GRPOTrainer`` whose advantages
  come from an rllm estimator and whose loss from an rllm loss, by name (docs/trl.md).

Importing this package imports neither torch nor TRL; :mod:`rllm_trl.trainer` checks the
installed TRL version first.
"""
