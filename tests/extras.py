"""Skipping the tests of an optional extra (ray, torch, transformers) where it is not installed.

pytest puts ``tests/`` on ``sys.path``, so the folders ``tests/ray`` and ``tests/transformers``
look like namespace packages named ``ray`` and ``transformers``: ``find_spec`` and
``pytest.importorskip`` find them even where the real package is absent. A real package has an
origin; a namespace folder has none.
"""

from __future__ import annotations

import importlib.util

import pytest


def missing(*modules: str) -> list[str]:
    """The modules of ``modules`` that are not installed (a test folder of the same name does not count)."""
    absent = []
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            absent.append(name)
    return absent


def skip_module_without(*modules: str, install: str) -> None:
    """Skip the calling test module, naming what is missing and how to install it, unless ``modules`` are all there."""
    absent = missing(*modules)
    if absent:
        pytest.skip(f"{', '.join(absent)} not installed: {install}", allow_module_level=True)
