"""The allreduce strategy with its `gpus_per_node` option: which ranks share a node, for the
`hierarchical` all-reduce algorithm (ranks r // k on one node, the last node may be smaller).

The option sets the process's `ddlstudy.collectives.placement.gpus_per_node` (one strategy
per engine process) and builds the ordinary `AllReduce`; other algorithms place nothing by it
(their bytes' tiers follow it, or the hosts' map). On real hosts (a launcher's `--hosts`) a
value the hosts contradict is refused: the hosts say where the ranks are.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ddlstudy.collectives.placement import check_layout, set_gpus_per_node
from ddlstudy.strategies.allreduce import AllReduce


def allreduce(model: nn.Module, *, gpus_per_node: int | None = None, **kw: Any) -> AllReduce:
    """`AllReduce(model, **kw)` with this process's ranks per node set to `gpus_per_node`
    (None: DDLSTUDY_GPUS_PER_NODE, else 1). ValueError when the hosts' map places the ranks
    otherwise (`placement.check_layout`)."""
    set_gpus_per_node(gpus_per_node)
    if gpus_per_node is not None:
        import torch.distributed as dist

        if dist.is_initialized():
            check_layout(dist.get_world_size(), gpus_per_node)
    return AllReduce(model, **kw)
