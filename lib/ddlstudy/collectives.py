"""All-reduce algorithms written on point-to-point send/recv, one short function each.

Every algorithm runs on one shared harness (as in nccl-tests): a `Comm` that knows this rank, the
world size and a transport, counts the bytes of every tensor it sends or receives, and bounds every
wait with a timeout. Two transports exist:

- `DistTransport`: torch.distributed isend/irecv (gloo on CPU) - the measured runs;
- `LocalTransport`: threads in one process exchanging tensors through queues - the same algorithm
  code without a network, so the float32 "bracketing" of each algorithm (Fourie 2019's suspected
  cause of ring accuracy loss) can be shown exactly, and the algorithms unit-tested in seconds.

All algorithms reduce by addition in place into a flat view of the caller's tensor; `mean` divides
by the world size afterwards (as NCCL's avg does), so every algorithm shares one rounding step.
Ranks may receive chunks of length zero (length < world size): such messages are skipped on both
sides, which agree because chunk boundaries are a function of length and world size only.
"""

from __future__ import annotations

import datetime as dt
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np
import torch

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


# ----------------------------------------------------------------------------- transports
class Handle(Protocol):
    def wait(self, timeout_s: float) -> None: ...


class Transport(Protocol):
    rank: int
    size: int

    def isend(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle: ...

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle: ...


class _DistHandle:
    def __init__(self, work: Any, what: str) -> None:
        self.work, self.what = work, what

    def wait(self, timeout_s: float) -> None:
        try:
            self.work.wait(timeout=dt.timedelta(seconds=timeout_s))
        except RuntimeError as err:
            raise TimeoutError(f"{self.what} did not complete within {timeout_s:g} s "
                               f"(a peer failed or is stuck): {err}") from None


class DistTransport:
    """torch.distributed point-to-point on `group` (ranks are group ranks)."""

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self.dist, self.group = dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)

    def _global(self, peer: int) -> int:
        if self.group is None:
            return peer
        return self.dist.get_global_rank(self.group, peer)

    def isend(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle:
        work = self.dist.isend(tensor, self._global(peer), group=self.group, tag=tag)
        return _DistHandle(work, f"send {self.rank}->{peer} (tag {tag})")

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle:
        work = self.dist.irecv(tensor, self._global(peer), group=self.group, tag=tag)
        return _DistHandle(work, f"recv {self.rank}<-{peer} (tag {tag})")


class _Done:
    def wait(self, timeout_s: float) -> None:
        return None


class _LocalRecv:
    def __init__(self, box: queue.Queue, tensor: torch.Tensor, what: str) -> None:
        self.box, self.tensor, self.what = box, tensor, what

    def wait(self, timeout_s: float) -> None:
        try:
            data = self.box.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"{self.what} did not complete within {timeout_s:g} s") from None
        if data.numel() != self.tensor.numel():
            raise RuntimeError(f"{self.what}: got {data.numel()} elements, "
                               f"expected {self.tensor.numel()}")
        self.tensor.copy_(data)


class LocalTransport:
    """In-process ranks (threads) with buffered sends; mailboxes are FIFO per (src, dst, tag)."""

    def __init__(self, rank: int, size: int, boxes: dict[tuple[int, int, int], queue.Queue],
                 lock: threading.Lock) -> None:
        self.rank, self.size, self._boxes, self._lock = rank, size, boxes, lock

    def _box(self, src: int, dst: int, tag: int) -> queue.Queue:
        with self._lock:
            return self._boxes.setdefault((src, dst, tag), queue.Queue())

    def isend(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle:
        self._box(self.rank, peer, tag).put(tensor.detach().clone())
        return _Done()

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle:
        return _LocalRecv(self._box(peer, self.rank, tag), tensor,
                          f"local recv {self.rank}<-{peer} (tag {tag})")


# ----------------------------------------------------------------------------- the harness
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


# ----------------------------------------------------------------------------- algorithms
def ring(c: Comm, x: torch.Tensor) -> None:
    """Reduce-scatter then all-gather around the ring, N-1 steps each (bandwidth-optimal).

    Synchronous (Fourie 2019's "allreduce ring"): each step's exchange completes before the next
    starts. The step's send to the right and receive from the left are in flight together (as
    MPI_Sendrecv), so every link carries both directions at once; with blocking even/odd
    ordering instead, each link idles half the time (measured: 2.1x the link-rate time on
    shaped links). `ring_pipelined` adds segments in flight across steps.
    """
    p, r = c.size, c.rank
    if p == 1:
        return
    chunks = _pieces(x, p)
    right, left = (r + 1) % p, (r - 1) % p
    tmp = torch.empty_like(chunks[0])
    for k in range(2 * (p - 1)):
        out, into = chunks[(r - k) % p], chunks[(r - k - 1) % p]
        buf = tmp[: into.numel()] if k < p - 1 else into
        c.sendrecv(out, right, buf, left, tag=k)
        if k < p - 1:
            into.add_(buf)


def ring_pipelined(c: Comm, x: torch.Tensor) -> None:
    """Ring with each chunk cut into segments kept in flight (Fourie 2019's asynchronous ring).

    Segment j of step k is sent as soon as segment j of step k-1 has arrived and been reduced,
    so the reduction of one segment overlaps the transfer of the next, and the reduce-scatter
    runs into the all-gather without a bubble. All 2(N-1) steps are one message sequence.
    """
    p, r = c.size, c.rank
    if p == 1:
        return
    chunks = _pieces(x, p)
    nseg = max(1, math.ceil(chunks[0].numel() * x.element_size() / c.segment_bytes))
    segs = [_pieces(ch, nseg) for ch in chunks]
    tmp = _pieces(torch.empty_like(chunks[0]), nseg)
    right, left = (r + 1) % p, (r - 1) % p
    steps = 2 * (p - 1)
    sends: dict[tuple[int, int], Handle] = {}
    recvs: dict[int, tuple[Handle, torch.Tensor, torch.Tensor | None]] = {}
    for k in range(steps + 1):
        for j in range(nseg):
            if k > 0:  # segment j of step k-1 arrived: reduce it (reduce-scatter half only)
                handle, buf, into = recvs.pop(j)
                handle.wait(c.timeout_s)
                if into is not None:
                    into.add_(buf)
            if k == steps:
                continue
            sends[(k, j)] = c.isend(segs[(r - k) % p][j], right, tag=k * nseg + j)
            into = segs[(r - k - 1) % p][j]
            if k < p - 1:
                recvs[j] = (c.irecv(tmp[j][: into.numel()], left, tag=k * nseg + j),
                            tmp[j][: into.numel()], into)
            else:  # all-gather receives in place; that region left in send (k - p + 1, j)
                sends.pop((k - p + 1, j)).wait(c.timeout_s)
                recvs[j] = (c.irecv(into, left, tag=k * nseg + j), into, None)
    c.wait_all(list(sends.values()))


def _fold_in(c: Comm, x: torch.Tensor) -> int:
    """Fold a non-power-of-two world onto the largest power of two p' (MPICH's scheme).

    The first 2*rem ranks pair up (even -> odd): evens hand their data to the odd neighbour and sit
    out. Returns this rank's new rank in the p'-world, or -1 if it sits out.
    """
    p, r = c.size, c.rank
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    if r < 2 * rem:
        if r % 2 == 0:
            c.send(x, r + 1)
            return -1
        tmp = torch.empty_like(x)
        c.recv(tmp, r - 1)
        x.add_(tmp)
        return r // 2
    return r - rem


def _fold_out(c: Comm, x: torch.Tensor, newrank: int) -> None:
    """Give the ranks that sat out the final result."""
    rem = c.size - (1 << (c.size.bit_length() - 1))
    if c.rank < 2 * rem:
        if newrank < 0:
            c.recv(x, c.rank + 1)
        else:
            c.send(x, c.rank - 1)


def _real_rank(newrank: int, rem: int) -> int:
    return newrank * 2 + 1 if newrank < rem else newrank + rem


def recursive_doubling(c: Comm, x: torch.Tensor) -> None:
    """Butterfly: lg p rounds, each exchanging the whole buffer with rank XOR 2^i.

    Latency-optimal (lg p messages) but sends lg p full buffers: best for small messages.
    """
    if c.size == 1:
        return
    newrank = _fold_in(c, x)
    pof2 = 1 << (c.size.bit_length() - 1)
    rem = c.size - pof2
    if newrank >= 0:
        tmp = torch.empty_like(x)
        mask = 1
        while mask < pof2:
            peer = _real_rank(newrank ^ mask, rem)
            c.sendrecv(x, peer, tmp, peer)
            x.add_(tmp)
            mask <<= 1
    _fold_out(c, x, newrank)


def rabenseifner(c: Comm, x: torch.Tensor) -> None:
    """Recursive-halving reduce-scatter + recursive-doubling all-gather (Rabenseifner 2004).

    lg p rounds each way like the butterfly, but halving the data each round, so bandwidth
    2(p-1)/p n like the ring: good at every size on a full-bisection network.
    """
    if c.size == 1:
        return
    newrank = _fold_in(c, x)
    pof2 = 1 << (c.size.bit_length() - 1)
    rem = c.size - pof2
    if newrank >= 0:
        b = bounds(x.numel(), pof2)
        lo, hi = 0, pof2  # block window this rank is responsible for
        tmp = torch.empty_like(x)
        mask = pof2 >> 1
        while mask:
            peer = _real_rank(newrank ^ mask, rem)
            mid = (lo + hi) // 2
            (klo, khi), (glo, ghi) = ((lo, mid), (mid, hi)) if newrank & mask == 0 else \
                ((mid, hi), (lo, mid))
            keep, give = x[b[klo]:b[khi]], x[b[glo]:b[ghi]]
            c.sendrecv(give, peer, tmp[: keep.numel()], peer)
            keep.add_(tmp[: keep.numel()])
            lo, hi = klo, khi
            mask >>= 1
        mask = 1
        while mask < pof2:
            peer = _real_rank(newrank ^ mask, rem)
            plo, phi = (lo + mask, hi + mask) if newrank & mask == 0 else (lo - mask, hi - mask)
            c.sendrecv(x[b[lo]:b[hi]], peer, x[b[plo]:b[phi]], peer)
            lo, hi = min(lo, plo), max(hi, phi)
            mask <<= 1
    _fold_out(c, x, newrank)


def tree(c: Comm, x: torch.Tensor) -> None:
    """Binomial-tree reduce to rank 0, then binomial broadcast: 2 ceil(lg p) full-buffer rounds."""
    p, r = c.size, c.rank
    if p == 1:
        return
    tmp = torch.empty_like(x)
    mask = 1
    while mask < p:  # reduce: receive from children r+mask until r's lowest set bit, then send up
        if r & mask:
            c.send(x, r - mask)
            break
        if r + mask < p:
            c.recv(tmp, r + mask)
            x.add_(tmp)
        mask <<= 1
    mask = 1
    while mask < p:  # broadcast: receive from the parent (r minus its lowest set bit) ...
        if r & mask:
            c.recv(x, r - mask)
            break
        mask <<= 1
    mask >>= 1
    while mask:  # ... then pass it on to the children, largest subtree first
        if r + mask < p:
            c.send(x, r + mask)
        mask >>= 1


def ps(c: Comm, x: torch.Tensor) -> None:
    """Central parameter server on rank 0: gather, reduce in rank order, broadcast.

    The server's link carries (p-1) buffers each way: the PS bottleneck the papers measure.
    """
    p, r = c.size, c.rank
    if p == 1:
        return
    if r == 0:
        tmp = torch.empty_like(x)
        for peer in range(1, p):
            c.recv(tmp, peer)
            x.add_(tmp)
        c.wait_all([c.isend(x, peer) for peer in range(1, p)])
    else:
        c.send(x, 0)
        c.recv(x, 0)


def ps_sharded(c: Comm, x: torch.Tensor) -> None:
    """Every rank serves 1/p of the parameters: push shards to their servers, pull results.

    Same bytes per rank as the ring, 2(p-1)/p n, but in 2 rounds of p-1 concurrent messages.
    """
    p, r = c.size, c.rank
    if p == 1:
        return
    shards = _pieces(x, p)
    mine = shards[r]
    peers = [q for q in range(p) if q != r]
    incoming = {q: torch.empty_like(mine) for q in peers}
    handles = [c.irecv(incoming[q], q) for q in peers]
    sends = [c.isend(shards[q], q) for q in peers]
    c.wait_all(handles + sends)
    for q in peers:
        mine.add_(incoming[q])
    handles = [c.irecv(shards[q], q, tag=1) for q in peers]
    handles += [c.isend(mine, q, tag=1) for q in peers]
    c.wait_all(handles)


ALGORITHMS: dict[str, Callable[[Comm, torch.Tensor], None]] = {
    "ring": ring,
    "ring_pipelined": ring_pipelined,
    "recursive_doubling": recursive_doubling,
    "rabenseifner": rabenseifner,
    "tree": tree,
    "ps": ps,
    "ps_sharded": ps_sharded,
    "reference": lambda c, x: None,  # placeholder: all_reduce() dispatches it to torch
}
HAND_WRITTEN = [a for a in ALGORITHMS if a != "reference"]


# ----------------------------------------------------------------------------- public entry
def _check_choice(algorithm: str, op: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r}; valid: "
                         f"{', '.join(ALGORITHMS)}")
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; valid: {', '.join(OPS)}")


def _local_problem(tensor: torch.Tensor) -> str:
    if not isinstance(tensor, torch.Tensor):
        return f"expected a torch.Tensor, got {type(tensor).__name__}"
    if not tensor.is_contiguous():
        return "tensor is not contiguous: pass tensor.contiguous() (and copy the result back)"
    if not tensor.is_floating_point():
        return f"tensor dtype {tensor.dtype} is not floating point: sum/mean need float32/64"
    return ""


_DTYPE_CODES = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3, torch.float64: 4}


def _check_across_ranks(tensor: torch.Tensor, problem: str, group: Any,
                        timeout_s: float) -> None:
    """One all_reduce(MAX) of 4 + p int64s so every rank raises the same error, none hangs.

    Carries (len, -len, dtype, -dtype) - max and -min tell whether all ranks agree - and a
    one-hot flag per rank with a local problem. Cost: one tiny library all-reduce (tens of us on
    loopback gloo); pass check=False to skip it in timed loops.
    """
    import torch.distributed as dist

    p, r = dist.get_world_size(group), dist.get_rank(group)
    n = tensor.numel() if isinstance(tensor, torch.Tensor) else -1
    code = _DTYPE_CODES.get(getattr(tensor, "dtype", None), 0)
    info = torch.zeros(4 + p, dtype=torch.int64)
    info[:4] = torch.tensor([n, -n, code, -code])
    info[4 + r] = 1 if problem else 0
    work = dist.all_reduce(info, op=dist.ReduceOp.MAX, group=group, async_op=True)
    _DistHandle(work, "all_reduce input check").wait(timeout_s)
    if problem:
        raise ValueError(f"rank {r}: {problem}")
    bad = [q for q in range(p) if info[4 + q]]
    if bad:
        raise ValueError(f"all_reduce input invalid on rank(s) {bad} (see their error)")
    lo, hi = int(-info[1]), int(info[0])
    if lo != hi:
        raise ValueError(f"tensor lengths differ across ranks (min {lo}, max {hi}; this rank {n})")
    if int(-info[3]) != int(info[2]):
        raise ValueError(f"tensor dtypes differ across ranks (this rank {tensor.dtype})")


def all_reduce(tensor: torch.Tensor, algorithm: str = "ring", op: str = "sum", group: Any = None,
               timeout_s: float | None = None, check: bool = True,
               segment_bytes: int = PIPELINE_SEGMENT_BYTES) -> Traffic:
    """All-reduce `tensor` in place over `group` with the named algorithm; returns its traffic.

    check=True validates lengths/dtypes across ranks with one extra tiny all-reduce, so a
    mismatch is a clear ValueError on every rank instead of a hang or silent garbage.
    """
    import torch.distributed as dist

    _check_choice(algorithm, op)
    timeout_s = timeout_s or DEFAULT_TIMEOUT_S
    problem = _local_problem(tensor)
    if check:
        _check_across_ranks(tensor, problem, group, timeout_s)
    elif problem:
        raise ValueError(problem)
    p = dist.get_world_size(group)
    if algorithm == "reference":
        work = dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group, async_op=True)
        _DistHandle(work, "torch all_reduce").wait(timeout_s)
        nbytes = tensor.numel() * tensor.element_size()
        sent, recv = analytic_traffic("ring", nbytes, p, dist.get_rank(group))
        traffic = Traffic(sent, recv, counted=False)
    else:
        comm = Comm(DistTransport(group), timeout_s, segment_bytes)
        ALGORITHMS[algorithm](comm, tensor.view(-1))
        traffic = comm.traffic
    if op == "mean" and p > 1:
        tensor.div_(p)
    return traffic


def analytic_traffic(algorithm: str, nbytes: int, world_size: int, rank: int) -> tuple[int, int]:
    """(sent, received) bytes the algorithm moves on `rank`, from its structure, not its code.

    Exact when the element count divides evenly by the world size (by the largest power of two
    <= p for the halving algorithms); otherwise within one element per message.
    """
    p, r, n = world_size, rank, nbytes
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; valid: {', '.join(ALGORITHMS)}")
    if p == 1:
        return 0, 0
    if algorithm in ("ring", "ring_pipelined", "ps_sharded", "reference"):
        return 2 * (p - 1) * n // p, 2 * (p - 1) * n // p
    if algorithm == "ps":
        return ((p - 1) * n, (p - 1) * n) if r == 0 else (n, n)
    if algorithm == "tree":
        children = sum(1 for m in _powers_below(p) if r & (2 * m - 1) == 0 and r + m < p)
        parent = 1 if r else 0
        return (parent + children) * n, (parent + children) * n
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    if r < 2 * rem and r % 2 == 0:
        return n, n  # folded out: hands its data over, gets the result back
    fold = n if r < 2 * rem else 0
    lg = pof2.bit_length() - 1
    core = lg * n if algorithm == "recursive_doubling" else 2 * (pof2 - 1) * n // pof2
    return core + fold, core + fold


def _powers_below(p: int) -> list[int]:
    out, m = [], 1
    while m < p:
        out.append(m)
        m <<= 1
    return out


# ----------------------------------------------------------------------------- local simulation
def run_local(algorithm: str, inputs: Sequence[torch.Tensor], op: str = "sum",
              timeout_s: float = 30.0,
              segment_bytes: int = PIPELINE_SEGMENT_BYTES) -> tuple[list[torch.Tensor],
                                                                     list[Traffic]]:
    """Run a hand-written algorithm over len(inputs) in-process ranks (threads); no network.

    Same code path as the distributed run, so results are bit-identical to it: used to show each
    algorithm's float32 bracketing and to unit-test the algorithms without a cluster.
    """
    _check_choice(algorithm, op)
    if algorithm == "reference":
        raise ValueError("'reference' is torch's own all_reduce: it needs a process group")
    p = len(inputs)
    outs = [t.detach().clone().contiguous() for t in inputs]
    boxes: dict[tuple[int, int, int], queue.Queue] = {}
    lock = threading.Lock()
    comms = [Comm(LocalTransport(r, p, boxes, lock), timeout_s, segment_bytes) for r in range(p)]
    errors: list[BaseException] = []

    def work(r: int) -> None:
        try:
            ALGORITHMS[algorithm](comms[r], outs[r].view(-1))
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


def bracketing_drift(values: np.ndarray | torch.Tensor,
                     algorithms: Sequence[str] | None = None) -> Any:
    """float32 all-reduce of values[rank] by each algorithm vs the exact (float64) sum.

    Every algorithm adds the same numbers in a different order ("bracketing"); the error each
    order leaves is what Fourie 2019 suspected behind the ring's lower accuracy. No communication:
    the algorithms run on in-process ranks. Returns one row per algorithm: max/mean absolute
    error, max error relative to sum|x| (the sum's condition scale), the fraction of elements
    that differ from the correctly rounded sum, and whether all ranks got identical bits.
    """
    import pandas as pd

    data = torch.as_tensor(np.asarray(values, dtype=np.float64))
    if data.dim() != 2:
        raise ValueError(f"values must be 2-D (ranks x elements), got shape {tuple(data.shape)}")
    x32 = data.to(torch.float32)
    exact = x32.double().sum(0)
    scale = x32.double().abs().sum(0).clamp_min(torch.finfo(torch.float64).tiny)
    rounded = exact.to(torch.float32)  # the best a float32 result can be
    rows = []
    for alg in algorithms or HAND_WRITTEN:
        outs, _ = run_local(alg, list(x32))
        err = (outs[0].double() - exact).abs()
        rows.append({
            "algorithm": alg, "ranks": data.shape[0], "elements": data.shape[1],
            "max_abs_err": float(err.max()), "mean_abs_err": float(err.mean()),
            "max_rel_err": float((err / scale).max()),
            "frac_not_correctly_rounded": float((outs[0] != rounded).double().mean()),
            "ranks_identical": all(torch.equal(outs[0], o) for o in outs[1:]),
        })
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- engine side
_REF_CACHE: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def rank_data(seed: int, rank: int, count: int, dtype: torch.dtype) -> torch.Tensor:
    """Deterministic input of `rank`: any rank can regenerate any other's without communicating."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    return (torch.rand(count, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)


def _reference(seed: int, p: int, count: int, dtype: torch.dtype) -> tuple[torch.Tensor,
                                                                            torch.Tensor]:
    """float64 sum and sum of |x| over all ranks' inputs; cached since every algorithm uses it."""
    key = (seed, p, count, dtype)
    if key not in _REF_CACHE:
        _REF_CACHE.clear()  # keep one: at 256 MiB a reference is 512 MB
        total = torch.zeros(count, dtype=torch.float64)
        absum = torch.zeros(count, dtype=torch.float64)
        for q in range(p):
            xq = rank_data(seed, q, count, dtype).double()
            total += xq
            absum += xq.abs()
        _REF_CACHE[key] = (total, absum)
    return _REF_CACHE[key]


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        out = getattr(torch, dtype)
    except AttributeError:
        out = None
    if not isinstance(out, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}; use float32 or float64")
    return out


def count_wrong(result: torch.Tensor, seed: int, p: int, op: str) -> tuple[int, float]:
    """Elements beyond the worst-case rounding of a p-term sum: (#wrong, max abs error).

    Bound: (p-1) eps sum|x| for any bracketing (Higham 2002, sec. 4.2) plus one rounding of the
    result (and of the division for mean). An algorithm that drops or doubles a term is off by
    about one input, far above it.
    """
    ref, absum = _reference(seed, p, result.numel(), result.dtype)
    eps = torch.finfo(result.dtype).eps
    if op == "mean":
        ref, absum = ref / p, absum / p
    tol = (p + 1) * eps * absum + eps * ref.abs() + torch.finfo(result.dtype).tiny
    err = (result.double() - ref).abs()
    return int((err > tol).sum()), float(err.max()) if err.numel() else 0.0


def selfcheck(algorithm: str, count: int, dtype: str = "float32", op: str = "sum",
              seed: int = 0, iters: int = 1, timeout_s: float | None = None) -> dict[str, Any]:
    """Engine side: all-reduce deterministic data, compare with a locally computed float64 sum.

    Runs `iters` times on fresh inputs (catches state leaking between calls); wrong is summed.
    """
    import torch.distributed as dist

    p, r = dist.get_world_size(), dist.get_rank()
    dt_ = _dtype(dtype)
    wrong, max_err, traffic = 0, 0.0, Traffic()
    for _ in range(iters):
        x = rank_data(seed, r, count, dt_)
        traffic = all_reduce(x, algorithm, op, timeout_s=timeout_s)
        w, e = count_wrong(x, seed, p, op)
        wrong, max_err = wrong + w, max(max_err, e)
    return {"algorithm": algorithm, "ranks": p, "rank": r, "count": count, "dtype": dtype,
            "op": op, "wrong": wrong, "max_abs_err": max_err, **traffic.as_dict()}


def selfcheck_many(cases: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Many selfchecks in one engine call (each engine call costs ms of ipyparallel overhead)."""
    return [selfcheck(**case) for case in cases]


def probe_error(kind: str, algorithm: str = "ring", bad_rank: int = 0,
                timeout_s: float = 30.0) -> str:
    """Engine side: provoke a bad input on `bad_rank`, return the ValueError text ('' if none).

    kind: 'length' (bad rank's tensor is one longer), 'noncontiguous' (a strided view),
    'dtype' (float64 on the bad rank), 'none' (valid input).
    """
    import torch.distributed as dist

    r = dist.get_rank()
    x = torch.ones(8)
    if r == bad_rank:
        if kind == "length":
            x = torch.ones(9)
        elif kind == "noncontiguous":
            x = torch.ones(16)[::2]
        elif kind == "dtype":
            x = torch.ones(8, dtype=torch.float64)
    try:
        all_reduce(x, algorithm, timeout_s=timeout_s)
    except ValueError as err:
        return str(err)
    return ""


def time_algorithm(algorithm: str, count: int, dtype: str = "float32", op: str = "sum",
                   iters: int = 20, warmup: int = 5, timeout_s: float | None = None
                   ) -> dict[str, Any]:
    """Engine side: per-iteration wall time of one all-reduce on this rank.

    Each iteration restores the input (outside the timed region), aligns ranks with a barrier,
    then times one unchecked all-reduce; the driver takes the max over ranks per iteration (an
    all-reduce is done when its last rank is).
    """
    import torch.distributed as dist

    dt_ = _dtype(dtype)
    src = rank_data(0, dist.get_rank(), count, dt_)
    x = src.clone()
    all_reduce(x, algorithm, op, timeout_s=timeout_s)  # validate inputs once, checked
    times, traffic = [], Traffic()
    for i in range(warmup + iters):
        x.copy_(src)
        dist.barrier()
        t0 = time.perf_counter()
        traffic = all_reduce(x, algorithm, op, timeout_s=timeout_s, check=False)
        elapsed = time.perf_counter() - t0
        if i >= warmup:
            times.append(elapsed)
    return {"rank": dist.get_rank(), "times_s": times, **traffic.as_dict()}


