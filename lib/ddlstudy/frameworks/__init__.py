"""The frameworks the papers measured, on the same engines: Horovod and TensorFlow.

- `horovod` (frameworks.horovod): a Strategy under the torch trainer; Horovod's gloo ring
  through hvd.DistributedOptimizer, started from the engines via Horovod's RendezvousServer;
  `horovod_fp16` the same with hvd.Compression.fp16.
  Built by scripts/build_horovod.sh (`make setup`).
- `tf_allreduce`, `tf_ps_sync`, `tf_ps_async` (frameworks.tf_strategies): TF's own
  MultiWorkerMirroredStrategy and ParameterServerStrategy with their own driver, writing the
  trainer's records; Keras twins of the torch models in frameworks.keras_models.

Registration: `_register` below puts them in ddlstudy.strategies' one registry (what params, the
CLI and TrainConfig validate against); a TF spec names `tf_strategies.train` as its own driver,
which `trainer.train` hands the run to.
"""

from __future__ import annotations

from functools import partial

from ddlstudy.strategies.registry import StrategySpec, register_strategy, strategy_names


def _missing(strategy: str) -> str | None:
    """`missing`, looked up when called (so a patched `missing` is the one asked)."""
    return missing(strategy)


def _register() -> None:
    """The framework strategies, in the one registry (ddlstudy.strategies.registry); built on
    use, so importing ddlstudy imports neither horovod nor tensorflow."""
    register_strategy(StrategySpec(
        "horovod", "ddlstudy.frameworks.horovod:Horovod", family="allreduce",
        framework="horovod", options=("bucket_mb",), bytes_source="analytic",
        missing=partial(_missing, "horovod"),
        summary="Horovod's gloo ring through hvd.DistributedOptimizer"))
    register_strategy(StrategySpec(
        "horovod_fp16", "ddlstudy.frameworks.horovod:HorovodFp16", family="allreduce",
        framework="horovod", options=("bucket_mb",), bytes_source="analytic",
        missing=partial(_missing, "horovod_fp16"),
        summary="horovod with hvd.Compression.fp16: gradients all-reduced in float16"))
    tf = dict(factory=None, driver="ddlstudy.frameworks.tf_strategies:train",
              framework="tensorflow", bytes_source="analytic")
    register_strategy(StrategySpec(
        "tf_ps_sync", family="ps", default_servers=1, extra_engines=1,
        missing=partial(_missing, "tf_ps_sync"), **tf,
        summary="TF synchronous parameter servers (between-graph replication)"))
    register_strategy(StrategySpec(
        "tf_ps_async", family="ps", default_servers=1, extra_engines=1, sync=False,
        records_staleness=True, missing=partial(_missing, "tf_ps_async"), **tf,
        summary="TF ParameterServerStrategy + ClusterCoordinator"))
    register_strategy(StrategySpec(
        "tf_allreduce", family="allreduce", missing=partial(_missing, "tf_allreduce"), **tf,
        summary="TF MultiWorkerMirroredStrategy, RING communication"))


def missing(strategy: str) -> str | None:
    """None when the strategy's framework is installed here, else one line naming the fix.

    Checked by module spec (no import: tensorflow takes seconds and memory in the driver);
    Horovod's compiled torch extension must be there, not just its Python package; the TF
    strategies need ddlstudy.cluster.loopback's shim built (or a C compiler to build it).
    """
    from importlib.util import find_spec

    def absent(module: str) -> bool:
        try:
            return find_spec(module) is None
        except ImportError:  # the parent package is missing
            return True

    if strategy in HOROVOD_STRATEGIES and absent("horovod.torch.mpi_lib_v2"):
        return (f"{strategy}: horovod is not installed (or built without torch); run `make setup` "
                "(scripts/build_horovod.sh builds Horovod 0.28.1 into wheels/)")
    if strategy in TF_STRATEGIES and absent("tensorflow"):
        return (f"{strategy} needs tensorflow, which is not installed; run `make setup` "
                "(it installs tensorflow-cpu, pinned in pyproject.toml)")
    if strategy in TF_STRATEGIES:  # TF's gRPC server binds 0.0.0.0 without the shim
        from ddlstudy.cluster import loopback

        path, why = loopback.available()
        if path is None:
            return f"{strategy} needs the loopback shim (TF listens on every interface): {why}"
    return None


def host_ip() -> str:
    """This engine's address, as ddlstudy.cluster.engines reports it (one implementation, there)."""
    from ddlstudy.cluster.engines import host_ip as cluster_host_ip

    return cluster_host_ip()


def free_port(tries: int = 200) -> int:
    """A TCP port free right now on this engine, for a TF task's gRPC server.

    TF needs every task's port in the cluster spec before any server starts, so the port is
    probed and released, then bound by TF seconds later. A bind(0) probe draws from the
    kernel's ephemeral range, the same range every connect() takes its source ports from and
    every other process's bind(0) probes draw from (other TF runs, torch stores, gRPC clients
    on this host), so the port could be reused in that window. Ports just below that range are
    never handed out implicitly: only a process naming one explicitly can take it.
    """
    import random
    import socket
    from contextlib import closing

    top = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(tries):
        port = rng.randrange(max(1024, top - PORT_SPAN), top)
        with closing(socket.socket()) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free TCP port in [{top - PORT_SPAN}, {top}) after {tries} tries")


PORT_SPAN = 12_000  # TF task ports come from [ephemeral low - PORT_SPAN, ephemeral low)


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out implicitly (Linux: ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # the Linux default


_register()
FRAMEWORK_STRATEGIES = tuple(strategy_names(kind="framework"))
HOROVOD_STRATEGIES = tuple(strategy_names(framework="horovod"))
TF_STRATEGIES = tuple(strategy_names(framework="tensorflow"))
TF_PS_STRATEGIES = tuple(strategy_names(framework="tensorflow", family="ps"))
