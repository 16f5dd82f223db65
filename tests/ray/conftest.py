"""The Ray tests run against a real local Ray instance (Ray 2.60 has no local mode); without ray they skip."""

from __future__ import annotations

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'rllm[ray]'); the Ray executor tests need it")
