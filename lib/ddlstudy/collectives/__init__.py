"""All-reduce algorithms written on point-to-point send/recv, in nccl-tests' shape.

- `common`: the shared harness (`Comm`: rank, world, transport, byte counts, bounded waits) and
  `Traffic`; `transports`: torch.distributed (`DistTransport`) or in-process threads
  (`LocalTransport`);
- `registry`: the one registry of algorithms (`ALGORITHMS`: name -> `Algorithm` with its code,
  analytic traffic and alpha-beta-gamma cost terms), torch-free; the code lives in one short
  file per family: `ring` (ring, ring_pipelined), `halving` (recursive_doubling, rabenseifner),
  `tree`, `ps` (ps, ps_sharded); `reference` is torch's own all_reduce;
- `api`: `all_reduce(tensor, algorithm, op, group)`, the public entry;
- `simulate`: `run_local`, the algorithms over in-process ranks (no network), bit-identical to
  the distributed run; `drift`: `bracketing_drift`, each algorithm's float32 rounding (Fourie
  2019's suspected cause of ring accuracy loss);
- `verify` and `timing`: engine-side self-checks and timing that `ddlstudy.bench.collectives`
  runs.

Importing this package loads only the registry (no torch); every other name is imported from
its file on first use. Adding an algorithm: docs/extending.md.
"""

from __future__ import annotations

from ddlstudy.collectives.registry import (
    ALGORITHMS,
    Algorithm,
    analytic_tiers,
    analytic_traffic,
    cost_terms,
    get_algorithm,
    hand_written,
    register_algorithm,
    unregister_algorithm,
)
from ddlstudy.registry import lazy_getattr

_LAZY = {
    "common": ("DEFAULT_TIMEOUT_S", "OPS", "PIPELINE_SEGMENT_BYTES", "Comm", "Traffic", "bounds"),
    "transports": ("DistTransport", "LocalTransport"),
    "api": ("all_reduce",),
    "simulate": ("run_local",),
    "drift": ("bracketing_drift",),
    "verify": ("count_wrong", "probe_error", "rank_data", "selfcheck", "selfcheck_many"),
    "timing": ("time_algorithm",),
    "placement": ("gpus_per_node", "set_gpus_per_node", "using_gpus_per_node"),
}
__all__ = ["ALGORITHMS", "HAND_WRITTEN", "Algorithm", "analytic_tiers", "analytic_traffic",
           "cost_terms", "get_algorithm", "hand_written", "register_algorithm",
           "unregister_algorithm",
           *(name for names in _LAZY.values() for name in names)]

# A name loads from its file on first use; HAND_WRITTEN is a live view of the registry.
__getattr__ = lazy_getattr("ddlstudy.collectives", _LAZY, {"HAND_WRITTEN": hand_written})
