"""All-reduce algorithms written on point-to-point send/recv, in nccl-tests' shape.

- `common`: the shared harness (`Comm`: rank, world, transport, byte counts, bounded waits) and
  `Traffic`; `transports`: torch.distributed (`DistTransport`) or in-process threads
  (`LocalTransport`);
- `registry`: the one registry of algorithms (`ALGORITHMS`: name -> `Algorithm` with its code,
  analytic traffic and alpha-beta-gamma cost terms); one short file per family registers its
  own: `ring` (ring, ring_pipelined), `halving` (recursive_doubling, rabenseifner), `tree`,
  `ps` (ps, ps_sharded), `reference` (torch's own all_reduce);
- `api`: `all_reduce(tensor, algorithm, op, group)`, the public entry;
- `simulate`: `run_local`, the algorithms over in-process ranks (no network), bit-identical to
  the distributed run; `drift`: `bracketing_drift`, each algorithm's float32 rounding (Fourie
  2019's suspected cause of ring accuracy loss);
- `verify` and `timing`: engine-side self-checks and timing that `ddlstudy.bench.collectives`
  runs.

Adding an algorithm: docs/extending.md.
"""

from __future__ import annotations

# Family files register their algorithms on import; this order is the registry's order.
# isort: off
from ddlstudy.collectives import ring  # noqa: F401
from ddlstudy.collectives import halving  # noqa: F401
from ddlstudy.collectives import tree  # noqa: F401
from ddlstudy.collectives import ps  # noqa: F401
from ddlstudy.collectives import reference  # noqa: F401
# isort: on
from ddlstudy.collectives.api import all_reduce
from ddlstudy.collectives.common import (
    DEFAULT_TIMEOUT_S,
    OPS,
    PIPELINE_SEGMENT_BYTES,
    Comm,
    Traffic,
    bounds,
)
from ddlstudy.collectives.drift import bracketing_drift
from ddlstudy.collectives.halving import rabenseifner, recursive_doubling
from ddlstudy.collectives.ps import ps as ps_allreduce
from ddlstudy.collectives.ps import ps_sharded
from ddlstudy.collectives.registry import (
    ALGORITHMS,
    Algorithm,
    analytic_traffic,
    cost_terms,
    get_algorithm,
    hand_written,
    register_algorithm,
    unregister_algorithm,
)
from ddlstudy.collectives.ring import ring as ring_allreduce
from ddlstudy.collectives.ring import ring_pipelined
from ddlstudy.collectives.simulate import run_local
from ddlstudy.collectives.timing import time_algorithm
from ddlstudy.collectives.transports import DistTransport, LocalTransport
from ddlstudy.collectives.tree import tree as tree_allreduce
from ddlstudy.collectives.verify import (
    count_wrong,
    probe_error,
    rank_data,
    selfcheck,
    selfcheck_many,
)

__all__ = [
    "ALGORITHMS", "DEFAULT_TIMEOUT_S", "OPS", "PIPELINE_SEGMENT_BYTES", "Algorithm", "Comm",
    "DistTransport", "LocalTransport", "Traffic", "all_reduce", "analytic_traffic", "bounds",
    "bracketing_drift", "cost_terms", "count_wrong", "get_algorithm", "hand_written",
    "probe_error", "ps_allreduce", "ps_sharded", "rabenseifner", "rank_data",
    "recursive_doubling", "register_algorithm", "ring_allreduce", "ring_pipelined", "run_local",
    "selfcheck", "selfcheck_many", "time_algorithm", "tree_allreduce", "unregister_algorithm",
]


def __getattr__(name: str) -> object:
    """HAND_WRITTEN stays a live view of the registry (old import path)."""
    if name == "HAND_WRITTEN":
        return hand_written()
    raise AttributeError(f"module 'ddlstudy.collectives' has no attribute {name!r}")
