"""One training step of every strategy, analytic (alpha-beta-gamma on the critical path).

The replay table's compute (forward, then backward producing gradients in reverse order), the
model's gradient sizes in the buckets `strategies.AllReduce` builds, each bucket all-reduced when
ready (overlap) or after backward, parameter servers' bytes through each server's link, links
from `ddlstudy.network.profiles.PROFILES`, and per-host constants (`Constants`) fitted to
measured cells.

Beyond one GPU per node on one flat link (the defaults, what the emulated reference cells ran):

- Latency per message: every message on an algorithm's critical path pays its link's one-way
  latency (`Link.latency_s`): 2(p-1) for a ring, 2(p-1)S for a pipelined ring of S segments,
  2S for a worker's pushes and pulls to S parameter servers.
- Two tiers (`Tiers`): GPUs of a node talk over the intra-node link (PCIe / NVLink, per GPU per
  direction), nodes over their NICs (all NICs of a node together). A flat ring placed node by
  node crosses each NIC once per direction, so its steps run at the slower tier. The
  hierarchical all-reduce (`HIERARCHICAL`: ring reduce-scatter inside each node, ring all-reduce
  of each rank's shard across nodes, ring all-gather inside the node; node sizes may differ)
  moves 2(k-1)/k n per rank on the intra tier and 2(m-1)/m n per node NIC on the inter tier
  (`hierarchical_traffic`).
- S parameter servers with incast: each server owns 1/S of the model; in a synchronous step
  the N workers' pushes all converge on each server's link (N x model/S in, then N x model/S
  out: the 2N/S models per server link the thesis's PS charges), and a worker sends one push
  and one pull message per server. Servers on their own nodes (default) or co-located, one per
  worker node (BytePS's S = N arrangement). Incast is charged as bytes serialised through the
  server's link; TCP incast collapse (retransmission timeouts) is not modelled.
- The overlapped PS (`ps_step(..., overlap=True)`): per-bucket push as soon as the bucket's
  gradients exist (during backward), its pull pipelined with the next bucket's push (a
  full-duplex link: pushes use the server's inbound direction, pulls its outbound one).
  Strategy `ps_overlap` (S separate servers) and `ps_colocated` (S = N, one server per worker,
  co-located) register these (step_model "ps_overlap_step" / "ps_colocated_step").
- Links loaded both ways (`Link.duplex`, set for emulated cells only: `cells.duplex_share`): on
  the tbf-shaped veth links a direction whose reverse carries data too moves less payload than
  GOODPUT, the reverse flows' ACKs queueing behind its data in the same tbf queue; this host's
  `netem --calibrate` loaded ring (a flow each way on every link) held 0.868 of the rate at
  100 Mbit/s, offload on, against 0.956 one way. Charged where both directions carry data at
  once: every all-reduce step but the simplex algorithms' (`SIMPLEX_ALGORITHMS`), the
  overlapped PS's pushes while pulls run and pulls while pushes run, every co-located phase;
  never the naive PS's push-then-pull phases. Issue 21, item 5: the settings-alone ring error
  on the reference cells fell from 8 % to 3 % with it, and the fitted per-message cost, which
  had stood in for it, from 8.3 to 1.3 ms. Not charged (no parameter-free form): TCP sharing
  a bottleneck unequally among its flows, which the overlapped PS's per-bucket wait for every
  worker's push turns into idle pull time (its workers end 0.4-6.7 s apart on shi2019, where
  equal sharing ends them together), and host contention (`contention.py`). Measured by
  `netem --fan` (results/netem/README.md): a server's link stays full (0.89-0.96 of the rate
  each way at 1-6 flows), but 4-6 incoming flows share it 6-137x unequally (one FIFO queue).
- Sharded data parallelism (`sharded_step`: zero1, zero2, zero3, fsdp): a ring reduce-scatter
  and a ring all-gather per unit, (p-1)/p of the unit's bytes and p-1 messages each, so ZeRO-1
  and -2 move a ring all-reduce's volume (2(p-1)/p Psi) and ZeRO-3 / FSDP 1.5x that (the
  backward all-gather again). The study's ZeRO runs each collective inline (stage 2's
  reduce-scatter inside the backward hook, stage 3's gathers before each module): nothing
  overlaps compute, so the step is compute + every collective. FSDP2's prefetching is not
  modelled (an upper bound for fsdp). FSDP is modelled with a ring reduce-scatter (NCCL's):
  on gloo its reduce-scatter is a whole all-reduce, 2.0x the ring's bytes in all
  (strategies/fsdp.py), so the model under-counts FSDP cells measured on gloo.

Everything here is analytic: label what it predicts "analytic" or "projected".
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ddlstudy.analysis.costmodel.alphabeta import terms
from ddlstudy.collectives.registry import analytic_traffic
from ddlstudy.network.profiles import HEADER_BYTES, MTU, PROFILES
from ddlstudy.registry import LiveNames
from ddlstudy.strategies import BACKWARD_SHARE
from ddlstudy.strategies.registry import STRATEGIES, get_strategy, servers_for

# Units: a StepTime is in the seconds of whatever clock the inputs are in. `predict_cell` works in
# *emulated* seconds (what an emulated run measures: compute stretched by 1/scale, links at
# rate x scale, host work in host seconds); x scale gives cluster-equivalent seconds, the unit of
# `images_per_sec_cluster`. `project_step` works in cluster seconds directly (scale 1, the
# profile's real latency added).

# Payload per wire byte on a shaped link: tbf meters whole Ethernet frames, of which TCP carries
# MTU - (IP 20 + TCP 20 + timestamps 12) bytes of each MTU + 14 (Ethernet header).
GOODPUT = (MTU - (HEADER_BYTES - 14)) / (MTU + 14)
# Which strategies the step model covers, and how: each registry entry names its step function
# (StrategySpec.step_model); `unmodelled()` says which it cannot model and why.
STEP_STRATEGIES = LiveNames(lambda: (s.name for s in STRATEGIES.values() if s.step_model))
# Strategies whose server count is a choice the projections sweep (S = 1, ..., S = N).
PS_STEP = LiveNames(lambda: (s.name for s in STRATEGIES.values()
                             if s.step_model in ("ps_step", "ps_overlap_step")))
STEP_MODELS = ("allreduce_step", "ps_step", "ps_overlap_step", "ps_colocated_step",
               "sharded_step")
# All-reduce algorithms whose every step sends and receives at once (each link loaded both
# ways, `Link.beta_duplex`); the rest ("ps": gather then broadcast, "tree": reduce up then
# broadcast down) load one direction of a link at a time.
SIMPLEX_ALGORITHMS = frozenset({"ps", "tree"})
# The two-tier all-reduce; not a registered algorithm (its code is the collectives layer's), so
# the step model composes it from the ring's terms and traffic.
HIERARCHICAL = "hierarchical"


def unmodelled() -> dict[str, str]:
    """Registered strategies the step model does not cover, each with the reason."""
    return {s.name: f"no step model: {s.name} registers step_model=None"
            + (f" ({s.framework}'s own scheduling is not modelled)" if s.framework else "")
            for s in STRATEGIES.values() if not s.step_model}


@dataclass(frozen=True)
class Constants:
    """The few per-host constants the step model fits (everything else is given).

    link_factor: measured / nominal wire time (1 = the shaped rate x GOODPUT exactly);
    host_s_per_byte: host memory work per byte touched (packing, reductions, the optimizer
    step, copying weights in); overhead_s: fixed seconds per step (engine call, barriers);
    host_s_per_message: the host's own cost of each message on the critical path (a pipelined
    ring's 1 MiB segments each pay a Python send/receive/reduce, during which the link idles).
    """

    link_factor: float = 1.0
    host_s_per_byte: float = 1e-9
    overhead_s: float = 0.0
    host_s_per_message: float = 0.0

    def to_cluster(self, scale: float) -> Constants:
        """The same host, its time expressed in cluster-equivalent seconds (x scale)."""
        return replace(self, host_s_per_byte=self.host_s_per_byte * scale,
                       overhead_s=self.overhead_s * scale,
                       host_s_per_message=self.host_s_per_message * scale)


# Nothing fitted: the configuration alone (links at their rate x goodput, no host costs).
SETTINGS_ALONE = Constants(link_factor=1.0, host_s_per_byte=0.0, overhead_s=0.0,
                           host_s_per_message=0.0)


@dataclass(frozen=True)
class StepTime:
    """One step's critical path split into what the model fits: total = compute_s + latency_s
    + link_factor x wire_s + host_s_per_byte x host_bytes + host_s_per_message x messages
    + overhead_s."""

    compute_s: float
    latency_s: float
    wire_s: float
    host_bytes: float
    messages: float = 0.0

    def total(self, c: Constants) -> float:
        """Seconds of the step under constants `c`."""
        return (self.compute_s + self.latency_s + c.link_factor * self.wire_s
                + c.host_s_per_byte * self.host_bytes + c.host_s_per_message * self.messages
                + c.overhead_s)

    def __add__(self, other: StepTime) -> StepTime:
        return StepTime(self.compute_s + other.compute_s, self.latency_s + other.latency_s,
                        self.wire_s + other.wire_s, self.host_bytes + other.host_bytes,
                        self.messages + other.messages)


ZERO = StepTime(0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Link:
    """A full-duplex link: rate (bit/s on the wire), one-way latency (s) and the payload share
    of the wire (GOODPUT for TCP over Ethernet; 1.0 for PCIe, NVLink, RDMA: their rates are
    quoted as payload rates here). duplex: the payload share while the link's other direction
    carries data too (None: goodput). Set for emulated cells only (`cells.duplex_share`): on
    the tbf-shaped veth links a direction whose reverse is loaded carries less than goodput,
    the reverse flows' ACKs waiting in that direction's queue behind its data."""

    rate_bps: float
    latency_s: float = 0.0
    goodput: float = GOODPUT
    duplex: float | None = None

    @property
    def beta(self) -> float:
        """Seconds per payload byte."""
        return 8.0 / (self.rate_bps * self.goodput)

    @property
    def beta_duplex(self) -> float:
        """Seconds per payload byte while both directions carry data."""
        return 8.0 / (self.rate_bps * (self.duplex or self.goodput))


@dataclass(frozen=True)
class Tiers:
    """Where the workers sit: `gpus_per_node` workers per node (or explicit, possibly uneven,
    `node_sizes`), `intra` between GPUs of one node (per GPU, per direction), and each node's
    NIC(s) on the flat link passed beside it (all of a node's NICs together)."""

    gpus_per_node: int = 1
    intra: Link | None = None
    node_sizes: tuple[int, ...] | None = None

    def nodes(self, n: int) -> tuple[int, ...]:
        """Workers per node for n workers: explicit node_sizes (must sum to n), else full nodes
        of gpus_per_node and the remainder on a last, smaller node."""
        if self.node_sizes is not None:
            if sum(self.node_sizes) != n or min(self.node_sizes) < 1:
                raise ValueError(f"node_sizes {self.node_sizes} do not place {n} workers")
            return tuple(self.node_sizes)
        k = max(1, int(self.gpus_per_node))
        return tuple([k] * (n // k) + ([n % k] if n % k else []))

    def intra_link(self) -> Link:
        """The intra-node link; ValueError when nodes hold several GPUs and none is given."""
        if self.intra is None:
            raise ValueError("gpus_per_node > 1 needs an intra-node link (Tiers.intra)")
        return self.intra


FLAT = Tiers()


def profile_link(profile: str, scale: float = 1.0, latency_s: float | None = None) -> Link:
    """A netem profile's link at `scale`; latency the profile's unless given (emulation adds
    none, so validation passes 0)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown network profile {profile!r}; valid: {', '.join(PROFILES)}")
    p = PROFILES[profile]
    return Link(p.rate_bps * scale, p.latency_s if latency_s is None else latency_s)


@functools.lru_cache(maxsize=64)
def gradient_bytes(model: str, shape: str = "cifar") -> tuple[int, ...]:
    """Bytes of each trainable parameter's float32 gradient, in registration order (built on
    the meta device: no memory, no init cost)."""
    import torch

    from ddlstudy.workload.models import build_model

    with torch.device("meta"):
        net = build_model(model, shape)
    return tuple(p.numel() * 4 for p in net.parameters() if p.requires_grad)


def bucket_layout(sizes: Sequence[int], bucket_mb: float) -> list[tuple[int, int]]:
    """(bytes, index of its last gradient in backward order) per bucket, as
    strategies.make_buckets groups them (reverse parameter order, greedy up to bucket_mb;
    bucket_mb 0: one bucket per gradient)."""
    cap = int(bucket_mb * 2**20)
    buckets: list[list[int]] = []
    size = 0
    for i, nbytes in enumerate(reversed(sizes)):
        if not buckets or size + nbytes > cap and size > 0:
            buckets.append([0, i])
            size = 0
        buckets[-1][0] += nbytes
        buckets[-1][1] = i
        size += nbytes
    return [(b, last) for b, last in buckets]


# ----------------------------------------------------------------------------- tiers
def hierarchical_traffic(nbytes: int, node_sizes: Sequence[int],
                         rank: int) -> dict[str, tuple[int, int]]:
    """(sent, received) bytes of `rank` on each tier in the hierarchical all-reduce, from its
    structure: ring reduce-scatter + all-gather in the node (the ring's 2(k-1)/k n), the ring
    all-reduce of the rank's 1/k shard across the m nodes (2(m-1)/m n/k). Ranks are numbered
    node by node. Exact when n divides by every k and m; within an element per message else."""
    if not 0 <= rank < sum(node_sizes):
        raise ValueError(f"rank {rank} outside {sum(node_sizes)} ranks")
    node, local = 0, rank
    while local >= node_sizes[node]:
        local -= node_sizes[node]
        node += 1
    k, m = node_sizes[node], len(node_sizes)
    intra = analytic_traffic("ring", nbytes, k, local) if k > 1 else (0, 0)
    inter = analytic_traffic("ring", nbytes // k, m, node) if m > 1 else (0, 0)
    return {"intra": tuple(intra), "inter": tuple(inter)}


def node_nic_traffic(nbytes: int, node_sizes: Sequence[int], node: int) -> tuple[int, int]:
    """(sent, received) bytes through one node's NIC(s) in the hierarchical all-reduce: the sum
    of its ranks' inter-node traffic (2(m-1)/m n whatever the node's size)."""
    first = sum(node_sizes[:node])
    per = [hierarchical_traffic(nbytes, node_sizes, first + j)["inter"]
           for j in range(node_sizes[node])]
    return sum(s for s, _ in per), sum(r for _, r in per)


def _collective(algorithm: str, nbytes: float, n: int, link: Link,
                tiers: Tiers = FLAT) -> StepTime:
    """One all-reduce of nbytes over n workers on the critical path (compute_s 0)."""
    nodes = tiers.nodes(n)
    if algorithm == HIERARCHICAL:
        return _hierarchical(nbytes, nodes, link, tiers)
    a, b, g = terms(algorithm, nbytes, n)
    beta = link.beta if algorithm in SIMPLEX_ALGORITHMS else link.beta_duplex
    if len(nodes) == n:  # one GPU per node: the flat link only (the emulated cells)
        return StepTime(0.0, a * link.latency_s, b * beta, g, a)
    intra = tiers.intra_link()
    if len(nodes) == 1:  # one node: the intra tier only
        return StepTime(0.0, a * intra.latency_s, b * intra.beta, g, a)
    # a flat ring placed node by node: one flow per direction through each NIC and each intra
    # link, so every step waits for the slower tier
    return StepTime(0.0, a * max(link.latency_s, intra.latency_s),
                    b * max(beta, intra.beta), g, a)


def _hierarchical(nbytes: float, nodes: Sequence[int], link: Link, tiers: Tiers) -> StepTime:
    """Ring reduce-scatter in each node, ring all-reduce of each rank's shard across nodes (the
    node's k shards share its NIC: 2(m-1)/m n through it), ring all-gather in the node. The
    slowest (largest) node sets the intra phases; the smallest node's ranks reduce the most."""
    kmax, kmin, m = max(nodes), min(nodes), len(nodes)
    out = ZERO
    if kmax > 1:
        intra = tiers.intra_link()
        frac = (kmax - 1) / kmax
        phase = StepTime(0.0, (kmax - 1) * intra.latency_s, frac * nbytes * intra.beta, 0.0,
                         kmax - 1)
        out = out + phase + phase + StepTime(0.0, 0.0, 0.0, frac * nbytes, 0.0)
    if m > 1:
        a, b, g = terms("ring", nbytes, m)  # linear in bytes: k shards of n/k = one n
        out = out + StepTime(0.0, a * link.latency_s, b * link.beta_duplex, g / kmin, a)
    return out


# ----------------------------------------------------------------------------- strategies
def allreduce_step(sizes: Sequence[int], n: int, link: Link, compute_s: float, c: Constants,
                   algorithm: str = "ring_pipelined", bucket_mb: float = 25.0,
                   overlap: bool = True, tiers: Tiers = FLAT) -> StepTime:
    """Bucketed all-reduce: buckets reduced one after another on a communication thread, each
    launched when its last gradient is ready (backward = BACKWARD_SHARE of compute, gradients
    ready at even steps in reverse order, as replay does) or, without overlap, after backward.
    Then unpack + optimizer step over the model (2 x model bytes of host work)."""
    model_bytes = float(sum(sizes))
    forward = compute_s * (1 - BACKWARD_SHARE)
    count = len(sizes)
    # the chain of buckets ending at `end`: its start (compute), latency, wire, host, messages
    end, path = 0.0, ZERO
    no_overhead = replace(c, overhead_s=0.0)
    for nbytes, last in bucket_layout(sizes, bucket_mb) if n > 1 else []:
        ready = forward + compute_s * BACKWARD_SHARE * (last + 1) / count if overlap else compute_s
        one = _collective(algorithm, nbytes, n, link, tiers)
        if ready >= end:  # the link was idle: the chain restarts at this bucket's ready time
            path = replace(one, compute_s=ready)
        else:
            path = path + one
        end = max(ready, end) + one.total(no_overhead)
    if end <= compute_s:  # every bucket finished under backward (or one worker)
        path = StepTime(compute_s, 0.0, 0.0, 0.0, 0.0)
    return replace(path, host_bytes=path.host_bytes + 2 * model_bytes)


def variable_placement(sizes: Sequence[int], servers: int) -> tuple[int, ...]:
    """Server of each gradient (registration order) when a framework places whole variables:
    each on the server least loaded so far by bytes, ties to the lowest index (tf_cnn_benchmarks'
    ParamServerDeviceSetter and TF's GreedyLoadBalancingStrategy with byte_size_load_fn). A
    large variable lands whole on one server: VGG16's first fully connected layer (103 M
    parameters, 74 % of the model) makes its server the busiest whatever S is."""
    return _variable_placement(tuple(sizes), servers)


@functools.lru_cache(maxsize=64)
def _variable_placement(sizes: tuple[int, ...], servers: int) -> tuple[int, ...]:
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    load = [0] * servers
    out = []
    for nbytes in sizes:
        j = min(range(servers), key=lambda i: (load[i], i))
        load[j] += nbytes
        out.append(j)
    return tuple(out)


def server_shares(sizes: Sequence[int], servers: int, placement: str = "even",
                  members: Sequence[int] | None = None) -> list[float]:
    """Bytes of the gradients `members` (indices into `sizes`, registration order; default all)
    each server owns. placement "even": every server 1/S of each byte (the study's PS splits the
    flat gradient); "variable": whole variables as `variable_placement` puts them."""
    idx = range(len(sizes)) if members is None else members
    if placement == "even":
        return [sum(sizes[i] for i in idx) / servers] * servers
    if placement != "variable":
        raise ValueError(f"unknown placement {placement!r}; valid: even, variable")
    where = variable_placement(sizes, servers)
    shares = [0.0] * servers
    for i in idx:
        shares[where[i]] += sizes[i]
    return shares


def _ps_phase(bucket: float, n: int, servers: int, link: Link, tiers: Tiers,
              colocated: bool, duplex: bool = False,
              shares: Sequence[float] | None = None) -> float:
    """Seconds per byte-direction of one push (or pull) of `bucket` bytes by every worker: the
    busiest link direction. Separate servers: a server's link carries N x its share (incast), a
    worker node's NIC k x bucket. Co-located (one server on each of the first S worker nodes):
    a hosting node receives (N - k) x its servers' share from the other nodes' workers and
    sends its own k workers' k x (bucket - that share); a node without a server sends k x
    bucket. shares: bytes of the bucket each server owns (default bucket/S each). duplex: the
    busiest direction's reverse carries data meanwhile (`Link.beta_duplex`)."""
    nodes = tiers.nodes(n)
    shares = [bucket / servers] * servers if shares is None else list(shares)
    if len(shares) != servers:
        raise ValueError(f"{len(shares)} shares for {servers} servers")
    if not colocated:
        busiest = max(n * max(shares), max(nodes) * bucket)
    else:
        # servers per node: one per worker when S = N (a node of k workers hosts k servers),
        # else one on each of the first S nodes
        if servers == n:
            hosted = list(nodes)
        elif servers <= len(nodes):
            hosted = [1] * servers + [0] * (len(nodes) - servers)
        else:
            raise ValueError(f"{servers} co-located servers need {servers} nodes (or one per "
                             f"worker, S = N = {n}), have {len(nodes)}")
        busiest, first = 0.0, 0
        for k, s in zip(nodes, hosted, strict=True):
            own = sum(shares[first:first + s])
            first += s
            busiest = max(busiest, (n - k) * own, k * (bucket - own))
    return busiest * (link.beta_duplex if duplex else link.beta)


def ps_step(sizes: Sequence[int], n: int, servers: int, link: Link, compute_s: float,
            c: Constants, sync: bool = True, *, overlap: bool = False, colocated: bool = False,
            bucket_mb: float = 25.0, tiers: Tiers = FLAT, placement: str = "even") -> StepTime:
    """Parameter server, S servers each owning 1/S of the model (placement "even", the study's
    PS) or whole variables (placement "variable", TensorFlow's: `variable_placement`). Sync:
    every worker pushes after backward (the thesis's naive PS), each server's link carries
    N x its share in and then N x its share out (incast; a worker's own link the whole model
    each way), the server sums N shards and steps; a worker sends one push and one pull
    message per server (2S latencies). overlap=True: per-bucket push during backward, pulls
    pipelined behind the pushes. Async: each server serves one worker at a time, so a worker's
    step is the longer of its own cycle and a server's turn round all N workers."""
    m = float(sum(sizes))
    totals = server_shares(sizes, servers, placement)
    shard = max(totals)  # the busiest server's bytes
    worker_host = 2 * m  # pack gradients, copy new weights in
    server_host = n * shard + shard  # sum N gradient shards, SGD on the shard
    if sync and overlap:
        return _ps_overlapped(sizes, n, servers, link, compute_s, c, colocated, bucket_mb,
                              tiers, placement, shard)
    if sync:
        wire = 2 * _ps_phase(m, n, servers, link, tiers, colocated, shares=totals)
        return StepTime(compute_s, 2 * servers * link.latency_s, wire,
                        worker_host + server_host, 2 * servers)
    own = StepTime(compute_s, 2 * servers * link.latency_s, 2 * m * link.beta,
                   worker_host + shard, 2 * servers)
    turn = StepTime(0.0, 2 * n * link.latency_s, 2 * n * shard * link.beta, n * 2 * shard,
                    2 * n)
    return own if own.total(c) >= turn.total(c) else turn


def _ps_overlapped(sizes: Sequence[int], n: int, servers: int, link: Link, compute_s: float,
                   c: Constants, colocated: bool, bucket_mb: float, tiers: Tiers,
                   placement: str, busiest: float) -> StepTime:
    """Per-bucket push when the bucket's gradients exist, the servers reduce it, its pull runs
    on the other direction of the links while later buckets push (two chains: separate servers
    receive pushes and send pulls on different directions). Co-located servers use both
    directions of every NIC in each push and each pull, so there pushes and pulls share one
    chain. The critical path is whichever chain of (start, latencies, bytes, host work) ends
    last. Both directions of the busiest NIC carry data (`Link.beta_duplex`) in every phase
    but, with separate servers, the first bucket's push (no pull yet) and the last bucket's
    pull (every push done). placement "variable": each bucket's bytes go to the servers its
    variables sit on (`server_shares`), so a bucket of one large variable loads one server.
    busiest: the busiest server's bytes of the whole model (its SGD step), from `ps_step`."""
    m = float(sum(sizes))
    forward = compute_s * (1 - BACKWARD_SHARE)
    count = len(sizes)
    no_overhead = replace(c, overhead_s=0.0)
    push_end, push_path = 0.0, ZERO
    pull_end, pull_path = 0.0, ZERO
    layout = bucket_layout(sizes, bucket_mb)
    first = 0
    for i, (nbytes, last) in enumerate(layout):
        # this bucket's gradients, backward order first..last -> registration indices
        members = [count - 1 - j for j in range(first, last + 1)]
        first = last + 1
        shares = server_shares(sizes, servers, placement, members)
        ready = forward + compute_s * BACKWARD_SHARE * (last + 1) / count
        push_wire = _ps_phase(nbytes, n, servers, link, tiers, colocated, colocated or i > 0,
                              shares)
        pull_wire = _ps_phase(nbytes, n, servers, link, tiers, colocated,
                              colocated or i < len(layout) - 1, shares)
        push = StepTime(0.0, servers * link.latency_s, push_wire, n * max(shares), servers)
        pull = StepTime(0.0, servers * link.latency_s, pull_wire, 0.0, servers)
        push_path = (replace(push, compute_s=ready) if ready >= push_end
                     else push_path + push)
        push_end = max(ready, push_end) + push.total(no_overhead)
        pull_path = push_path + pull if push_end >= pull_end else pull_path + pull
        pull_end = max(push_end, pull_end) + pull.total(no_overhead)
        if colocated:  # a node's NIC carries pushes (and pulls) both ways: one shared chain
            push_end, push_path = pull_end, pull_path
    path = pull_path if pull_end > compute_s else StepTime(compute_s, 0.0, 0.0, 0.0, 0.0)
    # then unpack the pulled weights and step: the worker's 2 x model bytes, the servers' SGD
    return replace(path, host_bytes=path.host_bytes + 2 * m + busiest)


def module_bytes(model: str, shape: str = "cifar") -> tuple[int, ...]:
    """Bytes of each module's own float32 parameters (modules holding any), in registration
    order: ZeRO-3's and FSDP's units (built on the meta device)."""
    import torch

    from ddlstudy.workload.models import build_model

    with torch.device("meta"):
        net = build_model(model, shape)
    out = []
    for m in net.modules():
        own = sum(p.numel() for p in m.parameters(recurse=False) if p.requires_grad)
        if own:
            out.append(own * 4)
    return tuple(out)


def sharded_step(sizes: Sequence[int], n: int, link: Link, compute_s: float, stage: int = 1,
                 bucket_mb: float = 25.0, tiers: Tiers = FLAT,
                 units: Sequence[int] | None = None) -> StepTime:
    """ZeRO stage 1 / 2 / 3 (and FSDP as stage 3): per unit a ring reduce-scatter and a ring
    all-gather ((p-1)/p of its bytes, p-1 messages each: together one ring all-reduce's
    terms), stage 3 one more all-gather (1.5x the bytes and messages). Units: gradient buckets
    (stages 1-2) or modules (`units`, stage 3; default each gradient). No overlap with compute
    (see the module docstring). Host work: pack the gradients, reduce, step the shard, unpack
    (2 x model bytes + the reduction)."""
    if stage not in (1, 2, 3):
        raise ValueError(f"ZeRO stage must be 1, 2 or 3, got {stage}")
    model_bytes = float(sum(sizes))
    if n == 1:
        return StepTime(compute_s, 0.0, 0.0, 2 * model_bytes, 0.0)
    if stage == 3:
        parts = list(units) if units is not None else list(sizes)
    else:
        parts = [b for b, _ in bucket_layout(sizes, bucket_mb)]
    path = StepTime(compute_s, 0.0, 0.0, 0.0, 0.0)
    for nbytes in parts:
        ring = _collective("ring", nbytes, n, link, tiers)  # reduce-scatter + all-gather
        if stage == 3:  # the backward all-gather again: half a ring's latency and wire
            ring = replace(ring, latency_s=1.5 * ring.latency_s, wire_s=1.5 * ring.wire_s,
                           messages=1.5 * ring.messages)
        path = path + ring
    return replace(path, host_bytes=path.host_bytes + 2 * model_bytes)


ZERO_STAGE = {"zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3}


def sharded_traffic(nbytes: int, n: int, stage: int) -> int:
    """Bytes one rank sends (= receives) per step in ZeRO stage 1-3 over a ring of n: 2(n-1)/n
    of the model for stages 1-2, 3(n-1)/n for stage 3 (what the strategies count)."""
    if n < 2:
        return 0
    return int((3 if stage == 3 else 2) * (n - 1) * nbytes / n)


def predict_step(strategy: str, model: str, workers: int, link: Link, compute_s: float,
                 c: Constants = Constants(), *, servers: int | None = None,
                 algorithm: str = "ring_pipelined", bucket_mb: float = 25.0,
                 overlap: bool = True, shape: str = "cifar",
                 sizes: Sequence[int] | None = None, tiers: Tiers = FLAT,
                 ps_overlap: bool = False, colocated: bool = False,
                 placement: str = "even") -> StepTime:
    """One step of `strategy` on `workers` workers: compute_s of forward + backward per worker
    (the replay table's time, in this clock), gradients of `model` (or explicit `sizes`).

    link: each node's NIC(s); tiers: GPUs per node and the intra-node link (default: one GPU
    per node). PS strategies: ps_overlap (per-bucket push/pull overlapped with backward) and
    colocated (servers on worker nodes) pick the fair PS; the defaults are the thesis's.
    placement: how PS servers split the model ("even", the study's; "variable", TensorFlow's
    whole variables)."""
    if strategy not in STEP_STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {', '.join(STEP_STRATEGIES)}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    explicit = sizes is not None
    sizes = tuple(sizes) if sizes is not None else gradient_bytes(model, shape)
    spec = get_strategy(strategy)
    if spec.step_model == "sharded_step":
        stage = ZERO_STAGE.get(strategy, 3)
        units = None if explicit or stage < 3 else module_bytes(model, shape)
        return sharded_step(sizes, workers, link, compute_s, stage, bucket_mb, tiers, units)
    if spec.step_model == "ps_colocated_step":  # S = N, one server per worker, on its node
        return ps_step(sizes, workers, workers, link, compute_s, c, overlap=True,
                       colocated=True, bucket_mb=bucket_mb, tiers=tiers)
    if spec.step_model == "ps_overlap_step":
        ps_overlap = True
    if spec.step_model == "allreduce_step":
        # Not algorithm-aware (ddp): the library's all-reduce, always overlapped with backward.
        aware = spec.algorithm_aware
        return allreduce_step(sizes, workers, link, compute_s, c,
                              algorithm if aware else "reference", bucket_mb,
                              overlap or not aware, tiers)
    s = servers_for(strategy, servers)
    return ps_step(sizes, workers, s, link, compute_s, c, sync=spec.sync, overlap=ps_overlap,
                   colocated=colocated, bucket_mb=bucket_mb, tiers=tiers, placement=placement)


def project_step(strategy: str, model: str, workers: int, profile: str, compute_s: float,
                 c: Constants = Constants(), latency_s: float | None = None,
                 **kw: object) -> float:
    """Cluster seconds per step on a real `profile` network (its latency unless given)."""
    return predict_step(strategy, model, workers, profile_link(profile, 1.0, latency_s),
                        compute_s, c, **kw).total(c)  # type: ignore[arg-type]
