"""How gradients meet: one interface, one registry, one file per strategy family.

- `base`: the `Strategy` interface, `StepStats`, the rank `Layout`, compute replay;
- `registry`: `STRATEGIES` (name -> `StrategySpec`: class and properties), `register_strategy`,
  `make_strategy`, `servers_for` - torch-free;
- families: `single`, `ps` (ps_sync, ps_async, ps_sharded), `allreduce` (hand-written bucketed
  all-reduce over `ddlstudy.collectives`), `ddp` (torch DistributedDataParallel); Horovod and
  TensorFlow register from `ddlstudy.frameworks`.

Importing this package loads only the registry (no torch); every other name is imported from
its file on first use. Adding a strategy: docs/extending.md.
"""

from __future__ import annotations

import importlib

from ddlstudy.strategies.registry import (
    STRATEGIES,
    StrategySpec,
    driver_for,
    get_strategy,
    make_strategy,
    register_strategy,
    servers_for,
    strategy_names,
    unregister_strategy,
)

_LAZY = {
    "base": ("BACKWARD_SHARE", "DEFAULT_TIMEOUT_S", "Layout", "LossFn", "StepStats", "Strategy",
             "flat_params", "replay_gradients"),
    "single": ("Single",),
    "ps": ("GRAD", "HEADER_BYTES", "STOP", "ParameterServer", "PSAsync", "PSSharded", "PSSync",
           "shard_bounds"),
    "allreduce": ("AllReduce", "make_buckets"),
    "ddp": ("DDP",),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}

__all__ = ["STRATEGIES", "StrategySpec", "driver_for", "get_strategy", "make_strategy",
           "register_strategy", "servers_for", "strategy_names", "unregister_strategy", *_WHERE]


def __getattr__(name: str) -> object:
    """Load a name from its file on first use; old list names are views of the registry."""
    if name in _WHERE:
        return getattr(importlib.import_module(f"ddlstudy.strategies.{_WHERE[name]}"), name)
    if name == "PS_STRATEGIES":
        return tuple(strategy_names(family="ps"))
    if name == "DEFAULT_SERVERS":
        return {s.name: s.default_servers for s in STRATEGIES.values() if s.needs_servers}
    raise AttributeError(f"module 'ddlstudy.strategies' has no attribute {name!r}")
