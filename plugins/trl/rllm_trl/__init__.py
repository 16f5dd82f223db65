"""The bridge between rllm and TRL (``pip install 'rllm[trl]'``).

* TRL's loss types in rllm: the ``rllm.estimators`` entry point (:mod:`rllm_trl.plugin`) registers
  each ``GRPOConfig.loss_type`` of TRL 1.16 as the rllm loss ``trl.<loss_type>``
  (:mod:`rllm_trl.losses`, torch only).
* rllm inside TRL: :class:`rllm_trl.trainer.RLLMGRPOTrainer`, TRL's ``GRPOTrainer`` whose advantages
  come from an rllm estimator and whose loss from an rllm loss, by name (docs/trl.md).

Importing this package imports neither torch nor TRL; ``RLLMGRPOTrainer`` loads on first use, after
:func:`rllm_trl.version.check_trl_version` has checked the installed TRL.
"""

from __future__ import annotations

from typing import Any

from rllm_trl.version import TESTED, check_trl_version

__all__ = ["TESTED", "RLLMGRPOTrainer", "check_trl_version"]


def __getattr__(name: str) -> Any:
    if name == "RLLMGRPOTrainer":
        from rllm_trl.trainer import RLLMGRPOTrainer

        return RLLMGRPOTrainer
    raise AttributeError(f"module 'rllm_trl' has no attribute {name!r}")
