"""The one harness every algorithm runs on (as nccl-tests' common.cu): `Comm` and `Traffic`.

A `Comm` knows this rank, the world size and a transport, counts the bytes of every tensor it
sends or receives, and bounds every wait with a timeout. Ranks may receive chunks of length zero
(length < world size): such messages are skipped on both sides, which agree because chunk
boundaries are a function of length and world size only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

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
    """

    sent_bytes: int = 0
    recv_bytes: int = 0
    sent_msgs: int = 0
    recv_msgs: int = 0
    counted: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Comm:
    """A rank's view of the world for one all-reduce: counts bytes, bounds waits."""

    def __init__(self, transport: Transport, timeout_s: float = DEFAULT_TIMEOUT_S,
                 segment_bytes: int = PIPELINE_SEGMENT_BYTES) -> None:
        self.t = transport
        self.rank, self.size = transport.rank, transport.size
        self.timeout_s = timeout_s
        self.segment_bytes = segment_bytes
        self.traffic = Traffic()

    def isend(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> Handle:
        if tensor.numel() == 0:
            return _Done()
        self.traffic.sent_bytes += tensor.numel() * tensor.element_size()
        self.traffic.sent_msgs += 1
        return self.t.isend(tensor, peer, tag)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> Handle:
        if tensor.numel() == 0:
            return _Done()
        self.traffic.recv_bytes += tensor.numel() * tensor.element_size()
        self.traffic.recv_msgs += 1
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
