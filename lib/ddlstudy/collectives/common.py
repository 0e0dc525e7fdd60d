"""The one harness every algorithm runs on (as nccl-tests' common.cu): `Comm` and `Traffic`.

A `Comm` knows this rank, the world size and a transport, counts the bytes of every tensor it
sends or receives (in total, and per link tier: to or from a rank of its own node, or of another
node, by `placement`'s rule r // k on global ranks), and bounds every wait with a timeout.
Ranks may receive chunks of length zero (length < world size): such messages are skipped on
both sides, which agree because chunk boundaries are a function of length and world size only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ddlstudy.collectives.placement import gpus_per_node as _gpus_per_node
from ddlstudy.collectives.placement import tier
from ddlstudy.collectives.transports import Handle, Transport, _Done

DEFAULT_TIMEOUT_S = 120.0
# Pipelined ring: segments of at most this many bytes are kept in flight (4 per chunk at 16 MiB
# over 4 ranks). Small enough to overlap the reduction with the transfer, large enough that
# per-message overhead (~tens of us in gloo) stays small.
PIPELINE_SEGMENT_BYTES = 1 << 20
OPS = ("sum", "mean")


@dataclass
class Traffic:
    """What this rank put on and took off the wire for one all-reduce.

    counted=False: the numbers are the analytic ring count, not observed (library reference).
    intra_* / inter_*: the same bytes split by the peer's node (same node / another node at
    `gpus_per_node` ranks per node); None where nothing was counted per peer (the library's
    own all_reduce).
    """

    sent_bytes: int = 0
    recv_bytes: int = 0
    sent_msgs: int = 0
    recv_msgs: int = 0
    counted: bool = True
    intra_sent_bytes: int | None = None
    intra_recv_bytes: int | None = None
    inter_sent_bytes: int | None = None
    inter_recv_bytes: int | None = None
    gpus_per_node: int | None = None

    def step_fields(self) -> dict[str, float]:
        """These counts as `StepStats`' byte fields (bytes_sent, bytes_recv, bytes_sent_intra,
        ...; the tier fields NaN where not counted): subtract two readings for one step's."""
        nan = float("nan")
        return {"bytes_sent": self.sent_bytes, "bytes_recv": self.recv_bytes,
                **{f"bytes_{way}_{tier}": nan if (v := getattr(self, f"{tier}_{way}_bytes"))
                   is None else v for tier in ("intra", "inter") for way in ("sent", "recv")}}

    def tiers(self) -> dict[str, tuple[int, int]] | None:
        """{"intra": (sent, received), "inter": (...)} bytes, or None where not counted."""
        if self.intra_sent_bytes is None:
            return None
        return {"intra": (self.intra_sent_bytes, self.intra_recv_bytes or 0),
                "inter": (self.inter_sent_bytes or 0, self.inter_recv_bytes or 0)}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def since(before: dict[str, float], traffic: Traffic) -> dict[str, float]:
    """`StepStats` byte fields for what `traffic` counted after the reading `before`
    (`traffic.step_fields()` taken earlier)."""
    return {k: v - before[k] for k, v in traffic.step_fields().items()}


class Comm:
    """A rank's view of the world for one all-reduce: counts bytes (per tier too), bounds waits.

    gpus_per_node: ranks per node for the tier split (None: this process's
    `placement.gpus_per_node()`); peers are classified by their global rank (the transport's
    `global_rank`, the group rank where a transport has none).
    """

    def __init__(self, transport: Transport, timeout_s: float = DEFAULT_TIMEOUT_S,
                 segment_bytes: int = PIPELINE_SEGMENT_BYTES,
                 gpus_per_node: int | None = None) -> None:
        self.t = transport
        self.rank, self.size = transport.rank, transport.size
        self.timeout_s = timeout_s
        self.segment_bytes = segment_bytes
        self.k = gpus_per_node or _gpus_per_node()
        self._global = getattr(transport, "global_rank", lambda q: q)
        self._own = self._global(self.rank)
        self.traffic = Traffic(intra_sent_bytes=0, intra_recv_bytes=0, inter_sent_bytes=0,
                               inter_recv_bytes=0, gpus_per_node=self.k)

    def _count(self, nbytes: int, peer: int, way: str) -> None:
        t = self.traffic
        setattr(t, f"{way}_bytes", getattr(t, f"{way}_bytes") + nbytes)
        setattr(t, f"{way}_msgs", getattr(t, f"{way}_msgs") + 1)
        name = f"{tier(self._own, self._global(peer), self.k)}_{way}_bytes"
        setattr(t, name, getattr(t, name) + nbytes)

    def isend(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> Handle:
        if tensor.numel() == 0:
            return _Done()
        self._count(tensor.numel() * tensor.element_size(), peer, "sent")
        return self.t.isend(tensor, peer, tag)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> Handle:
        if tensor.numel() == 0:
            return _Done()
        self._count(tensor.numel() * tensor.element_size(), peer, "recv")
        return self.t.irecv(tensor, peer, tag)

    def send(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> None:
        self.isend(tensor, peer, tag).wait(self.timeout_s)

    def recv(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> None:
        self.irecv(tensor, peer, tag).wait(self.timeout_s)

    def sendrecv(self, send: torch.Tensor, dst: int, recv: torch.Tensor, src: int,
                 tag: int = 0) -> None:
        """Both directions in flight at once, so pairwise exchanges cannot deadlock."""
        handles = [self.irecv(recv, src, tag), self.isend(send, dst, tag)]
        self.wait_all(handles)

    def wait_all(self, handles: Sequence[Handle]) -> None:
        for h in handles:
            h.wait(self.timeout_s)


def bounds(n: int, parts: int) -> list[int]:
    """Split n elements into `parts` near-equal contiguous pieces (first n % parts get one more)."""
    base, extra = divmod(n, parts)
    out = [0]
    for i in range(parts):
        out.append(out[-1] + base + (1 if i < extra else 0))
    return out


def _pieces(flat: torch.Tensor, parts: int) -> list[torch.Tensor]:
    b = bounds(flat.numel(), parts)
    return [flat[b[i]:b[i + 1]] for i in range(parts)]


def lg(p: int) -> int:
    """floor(lg p): rounds of a power-of-two core."""
    return p.bit_length() - 1


def clg(p: int) -> int:
    """ceil(lg p): depth of a binomial tree over p ranks."""
    return (p - 1).bit_length()
