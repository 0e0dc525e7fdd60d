"""`single`: one process, plain SGD; the baseline every other strategy must reproduce."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ddlstudy.strategies.base import StepStats, Strategy


class Single(Strategy):
    """One process, plain SGD: the reference result for every other strategy."""

    name = "single"

    def __init__(self, model: nn.Module, **kw: Any) -> None:
        super().__init__(model, **kw)
        self.opt = self._optimizer(self.params)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        loss, compute_s, update_s = self._train_step(self.model, x, y)
        return StepStats(loss=loss, compute_s=compute_s, update_s=update_s,
                         step_s=compute_s + update_s, images=len(x))
