"""The one registry of all-reduce algorithms: name -> `Algorithm` (code, traffic, cost terms).

Everything that needs the list of algorithms (params validation, the bench's choices, the cost
model, the simulator, tests, docs) reads `ALGORITHMS`. Torch-free: an entry names its code as
"module:attr" (imported on first use), so params and its CLI can read the names cheaply.
Adding an algorithm is one function + one `register_algorithm` call (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddlstudy.registry import Registry, resolve

if TYPE_CHECKING:
    import torch

    from ddlstudy.collectives.common import Comm

# run: (Comm, flat tensor) -> None, reducing in place.
# traffic: (nbytes, world size, rank) -> (sent, received) bytes on that rank (p >= 2).
# terms: (nbytes, world size, segment bytes) -> (alpha, beta, gamma) coefficients (p >= 2).
# tiers: (nbytes, world size, rank, ranks per node) -> {"intra": (sent, received),
#   "inter": (sent, received)} bytes on that rank, optional (None: not derived for it).
Code = Callable[..., Any] | str


@dataclass(frozen=True)
class Algorithm:
    """One all-reduce algorithm and what the rest of ddlstudy needs to know about it.

    run: the hand-written code on a `Comm` (None: the library's own all_reduce, which `all_reduce`
    dispatches to torch); traffic: bytes per rank from its structure (not its code), which the
    tests compare with the bytes `Comm` counted; terms: alpha-beta-gamma coefficients
    (Thakur, Rabenseifner & Gropp 2005) that `costmodel` turns into seconds; tiers: its traffic
    split by link tier at k ranks per node (`placement`'s rule), which the records put beside
    the per-tier bytes `Comm` counted (None: not derived for this algorithm).
    """

    name: str
    run: Code | None
    traffic: Code
    terms: Code
    summary: str = ""
    tiers: Code | None = None

    @property
    def hand_written(self) -> bool:
        return self.run is not None

    def __call__(self, c: Comm, x: torch.Tensor) -> None:
        if self.run is None:
            raise ValueError(f"{self.name!r} is the library's all_reduce: it needs a process "
                             "group (use all_reduce(), not the in-process simulator)")
        resolve(self.run)(c, x)

    def bytes_moved(self, nbytes: int, p: int, rank: int) -> tuple[int, int]:
        """(sent, received) bytes on `rank` (0 on one rank)."""
        return (0, 0) if p == 1 else tuple(resolve(self.traffic)(nbytes, p, rank))

    def tier_bytes(self, nbytes: int, p: int, rank: int,
                   k: int) -> dict[str, tuple[int, int]] | None:
        """{"intra": (sent, received), "inter": (...)} on `rank` at k ranks per node; None
        where the algorithm has no tier split."""
        if self.tiers is None:
            return None
        return {t: tuple(v) for t, v in resolve(self.tiers)(nbytes, p, rank, k).items()}

    def cost_terms(self, nbytes: float, p: int, segment_bytes: int) -> tuple[float, float, float]:
        """(alpha, beta, gamma) coefficients of its time (0 on one rank)."""
        if p < 1:
            raise ValueError(f"p must be >= 1, got {p}")
        return (0.0, 0.0, 0.0) if p == 1 else tuple(resolve(self.terms)(float(nbytes), p,
                                                                           segment_bytes))


ALGORITHMS: Registry[Algorithm] = Registry("all-reduce algorithm")
register_algorithm = ALGORITHMS.register  # add an algorithm under its name (once)
unregister_algorithm = ALGORITHMS.unregister  # tests and the docs' example clean up toys


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
    return get_algorithm(algorithm).bytes_moved(nbytes, world_size, rank)


def analytic_tiers(algorithm: str, nbytes: int, world_size: int, rank: int,
                   gpus_per_node: int) -> dict[str, tuple[int, int]] | None:
    """`analytic_traffic` split by link tier (same node / other node at `gpus_per_node` ranks
    per node, ranks placed node by node); None for an algorithm without a tier split."""
    return get_algorithm(algorithm).tier_bytes(nbytes, world_size, rank, gpus_per_node)


def cost_terms(algorithm: str, nbytes: float, p: int,
               segment_bytes: int) -> tuple[float, float, float]:
    """The (alpha, beta, gamma) coefficients: T = a*alpha + b*beta + g*gamma."""
    return get_algorithm(algorithm).cost_terms(nbytes, p, segment_bytes)


def algorithm_table() -> list[dict[str, Any]]:
    """One row per registered algorithm (its code is named, not imported)."""
    def where(code: Code | None) -> str:
        if code is None:
            return "torch.distributed"
        return code if isinstance(code, str) else f"{code.__module__}:{code.__qualname__}"

    return [{"algorithm": a.name, "code": f"`{where(a.run)}`", "summary": a.summary}
            for a in ALGORITHMS.values()]



def _builtin(name: str, run: str | None, traffic: str, terms: str, summary: str,
             tiers: str | None = None) -> None:
    """A built-in algorithm; code named as "file:function" inside ddlstudy.collectives."""
    def full(ref: str) -> str:
        return f"ddlstudy.collectives.{ref}"

    register_algorithm(Algorithm(name, full(run) if run else None, full(traffic), full(terms),
                                 summary, full(tiers) if tiers else None))


# The built-in algorithms, in the order tables and benches list them; code in one file per family.
_builtin("ring", "ring:ring", "ring:ring_traffic", "ring:ring_terms",
         "reduce-scatter + all-gather, synchronous steps", "ring:ring_tiers")
_builtin("ring_pipelined", "ring:ring_pipelined", "ring:ring_traffic",
         "ring:ring_pipelined_terms", "ring with segments in flight across steps",
         "ring:ring_tiers")
_builtin("recursive_doubling", "halving:recursive_doubling", "halving:doubling_traffic",
         "halving:doubling_terms", "butterfly: lg p full-buffer exchanges",
         "halving:doubling_tiers")
_builtin("rabenseifner", "halving:rabenseifner", "halving:rabenseifner_traffic",
         "halving:rabenseifner_terms", "recursive halving + doubling",
         "halving:rabenseifner_tiers")
_builtin("tree", "tree:tree", "tree:tree_traffic", "tree:tree_terms",
         "binomial reduce + broadcast", "tree:tree_tiers")
_builtin("ps", "ps:ps", "ps:ps_traffic", "ps:ps_terms", "central server on rank 0",
         "ps:ps_tiers")
_builtin("ps_sharded", "ps:ps_sharded", "ring:ring_traffic", "ring:ring_terms",
         "every rank serves 1/p of the buffer", "ps:ps_sharded_tiers")
_builtin("hierarchical", "hierarchical:hierarchical", "hierarchical:hierarchical_traffic",
         "hierarchical:hierarchical_terms",
         "ring reduce-scatter in the node, ring across nodes, all-gather in the node",
         "hierarchical:tier_traffic")
# gloo's CPU all_reduce is a ring at these sizes: its bytes and cost terms are the ring's.
_builtin("reference", None, "ring:ring_traffic", "ring:ring_terms",
         "torch.distributed.all_reduce (library; bytes analytic)", "ring:ring_tiers")
