"""Engines to run the study on: a local ipyparallel cluster, or a named profile on GPU nodes.

Each engine gets a rank (its position in the sorted engine ids: ids are not ranks, they are never
reused after a restart), a device (one GPU per engine by local rank when there is one, else CPU)
and a torch.distributed process group (gloo on CPU, NCCL on GPU) whose timeout bounds every
collective. `stop()` leaves no engine, nanny or controller behind: what ignores SIGTERM (an engine
stuck in gloo) is killed after a grace period.

    python -m ddlstudy.cluster --workers 4 --check
"""

from __future__ import annotations

import argparse
import builtins
import datetime as dt
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)

DEFAULT_START_TIMEOUT_S = 120.0
DEFAULT_COLLECTIVE_TIMEOUT_S = 120.0
STOP_GRACE_S = 5.0


class ClusterError(RuntimeError):
    """A cluster problem the user can fix: the message names it and the fix."""


# ----------------------------------------------------------------------------- engine side
# State of this engine process; set by `_engine_setup`, read by library code running there.
_ENGINE: dict[str, Any] = {}


def engine_rank() -> int:
    return int(_ENGINE.get("rank", 0))


def engine_device() -> str:
    return str(_ENGINE.get("device", "cpu"))


def _engine_setup(rank: int, local_rank: int, local_size: int, threads: int | None,
                  env: dict[str, str]) -> dict[str, Any]:
    """Once per engine: rank, device, threads, environment (e.g. GLOO_SOCKET_IFNAME)."""
    os.environ.update(env)
    import torch

    if torch.cuda.is_available():
        device = f"cuda:{local_rank % torch.cuda.device_count()}"
        torch.cuda.set_device(device)
    else:
        device = "cpu"
        # N engines share the cores: one core's worth each, so they do not oversubscribe.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        torch.set_num_threads(threads or max(1, (cores or 1) // max(1, local_size)))
    _ENGINE.update(rank=rank, local_rank=local_rank, device=device)
    return _engine_info()


def _engine_info() -> dict[str, Any]:
    import torch

    device = engine_device()
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    return {
        "rank": engine_rank(), "local_rank": _ENGINE.get("local_rank", 0),
        "host": socket.gethostname(), "ip": _host_ip(), "pid": os.getpid(),
        "device": device, "device_name": name, "threads": torch.get_num_threads(),
    }


def _host_ip() -> str:
    """The address other nodes reach this one on (the route to a public address picks the NIC)."""
    iface = os.environ.get("DDLSTUDY_HOST_IP")
    if iface:
        return iface
    with closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as s:
        try:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def _free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _engine_master() -> tuple[str, int]:
    return _host_ip(), _free_port()


def _engine_init_group(master_addr: str, port: int, rank: int, world_size: int, backend: str,
                       timeout_s: float) -> str:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    if rank >= world_size:
        return "idle"
    dist.init_process_group(backend, init_method=f"tcp://{master_addr}:{port}", rank=rank,
                            world_size=world_size, timeout=dt.timedelta(seconds=timeout_s))
    _ENGINE["world_size"] = world_size
    return backend


def _engine_destroy_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def pingpong(sizes: Sequence[int], iters: int = 10, warmup: int = 2,
             peers: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Rank 0 bounces a message off each peer; one-way time = round trip / 2 (median).

    Runs on every rank of the process group at once (rank r answers only when it is r's turn);
    rank 0 returns the rows, the others an empty list. Blocking send/recv are bounded by the
    process group's timeout.
    """
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    device = engine_device()
    rows = []
    for peer in peers or range(1, world):
        for size in sizes:
            buf = torch.empty(max(1, size), dtype=torch.uint8, device=device)
            times = []
            for i in range(warmup + iters):
                if rank == 0:
                    t0 = time.perf_counter()
                    dist.send(buf, peer)
                    dist.recv(buf, peer)
                    if i >= warmup:
                        times.append((time.perf_counter() - t0) / 2)
                elif rank == peer:
                    dist.recv(buf, 0)
                    dist.send(buf, 0)
            if rank == 0:
                one_way = sorted(times)[len(times) // 2]
                rows.append({"peer": peer, "size_bytes": buf.numel(),
                             "latency_us": one_way * 1e6, "time_p50_s": one_way,
                             "time_min_s": min(times), "time_max_s": max(times),
                             "bandwidth_gbps": buf.numel() / one_way / 1e9})
        dist.barrier()
    return rows


# ----------------------------------------------------------------------------- driver side
def project_ipythondir() -> Path:
    """Cluster files live inside the project so `ipcluster stop` (and we) can find them."""
    from ddlstudy.records import project_root

    return project_root() / ".ipython"


def _ensure_ipythondir() -> str:
    path = os.environ.get("IPYTHONDIR") or str(project_ipythondir())
    Path(path).mkdir(parents=True, exist_ok=True)
    os.environ["IPYTHONDIR"] = path
    return path


def _reraise(err: BaseException, rank: int) -> None:
    """Turn an engine's RemoteError back into the exception a user expects, naming the rank."""
    ename = getattr(err, "ename", None)
    evalue = getattr(err, "evalue", str(err))
    exc_type = getattr(builtins, ename or "", None)
    if isinstance(exc_type, type) and issubclass(exc_type, Exception):
        raise exc_type(f"rank {rank}: {evalue}") from None
    raise ClusterError(f"rank {rank}: {ename}: {evalue}") from None


class Cluster:
    """A set of ranked engines with a torch.distributed process group.

    workers: engines to start locally (ignored with `profile`, which connects to a running
    ipyparallel cluster, e.g. one started on GPU nodes with `ipcluster start --profile=slurm`).
    """

    def __init__(self, workers: int = 2, profile: str | None = None, *,
                 start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
                 collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S,
                 threads_per_engine: int | None = None, engine_env: dict[str, str] | None = None,
                 engine_env_per_rank: Sequence[dict[str, str]] | None = None,
                 **cluster_kwargs: Any) -> None:
        if profile is None and (not isinstance(workers, int) or workers < 1):
            raise ClusterError(f"workers must be a positive integer, got {workers!r}: pass "
                               "--workers 2 (or more)")
        self.workers = workers
        self.profile = profile
        self.start_timeout_s = start_timeout_s
        self.collective_timeout_s = collective_timeout_s
        self.threads_per_engine = threads_per_engine
        self.engine_env = dict(engine_env or {})
        self.engine_env_per_rank = list(engine_env_per_rank or [])
        self.cluster_kwargs = cluster_kwargs
        self._cluster: Any = None
        self.client: Any = None
        self.engine_ids: list[int] = []
        self.infos: list[dict[str, Any]] = []
        self.world_size = 0
        self._pids: set[int] = set()

    # -- lifecycle
    def start(self) -> Cluster:
        import ipyparallel as ipp

        _ensure_ipythondir()
        if self.profile:
            try:
                self.client = ipp.Client(profile=self.profile, timeout=self.start_timeout_s)
            except (OSError, ValueError, TimeoutError) as err:
                raise ClusterError(
                    f"cannot connect to ipyparallel profile {self.profile!r} ({err}): start it "
                    f"first with `ipcluster start --profile={self.profile} -n N`") from None
            if self.workers and len(self.client.ids) < self.workers:
                self.client.wait_for_engines(self.workers, timeout=self.start_timeout_s,
                                             interactive=False)
        else:
            cores = os.cpu_count() or 1
            if self.workers > 8 * cores:
                raise ClusterError(f"{self.workers} workers on {cores} cores would thrash: use at "
                                   f"most {8 * cores} here, or a cluster profile")
            self._cluster = ipp.Cluster(n=self.workers, log_level=logging.ERROR,
                                        **self.cluster_kwargs)
            try:
                self.client = self._cluster.start_and_connect_sync()
                self.client.wait_for_engines(self.workers, timeout=self.start_timeout_s,
                                             interactive=False)
            except Exception:
                self.stop()
                raise
        self.engine_ids = sorted(self.client.ids)
        if self.profile and self.workers:
            self.engine_ids = self.engine_ids[: self.workers]
        try:
            self._setup_engines()
        except Exception:
            self.stop()
            raise
        return self

    def _setup_engines(self) -> None:
        hosts = self.client[self.engine_ids].apply_async(socket.gethostname).get(
            timeout=self.start_timeout_s)
        per_host: dict[str, int] = {}
        local_ranks = []
        for host in hosts:
            local_ranks.append(per_host.get(host, 0))
            per_host[host] = per_host.get(host, 0) + 1
        pending = []
        for rank, eid in enumerate(self.engine_ids):
            env = dict(self.engine_env)
            if rank < len(self.engine_env_per_rank):
                env.update(self.engine_env_per_rank[rank])
            pending.append(self.client[eid].apply_async(
                _engine_setup, rank, local_ranks[rank], per_host[hosts[rank]],
                self.threads_per_engine, env))
        self.infos = [self._get(p, rank, self.start_timeout_s) for rank, p in enumerate(pending)]
        self._pids.update(info["pid"] for info in self.infos
                          if info["host"] == socket.gethostname())
        self._pids.update(self._local_cluster_pids())

    def _local_cluster_pids(self) -> set[int]:
        """Controller, nannies and engines started for this cluster (not a connected profile's)."""
        if self._cluster is None:
            return set()
        pids = set()
        for launcher in [self._cluster.controller, *self._cluster.engines.values()]:
            for proc in [launcher, *getattr(launcher, "launchers", {}).values()]:
                pid = getattr(proc, "pid", None)
                if isinstance(pid, int) and pid > 0:
                    pids.add(pid)
        found = set()
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                found.add(pid)
                found.update(c.pid for c in proc.children(recursive=True))
            except psutil.NoSuchProcess:
                continue
        return found

    def stop(self) -> None:
        """Stop engines and controller; SIGKILL whatever is still alive after a grace period."""
        if self._cluster is not None:
            self._pids.update(self._local_cluster_pids())
        if self.client is not None and self.engine_ids and self._cluster is None:
            try:  # a connected profile stays up; only our process groups go
                self.client[self.engine_ids].apply_async(_engine_destroy_group).get(timeout=10)
            except Exception as err:  # noqa: BLE001 - best effort on the way out
                log.warning("could not destroy process groups on profile engines: %s", err)
        if self.client is not None:
            self.client.close()
            self.client = None
        if self._cluster is not None:
            try:
                self._cluster.stop_cluster_sync()
            except Exception as err:  # noqa: BLE001 - we kill below what did not stop
                log.warning("ipcluster stop failed (%s); killing its processes", err)
            self._cluster = None
        kill_after_grace(self._pids, STOP_GRACE_S)
        self._pids.clear()
        self.world_size = 0

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- work
    @property
    def size(self) -> int:
        return len(self.engine_ids)

    def info(self) -> list[dict[str, Any]]:
        return list(self.infos)

    def init_process_group(self, world_size: int | None = None, backend: str | None = None,
                           timeout_s: float | None = None) -> None:
        """A process group over ranks 0..world_size-1 (the previous group, if any, is destroyed)."""
        world_size = world_size or self.size
        if not 1 <= world_size <= self.size:
            raise ClusterError(f"world_size {world_size} needs {world_size} engines but the "
                               f"cluster has {self.size}: start it with --workers {world_size}")
        if backend is None:
            backend = "nccl" if self.infos[0]["device"].startswith("cuda") else "gloo"
        timeout_s = timeout_s or self.collective_timeout_s
        master, port = self._get(self.client[self.engine_ids[0]].apply_async(_engine_master), 0,
                                 30)
        pending = [self.client[eid].apply_async(_engine_init_group, master, port, rank,
                                                world_size, backend, timeout_s)
                   for rank, eid in enumerate(self.engine_ids)]
        for rank, p in enumerate(pending):
            self._get(p, rank, timeout_s + 30)
        self.world_size = world_size

    def run(self, fn: Callable[..., Any], *args: Any, world_size: int | None = None,
            timeout: float | None = None, **kwargs: Any) -> list[Any]:
        """Call fn on ranks 0..world_size-1 at once; results in rank order.

        fn must be importable on the engines (a function of an installed module) or defined in
        a notebook with its imports inside it.
        """
        world_size = world_size or self.world_size or self.size
        timeout = timeout or self.collective_timeout_s + 30
        pending = [self.client[eid].apply_async(fn, *args, **kwargs)
                   for eid in self.engine_ids[:world_size]]
        return [self._get(p, rank, timeout) for rank, p in enumerate(pending)]

    def run_rank(self, rank: int, fn: Callable[..., Any], *args: Any,
                 timeout: float | None = None, **kwargs: Any) -> Any:
        return self._get(self.client[self.engine_ids[rank]].apply_async(fn, *args, **kwargs),
                         rank, timeout or self.collective_timeout_s + 30)

    def _get(self, pending: Any, rank: int, timeout: float) -> Any:
        import ipyparallel as ipp

        try:
            return pending.get(timeout=timeout)
        except ipp.error.TimeoutError:
            raise TimeoutError(f"rank {rank} did not answer within {timeout:.0f} s: a collective "
                               "may be stuck; stop the cluster and check the other ranks' errors"
                               ) from None
        except ipp.error.RemoteError as err:
            _reraise(err, rank)


def kill_after_grace(pids: set[int], grace_s: float) -> list[int]:
    """SIGTERM, wait, then SIGKILL: engines stuck in gloo and TF servers ignore SIGTERM."""
    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if pid != os.getpid():
                procs.append(proc)
        except psutil.NoSuchProcess:
            continue
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=grace_s)
    return [p.pid for p in alive]


def leftover_processes(ipythondir: str | None = None) -> list[psutil.Process]:
    """ipyparallel processes started with this project's IPYTHONDIR (ours, and only ours)."""
    target = ipythondir or os.environ.get("IPYTHONDIR") or str(project_ipythondir())
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(proc.info.get("cmdline") or [])
        if "ipyparallel" not in cmd and "ipengine" not in cmd and "ipcontroller" not in cmd:
            continue
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get("IPYTHONDIR") == target:
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
    return found


def stop_all(ipythondir: str | None = None) -> int:
    """Clean up after a killed driver: every engine/controller of this project's IPYTHONDIR."""
    procs = leftover_processes(ipythondir)
    kill_after_grace({p.pid for p in procs}, STOP_GRACE_S)
    return len(procs)


# ----------------------------------------------------------------------------- CLI
DEFAULT_CHECK_SIZES = [8, 1024, 64 * 1024, 1 << 20, 16 << 20]


def format_table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    widths = {c: max(len(c), *(len(_fmt(r[c])) for r in rows)) if rows else len(c)
              for c in columns}
    lines = ["  ".join(c.rjust(widths[c]) for c in columns)]
    lines += ["  ".join(_fmt(r[c]).rjust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 1e5 else f"{value:.3g}"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddlstudy.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="local engines to start")
    parser.add_argument("--profile", help="connect to a running ipyparallel profile instead")
    parser.add_argument("--check", action="store_true",
                        help="print ranks/hosts/devices and a ping-pong latency/bandwidth table")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_CHECK_SIZES)),
                        help="ping-pong message sizes in bytes, comma-separated")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--stop-all", action="store_true",
                        help="kill every engine/controller left by this project (after a crash)")
    args = parser.parse_args(argv)
    if args.stop_all:
        print(f"stopped {stop_all()} leftover ipyparallel processes")
        return 0
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        with Cluster(workers=args.workers, profile=args.profile) as cluster:
            print(format_table(cluster.info(), ["rank", "host", "pid", "device", "device_name",
                                                "threads"]))
            if args.check and cluster.size > 1:
                cluster.init_process_group()
                rows = cluster.run(pingpong, sizes, args.iters)[0]
                print(f"\nping-pong rank 0 <-> peer (one-way, median of {args.iters}):")
                print(format_table(rows, ["peer", "size_bytes", "latency_us", "bandwidth_gbps"]))
    except (ClusterError, ValueError, TimeoutError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    # Import by name so engines unpickle ddlstudy.cluster functions, not copies from __main__.
    from ddlstudy.cluster import main as _main

    sys.exit(_main())
