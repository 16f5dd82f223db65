"""``set_training``: every module's flag as ``model.train(mode)`` sets it, by ``train`` where a module overrides it."""

from __future__ import annotations

from typing import ClassVar

from extras import skip_module_without

skip_module_without("torch", "transformers", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import OmegaConf

from rllm_transformers.model import set_training, tiny_model


def _flags(model: torch.nn.Module) -> dict[str, bool]:
    return {name: module.training for name, module in model.named_modules()}


def test_each_module_ends_in_the_mode_asked_for_from_either_mode() -> None:
    model = tiny_model(OmegaConf.create({"hidden_size": 16, "num_layers": 2}), 15, 14, 13)
    modules = len(list(model.modules()))
    for mode in (False, True, False):
        set_training(model, mode)
        assert _flags(model) == {name: mode for name, _ in model.named_modules()}
        assert len(_flags(model)) == modules > 10
    model.model.layers[1].train(True)  # one module out of step: the others are set too
    set_training(model, False)
    assert not any(_flags(model).values())


class _Counted(torch.nn.Linear):
    """A module whose ``train`` does more than set its flag (as a kernelizing model's does)."""

    calls: ClassVar[list[bool]] = []

    def train(self, mode: bool = True) -> _Counted:
        self.calls.append(mode)
        return super().train(mode)


def test_a_module_that_overrides_train_is_switched_by_its_train() -> None:
    model = tiny_model(OmegaConf.create({"hidden_size": 16, "num_layers": 1}), 15, 14, 13)
    model.extra = _Counted(2, 2)
    _Counted.calls.clear()
    set_training(model, False)
    set_training(model, False)  # already in the mode: nothing runs
    set_training(model, True)
    assert _Counted.calls == [False, True]
    assert all(_flags(model).values())
