"""Power-of-two algorithms: recursive doubling (butterfly) and Rabenseifner's halving/doubling.

Non-powers of two fold the 2r = 2(p - p') extra ranks onto the largest power of two p' <= p
(MPICH's scheme): lg p' rounds plus one full-buffer exchange in and one out.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ddlstudy.collectives.common import Comm, bounds, lg
from ddlstudy.collectives.placement import split


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


def _folded(c: Comm, x: torch.Tensor,
            core: Callable[[Comm, torch.Tensor, Callable[[int], int], int, int], None]) -> None:
    """Run a power-of-two `core(c, x, real, newrank, pof2)` on the folded world: the extra ranks
    fold in first and get the result back last; `real(q)` maps a folded rank to a real one."""
    if c.size == 1:
        return
    newrank = _fold_in(c, x)
    pof2 = 1 << (c.size.bit_length() - 1)
    rem = c.size - pof2
    if newrank >= 0:
        core(c, x, lambda q: _real_rank(q, rem), newrank, pof2)
    _fold_out(c, x, newrank)


def _butterfly(c: Comm, x: torch.Tensor, real: Callable[[int], int], newrank: int,
               pof2: int) -> None:
    tmp = torch.empty_like(x)
    mask = 1
    while mask < pof2:
        peer = real(newrank ^ mask)
        c.sendrecv(x, peer, tmp, peer)
        x.add_(tmp)
        mask <<= 1


def _halving_doubling(c: Comm, x: torch.Tensor, real: Callable[[int], int], newrank: int,
                      pof2: int) -> None:
    b = bounds(x.numel(), pof2)
    lo, hi = 0, pof2  # block window this rank is responsible for
    tmp = torch.empty_like(x)
    mask = pof2 >> 1
    while mask:
        peer = real(newrank ^ mask)
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
        peer = real(newrank ^ mask)
        plo, phi = (lo + mask, hi + mask) if newrank & mask == 0 else (lo - mask, hi - mask)
        c.sendrecv(x[b[lo]:b[hi]], peer, x[b[plo]:b[phi]], peer)
        lo, hi = min(lo, plo), max(hi, phi)
        mask <<= 1


def recursive_doubling(c: Comm, x: torch.Tensor) -> None:
    """Butterfly: lg p rounds, each exchanging the whole buffer with rank XOR 2^i.

    Latency-optimal (lg p messages) but sends lg p full buffers: best for small messages.
    """
    _folded(c, x, _butterfly)


def rabenseifner(c: Comm, x: torch.Tensor) -> None:
    """Recursive-halving reduce-scatter + recursive-doubling all-gather (Rabenseifner 2004).

    lg p rounds each way like the butterfly, but halving the data each round, so bandwidth
    2(p-1)/p n like the ring: good at every size on a full-bisection network.
    """
    _folded(c, x, _halving_doubling)


def _folded_traffic(core: int, nbytes: int, p: int, rank: int) -> tuple[int, int]:
    """Add the fold's full-buffer exchange to a power-of-two core's bytes."""
    pof2 = 1 << lg(p)
    rem = p - pof2
    if rank < 2 * rem and rank % 2 == 0:
        return nbytes, nbytes  # folded out: hands its data over, gets the result back
    fold = nbytes if rank < 2 * rem else 0
    return core + fold, core + fold


def doubling_traffic(nbytes: int, p: int, rank: int) -> tuple[int, int]:
    """lg p' full buffers each way, plus the fold."""
    return _folded_traffic(lg(p) * nbytes, nbytes, p, rank)


def rabenseifner_traffic(nbytes: int, p: int, rank: int) -> tuple[int, int]:
    """2(p'-1)/p' n each way, plus the fold."""
    pof2 = 1 << lg(p)
    return _folded_traffic(2 * (pof2 - 1) * nbytes // pof2, nbytes, p, rank)


def _folded_exchanges(nbytes: int, p: int, rank: int,
                      core: Callable[[int], int]) -> list[tuple[int, int, int]]:
    """(peer, sent, received) of `rank` in a folded power-of-two algorithm whose round with
    mask m moves core(m) bytes each way between folded ranks q and q ^ m."""
    pof2 = 1 << lg(p)
    rem = p - pof2
    if rank < 2 * rem and rank % 2 == 0:
        return [(rank + 1, nbytes, nbytes)]  # folded out: data over, the result back
    out = [(rank - 1, nbytes, nbytes)] if rank < 2 * rem else []
    newrank = rank // 2 if rank < 2 * rem else rank - rem
    m = 1
    while m < pof2:
        out.append((_real_rank(newrank ^ m, rem), core(m), core(m)))
        m <<= 1
    return out


def doubling_tiers(nbytes: int, p: int, rank: int, k: int) -> dict[str, tuple[int, int]]:
    """`doubling_traffic` per link tier: a full buffer with each butterfly partner."""
    return split(rank, k, _folded_exchanges(nbytes, p, rank, lambda m: nbytes))


def rabenseifner_tiers(nbytes: int, p: int, rank: int, k: int) -> dict[str, tuple[int, int]]:
    """`rabenseifner_traffic` per link tier: with the partner of mask m, m blocks of n / p'
    each way while halving and m again while doubling."""
    pof2 = 1 << lg(p)
    return split(rank, k, _folded_exchanges(nbytes, p, rank,
                                            lambda m: 2 * m * nbytes // pof2))


def _fold_terms(n: float, p: int) -> tuple[float, float, float]:
    """Folding a non-power of two costs 2 alpha + 2 n beta + n gamma (0 for a power of two)."""
    return (2.0, 2 * n, n) if (1 << lg(p)) != p else (0.0, 0.0, 0.0)


def doubling_terms(n: float, p: int, segment_bytes: int) -> tuple[float, float, float]:
    """lg p' rounds of a full buffer, plus the fold."""
    f = _fold_terms(n, p)
    return lg(p) + f[0], lg(p) * n + f[1], lg(p) * n + f[2]


def rabenseifner_terms(n: float, p: int, segment_bytes: int) -> tuple[float, float, float]:
    """2 lg p' rounds moving 2(p'-1)/p' n, plus the fold."""
    pof2 = 1 << lg(p)
    frac = (pof2 - 1) / pof2
    f = _fold_terms(n, p)
    return 2 * lg(p) + f[0], 2 * frac * n + f[1], frac * n + f[2]
