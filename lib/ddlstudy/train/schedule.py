"""The learning-rate schedule a run's optimizer follows (Goyal et al. 2017, "Accurate, Large
Minibatch SGD"): with `lr_scaling="linear"` the rate is `lr x B / lr_base_batch`, B the batch one
update averages (N x b for synchronous strategies, b for ps_async); with `lr_warmup_epochs` > 0 it
rises linearly from `lr` to that target ("gradual warm-up"). Attached to whichever optimizer a
rank owns as a post-step hook, so strategies need no change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ddlstudy.registry import LiveNames
from ddlstudy.strategies.registry import get_strategy, strategy_names

LR_SCALINGS = ("none", "linear")
# Strategies whose ranks hold a torch optimizer the schedule can drive (not Horovod / TF), and
# the synchronous ones among them: live views of the strategy registry.
SCHEDULED_STRATEGIES = LiveNames(lambda: strategy_names(framework=None))
SYNC_STRATEGIES = LiveNames(lambda: strategy_names(framework=None, sync=True))


# ----------------------------------------------------------------------------- learning rate
@dataclass(frozen=True)
class LRSchedule:
    """Learning rate per step: `base` rising linearly to `target` over `warmup_steps` steps."""

    base: float
    target: float
    warmup_steps: int

    def at(self, step: float) -> float:
        """The rate for global step `step` (fractional for ps_async's per-worker updates)."""
        if self.warmup_steps <= 0 or step >= self.warmup_steps:
            return self.target
        return self.base + (self.target - self.base) * step / self.warmup_steps


def update_batch(strategy: str, batch_size: int, workers: int) -> int:
    """Samples one optimizer update averages: b for an asynchronous strategy (each update is one
    worker's gradient: ps_async), else N x b."""
    return batch_size * workers if get_strategy(strategy).sync else batch_size


def schedule_for(config: Any, train_size: int) -> LRSchedule:
    """The schedule of a TrainConfig (`lr`, `lr_scaling`, `lr_base_batch`, `lr_warmup_epochs`)
    on a training set of `train_size` samples."""
    scaling = getattr(config, "lr_scaling", "none")
    batch = update_batch(config.strategy, config.batch_size, config.workers)
    factor = batch / config.lr_base_batch if scaling == "linear" else 1.0
    per_epoch = max(1, train_size // (config.batch_size * config.workers))
    warm = int(round(getattr(config, "lr_warmup_epochs", 0.0) * per_epoch))
    return LRSchedule(config.lr, config.lr * factor, warm)


def check_schedule(config: Any) -> None:
    """ValueError (one line) for a schedule the config cannot run."""
    scaling = getattr(config, "lr_scaling", "none")
    if scaling not in LR_SCALINGS:
        raise ValueError(f"unknown lr_scaling {scaling!r}; valid: {', '.join(LR_SCALINGS)}")
    warm = getattr(config, "lr_warmup_epochs", 0.0)
    if not (isinstance(warm, (int, float)) and 0 <= warm < math.inf):
        raise ValueError(f"lr_warmup_epochs must be a number >= 0, got {warm!r}")
    if not isinstance(config.lr_base_batch, int) or config.lr_base_batch < 1:
        raise ValueError(f"lr_base_batch must be an integer >= 1, got {config.lr_base_batch!r}")
    if (scaling != "none" or warm) and config.strategy not in SCHEDULED_STRATEGIES:
        raise ValueError(f"lr_scaling/lr_warmup_epochs drive the torch optimizers of "
                         f"{', '.join(SCHEDULED_STRATEGIES)}; {config.strategy} has its own: "
                         "set lr_scaling none and lr_warmup_epochs 0")


def attach_schedule(strategy: Any, config: Any, train_size: int) -> LRSchedule | None:
    """Engine side: drive this rank's optimizer (if it has one) by the config's schedule.

    PS workers hold no optimizer (the server updates); ps_async's server takes N updates per
    global step, so its step count is updates / N. `train_size`: samples in the training set.
    """
    opt = getattr(strategy, "opt", None)
    if opt is None:
        return None
    schedule = schedule_for(config, train_size)
    per_step = 1 if get_strategy(config.strategy).sync else config.workers
    updates = [0]

    def set_lr() -> None:
        lr = schedule.at(updates[0] / per_step)
        for group in opt.param_groups:
            group["lr"] = lr

    def after_step(_opt: Any, _args: Any, _kwargs: Any) -> None:
        updates[0] += 1
        set_lr()

    set_lr()
    opt.register_step_post_hook(after_step)
    return schedule


def lr_rule(config: Any) -> str:
    """How a run set its rate, for tables and claims: 'lr 0.01' or the scaling rule."""
    if config.lr_scaling == "none" and not config.lr_warmup_epochs:
        return f"lr {config.lr:g}"
    warm = (f", {config.lr_warmup_epochs:g}-epoch warm-up from {config.lr:g}"
            if config.lr_warmup_epochs else "")
    scale = (f"linear scaling: lr {config.lr:g} x B/{config.lr_base_batch}"
             if config.lr_scaling == "linear" else f"lr {config.lr:g}")
    return scale + warm
