"""The one registry of all-reduce algorithms: name -> `Algorithm` (code, traffic, cost terms).

Everything that needs the list of algorithms (params validation, the bench's choices, the cost
model, the simulator, tests, docs) reads `ALGORITHMS`; a family file registers its algorithms
with `register_algorithm` when the package is imported. See docs/extending.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ddlstudy.collectives.common import Comm

RunFn = Callable[[Comm, torch.Tensor], None]
# (nbytes, world size, rank) -> (sent, received) bytes on that rank.
TrafficFn = Callable[[int, int, int], tuple[int, int]]
# (nbytes, world size, segment bytes) -> (alpha, beta, gamma) coefficients of the step time.
TermsFn = Callable[[float, int, int], tuple[float, float, float]]


@dataclass(frozen=True)
class Algorithm:
    """One all-reduce algorithm and what the rest of ddlstudy needs to know about it.

    run: the hand-written code on a `Comm` (None: the library's own all_reduce, dispatched by
    `all_reduce`); traffic: analytic bytes per rank from its structure (not its code), which the
    tests compare with the bytes `Comm` counted; terms: alpha-beta-gamma coefficients
    (Thakur, Rabenseifner & Gropp 2005) that `costmodel` turns into seconds.
    """

    name: str
    run: RunFn | None
    traffic: TrafficFn
    terms: TermsFn
    summary: str = ""

    @property
    def hand_written(self) -> bool:
        return self.run is not None

    def __call__(self, c: Comm, x: torch.Tensor) -> None:
        if self.run is None:
            raise ValueError(f"{self.name!r} is the library's all_reduce: it needs a process "
                             "group (use all_reduce(), not the in-process simulator)")
        self.run(c, x)


ALGORITHMS: dict[str, Algorithm] = {}


def register_algorithm(algorithm: Algorithm) -> Algorithm:
    """Add an algorithm under its name (a name may be registered once)."""
    if algorithm.name in ALGORITHMS:
        raise ValueError(f"all-reduce algorithm {algorithm.name!r} is already registered")
    ALGORITHMS[algorithm.name] = algorithm
    return algorithm


def unregister_algorithm(name: str) -> None:
    """Remove an algorithm (tests and docs examples register toys and clean up)."""
    ALGORITHMS.pop(name, None)


def hand_written() -> list[str]:
    """Names of the algorithms with ddlstudy code (not the library reference), in order."""
    return [a.name for a in ALGORITHMS.values() if a.hand_written]


def get_algorithm(name: str) -> Algorithm:
    """The registered algorithm, or a ValueError naming the valid ones."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown all-reduce algorithm {name!r}; valid: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def analytic_traffic(algorithm: str, nbytes: int, world_size: int, rank: int) -> tuple[int, int]:
    """(sent, received) bytes the algorithm moves on `rank`, from its structure, not its code.

    Exact when the element count divides evenly by the world size (by the largest power of two
    <= p for the halving algorithms); otherwise within one element per message.
    """
    alg = get_algorithm(algorithm)
    if world_size == 1:
        return 0, 0
    return alg.traffic(nbytes, world_size, rank)


def cost_terms(algorithm: str, nbytes: float, p: int,
               segment_bytes: int) -> tuple[float, float, float]:
    """The (alpha, beta, gamma) coefficients: T = a*alpha + b*beta + g*gamma."""
    alg = get_algorithm(algorithm)
    if p < 1:
        raise ValueError(f"p must be >= 1, got {p}")
    if p == 1:
        return 0.0, 0.0, 0.0
    return alg.terms(float(nbytes), p, segment_bytes)
