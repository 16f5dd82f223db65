"""The bridge between rllm and verl, in both directions.

* rllm inside verl: the ``verl.plugins`` entry point (:mod:`rllm_verl.verl_plugin`) registers
  every rllm estimator in verl's advantage-estimator registry as ``rllm.<name>``, so a verl run
  selects one with ``algorithm.adv_estimator=rllm.maxrl`` (:mod:`rllm_verl.inside_verl`); it
  also registers every rllm policy loss in verl's policy-loss registry as ``rllm.<name>``
  (``policy_loss.loss_mode=rllm.gspo``, :mod:`rllm_verl.losses_in_verl`).
* verl inside rllm: the ``rllm.estimators`` entry point (:mod:`rllm_verl.inside_rllm`) makes
  verl's estimators available to rllm as ``verl.<name>`` when verl is installed.
* rllm's batches on verl's training worker: :mod:`rllm_verl.worker` drives verl's
  ``TrainingWorker`` (FSDP2) on rllm's rows (:mod:`rllm_verl.rows`), on a CPU too with the
  opt-in platform of :mod:`rllm_verl.cpu_platform` (``VERL_PLATFORM=cpu``).

Neither direction imports torch or verl until a bridged estimator runs: ``import rllm`` stays light.
"""

from rllm_verl.inside_verl import ESTIMATOR_STATES, OPTIONS_KEY, register_in_verl
from rllm_verl.losses_in_verl import register_losses_in_verl

__all__ = ["ESTIMATOR_STATES", "OPTIONS_KEY", "register_in_verl", "register_losses_in_verl"]
