"""The algorithms over in-process ranks (threads): same code as the distributed run, no network.

Results are bit-identical to the distributed run, so this shows each algorithm's float32
bracketing exactly and unit-tests the algorithms in seconds without a cluster.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence

import torch

from ddlstudy.collectives.api import _check_choice
from ddlstudy.collectives.common import PIPELINE_SEGMENT_BYTES, Comm, Traffic
from ddlstudy.collectives.registry import ALGORITHMS
from ddlstudy.collectives.transports import LocalTransport


def run_local(algorithm: str, inputs: Sequence[torch.Tensor], op: str = "sum",
              timeout_s: float = 30.0,
              segment_bytes: int = PIPELINE_SEGMENT_BYTES) -> tuple[list[torch.Tensor],
                                                                     list[Traffic]]:
    """Run a hand-written algorithm over len(inputs) in-process ranks (threads); no network."""
    _check_choice(algorithm, op)
    alg = ALGORITHMS[algorithm]
    if not alg.hand_written:
        raise ValueError(f"{algorithm!r} is torch's own all_reduce: it needs a process group")
    p = len(inputs)
    outs = [t.detach().clone().contiguous() for t in inputs]
    boxes: dict[tuple[int, int, int], queue.Queue] = {}
    lock = threading.Lock()
    comms = [Comm(LocalTransport(r, p, boxes, lock), timeout_s, segment_bytes) for r in range(p)]
    errors: list[BaseException] = []

    def work(r: int) -> None:
        try:
            alg(comms[r], outs[r].view(-1))
            if op == "mean" and p > 1:
                outs[r].div_(p)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(r,), daemon=True) for r in range(p)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout_s + 5)
    if errors:
        raise errors[0]
    return outs, [comm.traffic for comm in comms]
