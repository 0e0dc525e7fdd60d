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

from ddlstudy.registry import lazy_getattr
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
__all__ = ["STRATEGIES", "StrategySpec", "driver_for", "get_strategy", "make_strategy",
           "register_strategy", "servers_for", "strategy_names", "unregister_strategy",
           *(name for names in _LAZY.values() for name in names)]


def _default_servers() -> dict[str, int]:
    return {s.name: s.default_servers for s in STRATEGIES.values() if s.needs_servers}


# A name loads from its file on first use; the old list names are live views of the registry.
__getattr__ = lazy_getattr("ddlstudy.strategies", _LAZY, {
    "PS_STRATEGIES": lambda: tuple(strategy_names(family="ps")),
    "DEFAULT_SERVERS": _default_servers})
