"""`single`: one process, plain SGD; the baseline every other strategy must reproduce."""

from __future__ import annotations

import time
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
        self._sync()
        t0 = time.perf_counter()
        loss = self._forward_backward(self.model, x, y)
        self._sync()
        t1 = time.perf_counter()
        self.opt.step()
        self._sync()
        t2 = time.perf_counter()
        return StepStats(loss=loss, compute_s=t1 - t0, update_s=t2 - t1, step_s=t2 - t0,
                         images=len(x))
