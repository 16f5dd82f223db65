"""The old path of :mod:`rllm.plugins.hook_kinds` (the kinds of registration hook and their checks).

Renamed so as not to read as :mod:`rllm.contract`, the declarations floor; import from ``rllm.plugins.hook_kinds``.
"""

from __future__ import annotations

from rllm.plugins.hook_kinds import *  # noqa: F403  (every name of its __all__)
from rllm.plugins.hook_kinds import __all__ as __all__
