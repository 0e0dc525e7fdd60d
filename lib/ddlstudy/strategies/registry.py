"""The one registry of strategies: name -> `StrategySpec` (its class and its properties).

Everything that needs to know about strategies - params validation, the CLI's choices, the
trainer's branches (servers, staleness, bytes source, which driver), the cost model's step
function, tests and docs - asks the registry instead of listing names. Torch-free: an entry
names its class as "module:attr" (imported when a run builds it), so params and its CLI read the
registry cheaply. Adding a strategy is one class plus one `register_strategy` call
(docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ddlstudy.registry import Registry, resolve

if TYPE_CHECKING:
    from torch import nn

    from ddlstudy.strategies.base import Strategy

FAMILIES = ("single", "ps", "allreduce")
BYTES_SOURCES = ("counted", "analytic")
# Keywords make_strategy passes only to strategies that declare them in `options`.
OPTIONS = ("algorithm", "bucket_mb", "overlap", "group", "gpus_per_node")


@dataclass(frozen=True)
class StrategySpec:
    """One strategy and what the rest of ddlstudy needs to know about it.

    factory: the Strategy class (or a callable returning one), or "module:attr" imported on
    first use (frameworks: their imports are heavy), or None when the strategy runs under its
    own driver (`driver`, "module:function" with trainer.train's signature).
    family: single / ps / allreduce (how gradients meet); framework: None for ddlstudy's own,
    else the framework's name. default_servers: server processes when the config names none
    (0: the strategy has no servers); servers_configurable: a config's `servers` sets the count
    (else the default is the count). options: which of OPTIONS its constructor takes
    (`algorithm` makes it algorithm-aware). bytes_source: "counted" (bytes observed on the wire
    by ddlstudy) or "analytic" (computed from the buffer sizes). records_staleness: its servers
    record update staleness (async). step_model: the costmodel function that predicts its step
    ("allreduce_step", "ps_step", "ps_overlap_step", "ps_colocated_step", "sharded_step"),
    None if the cost model cannot model it. extra_engines:
    engines beyond workers + servers (a TF chief). missing: "" when its requirements are
    installed, else one line naming the fix. warmup_min_steps: how many of its first steps are
    not representative of its steady state (PowerSGD all-reduces plain gradients before it
    compresses): every run of it keeps at least that many steps in the untimed warm-up
    (`TrainConfig` raises `warmup_steps` to it, whoever builds the config).
    colocated_servers: a parameter server whose servers run inside the workers (S = N, each
    serving 1/N: BytePS's argument); its traffic is the ring's, hence family allreduce, but it
    is a PS design (`ps_design`) when chapter 03 picks the best PS.
    """

    name: str
    factory: Callable[..., Strategy] | str | None
    family: str
    summary: str = ""
    framework: str | None = None
    sync: bool = True
    default_servers: int = 0
    servers_configurable: bool = False
    options: tuple[str, ...] = ()
    bytes_source: str = "counted"
    records_staleness: bool = False
    step_model: str | None = None
    driver: str | None = None
    extra_engines: int = 0
    missing: Callable[[], str | None] | None = None
    warmup_min_steps: int = 0
    colocated_servers: bool = False

    def __post_init__(self) -> None:
        problems = []
        if self.family not in FAMILIES:
            problems.append(f"family {self.family!r} not in {FAMILIES}")
        if self.bytes_source not in BYTES_SOURCES:
            problems.append(f"bytes_source {self.bytes_source!r} not in {BYTES_SOURCES}")
        if bad := [o for o in self.options if o not in OPTIONS]:
            problems.append(f"options {bad} not in {OPTIONS}")
        if (self.factory is None) == (self.driver is None):
            problems.append("give exactly one of factory (a Strategy) and driver (own driver)")
        if self.family == "ps" and self.default_servers < 1:
            problems.append("a ps strategy needs default_servers >= 1")
        if self.servers_configurable and not self.default_servers:
            problems.append("servers_configurable needs default_servers >= 1")
        if self.family != "ps" and self.default_servers:
            problems.append("only ps strategies have servers")
        if (isinstance(self.warmup_min_steps, bool) or not isinstance(self.warmup_min_steps, int)
                or self.warmup_min_steps < 0):
            problems.append(f"warmup_min_steps must be an integer >= 0, got "
                            f"{self.warmup_min_steps!r}")
        if problems:
            raise ValueError(f"strategy {self.name!r}: " + "; ".join(problems))

    @property
    def kind(self) -> str:
        """single / ps / allreduce, or framework for one run by Horovod or TensorFlow."""
        return "framework" if self.framework else self.family

    @property
    def needs_servers(self) -> bool:
        return self.default_servers > 0

    @property
    def ps_design(self) -> bool:
        """A parameter server, on server nodes of its own or co-located with the workers."""
        return self.family == "ps" or self.colocated_servers

    @property
    def algorithm_aware(self) -> bool:
        return "algorithm" in self.options

    def why_missing(self) -> str:
        """'' when this host can run the strategy, else one line naming the fix."""
        return (self.missing() or "") if self.missing is not None else ""

    def build(self, model: nn.Module, **kw: Any) -> Strategy:
        """The Strategy object (imports a lazy factory on first use)."""
        if self.factory is None:
            raise ValueError(f"{self.name} runs under its own driver ({self.driver}), "
                             "not as a Strategy object: use trainer.train")
        return resolve(self.factory)(model, **kw)


STRATEGIES: Registry[StrategySpec] = Registry("strategy", plugins=("ddlstudy.frameworks",))
register_strategy = STRATEGIES.register  # add a strategy under its name (once)
unregister_strategy = STRATEGIES.unregister  # tests and the docs' example clean up toys


def get_strategy(name: str) -> StrategySpec:
    """The registered spec, or a ValueError naming the valid strategies."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; valid: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


def strategy_names(**props: Any) -> list[str]:
    """Registered names, in registration order, whose spec attributes equal `props`
    (e.g. strategy_names(family="ps"), strategy_names(framework="tensorflow"))."""
    return [s.name for s in STRATEGIES.values()
            if all(getattr(s, k) == v for k, v in props.items())]


def warmup_min_steps(strategy: str) -> int:
    """The untimed warm-up steps every run of `strategy` needs at least (its spec's
    `warmup_min_steps`); 0 for a name the registry does not know (validate refuses it)."""
    spec = STRATEGIES.get(strategy) if isinstance(strategy, str) else None
    return spec.warmup_min_steps if spec is not None else 0


def servers_for(strategy: str, servers: int | None) -> int:
    """Server processes a strategy runs with: 0 unless it has servers; else its default."""
    spec = get_strategy(strategy)
    if not spec.needs_servers:
        return 0
    return spec.default_servers if servers is None else int(servers)


def arm_label(strategy: str, servers: object) -> str:
    """How tables and figures name a run's strategy: its registry name, or `name (S = k)` when
    it ran a server count other than its default (so runs of one server and of three are never
    pooled under one name). `servers` may be None / NaN (a run that records none)."""
    spec = STRATEGIES.get(strategy) if isinstance(strategy, str) else None
    try:
        count = int(servers)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return strategy
    if spec is None or not spec.servers_configurable or count == spec.default_servers:
        return strategy
    return f"{strategy} (S = {count})"


def arm_strategy(label: str) -> str:
    """The registry name behind an `arm_label` (`ps_overlap (S = 3)` -> `ps_overlap`)."""
    return label.split(" (S = ", 1)[0]


def driver_for(strategy: str) -> Callable[..., Any] | None:
    """The strategy's own driver (trainer.train's signature), None for Strategy objects."""
    spec = get_strategy(strategy)
    return resolve(spec.driver) if spec.driver else None


def make_strategy(name: str, model: nn.Module, *, rank: int = 0, workers: int = 1,
                  servers: int | None = None, **kw: Any) -> Strategy:
    """The strategy object for this rank (worker or server), with the model already on device.

    Keywords: lr, momentum, weight_decay, loss_fn, timeout_s, and the spec's `options`
    (allreduce: algorithm, bucket_mb, overlap, group; ddp: bucket_mb). Options a strategy does
    not declare are dropped, so one config serves every strategy.
    """
    from ddlstudy.strategies.base import Layout

    spec = get_strategy(name)
    layout = Layout(workers, servers_for(name, servers))
    if spec.family == "single" and workers != 1:
        raise ValueError(f"strategy {name} runs on one worker, got workers={workers}")
    kw = {k: v for k, v in kw.items() if k not in OPTIONS or k in spec.options}
    return spec.build(model, rank=rank, layout=layout, **kw)


def spec_table() -> list[dict[str, Any]]:
    """One row per registered strategy: the properties the rest of ddlstudy reads."""
    return [{"strategy": s.name, "kind": s.kind, "sync": "yes" if s.sync else "no",
             "servers": s.default_servers or "-", "options": ", ".join(s.options) or "-",
             "bytes": s.bytes_source, "staleness": "yes" if s.records_staleness else "-",
             "step model": s.step_model or "-", "min warm-up": s.warmup_min_steps or "-",
             "summary": s.summary}
            for s in STRATEGIES.values()]



# The built-in strategies, in the order tables list them; code in one file per family.
# Horovod and TensorFlow register from ddlstudy.frameworks, a plugin of STRATEGIES (loaded on
# the first read: the registry imports nothing above it).
register_strategy(StrategySpec(
    "single", "ddlstudy.strategies.single:Single", family="single",
    summary="one process, plain SGD: the reference every strategy must reproduce"))
register_strategy(StrategySpec(
    "ps_sync", "ddlstudy.strategies.ps:PSSync", family="ps", default_servers=1,
    step_model="ps_step", summary="push gradients, one server averages, pull weights"))
register_strategy(StrategySpec(
    "ps_async", "ddlstudy.strategies.ps:PSAsync", family="ps", default_servers=1, sync=False,
    records_staleness=True, step_model="ps_step",
    summary="the server applies each push as it arrives"))
register_strategy(StrategySpec(
    "ps_sharded", "ddlstudy.strategies.ps:PSSharded", family="ps", default_servers=2,
    servers_configurable=True,
    step_model="ps_step", summary="S servers, each owning 1/S of the parameters"))
register_strategy(StrategySpec(
    "allreduce", "ddlstudy.strategies.hierarchical:allreduce", family="allreduce",
    options=("algorithm", "bucket_mb", "overlap", "group", "gpus_per_node"),
    step_model="allreduce_step",
    summary="bucketed all-reduce with a ddlstudy.collectives algorithm, overlapped or not"))
register_strategy(StrategySpec(
    "ddp", "ddlstudy.strategies.ddp:DDP", family="allreduce", options=("bucket_mb",),
    bytes_source="analytic", step_model="allreduce_step",
    summary="torch DistributedDataParallel: the library reference"))
register_strategy(StrategySpec(
    "ps_overlap", "ddlstudy.strategies.ps_overlap:PSOverlap", family="ps", default_servers=1,
    servers_configurable=True, options=("bucket_mb",), step_model="ps_overlap_step",
    summary="per-bucket push during backward, pull pipelined with the next push; S servers"))
register_strategy(StrategySpec(
    "ps_colocated", "ddlstudy.strategies.ps_overlap:PSColocated", family="allreduce",
    options=("bucket_mb",), step_model="ps_colocated_step", colocated_servers=True,
    summary="ps_overlap with S = N servers co-located, each worker serving 1/N (BytePS)"))

def _lazy_missing(target: str) -> str | None:
    """A strategy's `missing` check named as "module:function", imported when asked (a
    partial of this pickles to the engines; a lambda would not)."""
    return resolve(target)()


register_strategy(StrategySpec(
    "zero1", "ddlstudy.strategies.zero:Zero1", family="allreduce", options=("bucket_mb",),
    step_model="sharded_step",
    summary="ZeRO stage 1: reduce-scatter gradients, sharded optimizer state, all-gather weights"))
register_strategy(StrategySpec(
    "zero2", "ddlstudy.strategies.zero:Zero2", family="allreduce", options=("bucket_mb",),
    step_model="sharded_step",
    summary="ZeRO stage 2: + gradients sharded (each bucket reduce-scattered during backward)"))
register_strategy(StrategySpec(
    "zero3", "ddlstudy.strategies.zero:Zero3", family="allreduce", step_model="sharded_step",
    summary="ZeRO stage 3: + parameters sharded, all-gathered per module in forward and backward"))
register_strategy(StrategySpec(
    "fsdp", "ddlstudy.strategies.fsdp:FSDP", family="allreduce", bytes_source="analytic",
    step_model="sharded_step", missing=partial(_lazy_missing, "ddlstudy.strategies.fsdp:missing"),
    summary="torch FSDP2 fully_shard per module (gloo on CPU): the library's ZeRO-3"))
register_strategy(StrategySpec(
    "ddp_fp16", "ddlstudy.strategies.compression:DDPFp16", family="allreduce",
    options=("bucket_mb",), bytes_source="analytic",
    summary="DDP, buckets all-reduced in float16 (torch's fp16_compress_hook)"))
register_strategy(StrategySpec(
    "ddp_bf16", "ddlstudy.strategies.compression:DDPBf16", family="allreduce",
    options=("bucket_mb",), bytes_source="analytic",
    missing=partial(_lazy_missing, "ddlstudy.strategies.compression:bf16_missing"),
    summary="DDP, buckets all-reduced in bfloat16 (torch's bf16_compress_hook)"))
# torch's powerSGD_hook all-reduces plain gradients for its first start_powerSGD_iter steps (2:
# its minimum with error feedback; compression.py hands it this): they are warm-up, or a run's
# bytes per step would count uncompressed all-reduces (2026-11-26's reference sitting, one
# warm-up step: ddp_powersgd1 at 1.06x the ring's bytes)
POWERSGD_PLAIN_STEPS = 2
register_strategy(StrategySpec(
    "ddp_powersgd1", "ddlstudy.strategies.compression:DDPPowerSGD1", family="allreduce",
    options=("bucket_mb",), bytes_source="analytic", warmup_min_steps=POWERSGD_PLAIN_STEPS,
    summary="DDP + PowerSGD rank 1 with error feedback (torch's powerSGD_hook)"))
register_strategy(StrategySpec(
    "ddp_powersgd2", "ddlstudy.strategies.compression:DDPPowerSGD2", family="allreduce",
    options=("bucket_mb",), bytes_source="analytic", warmup_min_steps=POWERSGD_PLAIN_STEPS,
    summary="DDP + PowerSGD rank 2 with error feedback (torch's powerSGD_hook)"))
register_strategy(StrategySpec(
    "ddp_powersgd4", "ddlstudy.strategies.compression:DDPPowerSGD4", family="allreduce",
    options=("bucket_mb",), bytes_source="analytic", warmup_min_steps=POWERSGD_PLAIN_STEPS,
    summary="DDP + PowerSGD rank 4 with error feedback (torch's powerSGD_hook)"))
register_strategy(StrategySpec(
    "ddp_topk1", "ddlstudy.strategies.compression:DDPTopK1", family="allreduce",
    options=("bucket_mb",), bytes_source="analytic",
    summary="DDP + top-k 1 % of each bucket (values + int32 indices all-gathered), error feedback"))
