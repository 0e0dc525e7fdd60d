"""How gradients meet: one interface, one registry, one file per strategy family.

- `base`: the `Strategy` interface, `StepStats`, the rank `Layout`, compute replay;
- `registry`: `STRATEGIES` (name -> `StrategySpec`), `register_strategy`, `make_strategy`,
  `servers_for`;
- families, each registering its own: `single`, `ps` (ps_sync, ps_async, ps_sharded),
  `allreduce` (hand-written bucketed all-reduce over `ddlstudy.collectives`), `ddp` (torch
  DistributedDataParallel); Horovod and TensorFlow register from `ddlstudy.frameworks`
  (imported lazily: their own imports happen only when a run builds them).

Adding a strategy: docs/extending.md.
"""

from __future__ import annotations

# Family files register on import; this order is the registry's order.
# isort: off
from ddlstudy.strategies import single  # noqa: F401
from ddlstudy.strategies import ps  # noqa: F401
from ddlstudy.strategies import allreduce  # noqa: F401
from ddlstudy.strategies import ddp  # noqa: F401
import ddlstudy.frameworks  # noqa: F401 - registers horovod and tf_* (built lazily)
# isort: on
from ddlstudy.strategies.allreduce import AllReduce, make_buckets
from ddlstudy.strategies.base import (
    BACKWARD_SHARE,
    DEFAULT_TIMEOUT_S,
    Layout,
    LossFn,
    StepStats,
    Strategy,
    flat_params,
    replay_gradients,
)
from ddlstudy.strategies.ddp import DDP
from ddlstudy.strategies.ps import (
    GRAD,
    HEADER_BYTES,
    STOP,
    ParameterServer,
    PSAsync,
    PSSharded,
    PSSync,
    shard_bounds,
)
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
from ddlstudy.strategies.single import Single

__all__ = [
    "BACKWARD_SHARE", "DDP", "DEFAULT_TIMEOUT_S", "GRAD", "HEADER_BYTES", "STOP", "STRATEGIES",
    "AllReduce", "Layout", "LossFn", "PSAsync", "PSSharded", "PSSync", "ParameterServer",
    "Single", "StepStats", "Strategy", "StrategySpec", "driver_for", "flat_params",
    "get_strategy", "make_buckets", "make_strategy", "register_strategy", "replay_gradients",
    "servers_for", "shard_bounds", "strategy_names", "unregister_strategy",
]


def __getattr__(name: str) -> object:
    """Old names, now views of the registry (kept so existing imports keep working)."""
    if name == "PS_STRATEGIES":
        return tuple(strategy_names(family="ps"))
    if name == "DEFAULT_SERVERS":
        return {s.name: s.default_servers for s in STRATEGIES.values() if s.needs_servers}
    raise AttributeError(f"module 'ddlstudy.strategies' has no attribute {name!r}")
