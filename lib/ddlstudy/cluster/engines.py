"""Engines to run the study on: a local ipyparallel cluster, or a named profile on GPU nodes.

Each engine gets a rank (its position in the sorted engine ids: ids are not ranks, they are never
reused after a restart), a device (one GPU per engine by local rank when there is one, else CPU)
and a torch.distributed process group (gloo on CPU, NCCL on GPU) whose timeout bounds every
collective. `stop()` leaves no engine, nanny or controller behind: what ignores SIGTERM (an engine
stuck in gloo) is killed after a grace period.

Where it binds: a local cluster's rendezvous is a FileStore in the cluster's own folder (no
listening socket) and gloo uses loopback (GLOO_SOCKET_IFNAME=lo, 127.0.0.1) unless the engine's
environment names another interface (the emulated network's veths). On a profile (several nodes)
rank 0 opens a TCPStore on a port the OS picks (port 0, read back) at the address the user names
(`master_addr`, or DDLSTUDY_HOST_IP on the engines); torch's store has no authentication and
listens on every interface, so such clusters belong on a private network.

Orphans: every local cluster writes its owners (this process, and the runner named in
DDLSTUDY_OWNER_PIDS) and the pids of its controller, nannies and engines to
`$IPYTHONDIR/ddlstudy-clusters/<id>/pids.json`. `cleanup()` (run when a local cluster starts,
and by `--cleanup`) stops exactly the clusters one of whose owners is dead.

Beyond this machine (ddlstudy.cluster.launchers): `--launcher ssh|slurm|mpi` starts the engines
through ipyparallel's launchers; ranks are grouped by host in the order of `--hosts`, and the
rendezvous is rank 0's TCPStore on the address of `--ifname` (docs/cluster.md).

    python -m ddlstudy.cluster --workers 4 --check
    python -m ddlstudy.cluster --launcher ssh --hosts h0:2,h1:2 --ifname eth0 --check
    python -m ddlstudy.cluster --cleanup

long because: the engine side, the driver's Cluster, signals, orphan cleanup and the CLI share
one cluster's state (pids, ranks, process groups); the launch settings live in launchers.py.
"""

from __future__ import annotations

import argparse
import builtins
import datetime as dt
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import psutil

from ddlstudy.cluster.launchers import (
    MAX_ENGINES_PER_CORE,
    REMOTE_ROOT_ENV,
    LaunchError,
    LaunchSpec,
    add_launch_arguments,
    engine_count_problem,
    env_from_args,
    interface_ipv4,
    launch_spec,
)
from ddlstudy.collectives.placement import gpus_per_node, host_env, node_of
from ddlstudy.host import identity

log = logging.getLogger(__name__)

DEFAULT_START_TIMEOUT_S = 120.0
DEFAULT_COLLECTIVE_TIMEOUT_S = 120.0
STOP_GRACE_S = 5.0
POLL_S = 0.05  # how often the driver looks at pending ranks and engine pids
OWNER_ENV = "DDLSTUDY_OWNER_PIDS"  # identity.encode stamps of runners whose death orphans a cluster
# A local cluster's engines talk over loopback unless their environment says otherwise.
LOCAL_ENGINE_ENV = {"GLOO_SOCKET_IFNAME": "lo", "DDLSTUDY_HOST_IP": "127.0.0.1"}


class ClusterError(RuntimeError):
    """A cluster problem the user can fix: the message names it and the fix."""


class RankFailed(RuntimeError):
    """An engine died mid-run: the message names its rank, engine id, pid and host."""


# ----------------------------------------------------------------------------- engine side
# State of this engine process; set by `_engine_setup`, read by library code running there.
_ENGINE: dict[str, Any] = {}


def engine_rank() -> int:
    return int(_ENGINE.get("rank", 0))


def engine_device() -> str:
    return str(_ENGINE.get("device", "cpu"))


def _engine_setup(rank: int, local_rank: int, local_size: int, threads: int | None,
                  env: dict[str, str], defaults: dict[str, str] | None = None,
                  workdir: bool = False, scratch: str | None = None) -> dict[str, Any]:
    """Once per engine: rank, device, threads, environment (e.g. GLOO_SOCKET_IFNAME).

    `defaults` apply only where the engine's own environment has no value (an engine started in
    a namespace keeps the interface its launcher gave it). workdir (engines a launcher started
    on other hosts): work in this engine's project root (`engine_root`), so relative paths the
    driver sends (data_root "data") resolve in the engine's own checkout. scratch: this engine's
    temporary directory (TMPDIR and `tempfile`), inside the cluster's run folder, which `stop`
    removes: files libraries leave in the temporary directory (TensorFlow's autograph modules,
    deleted only at a clean exit, which a SIGKILLed TF engine never has) go with the cluster; its
    sibling `shared` holds what the cluster's engines share on this host (replay's draw)."""
    for key, value in (defaults or {}).items():
        os.environ.setdefault(key, value)
    os.environ.update(env)
    if scratch:
        import tempfile

        from ddlstudy.strategies.base import REPLAY_SHARE_ENV

        os.makedirs(scratch, exist_ok=True)
        os.environ["TMPDIR"] = scratch
        tempfile.tempdir = scratch
        os.environ[REPLAY_SHARE_ENV] = str(Path(scratch).parent / "shared")
    if workdir:
        os.chdir(engine_root())
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
        "host": socket.gethostname(), "node": node_of(engine_rank(), gpus_per_node()),
        "ip": host_ip(), "pid": os.getpid(),
        "device": device, "device_name": name, "threads": torch.get_num_threads(),
        "root": os.getcwd(), "package": str(Path(__file__).resolve().parents[1]),
        **versions(),
    }


def engine_root() -> Path:
    """Where an engine started on another host works: DDLSTUDY_REMOTE_ROOT (`remote_root`), else
    the checkout its ddlstudy is imported from (pip install -e), else its working directory."""
    named = os.environ.get(REMOTE_ROOT_ENV)
    if named:
        if not Path(named).is_dir():
            raise FileNotFoundError(f"remote_root {named} is not a folder on "
                                    f"{socket.gethostname()}: set cluster.remote_root to the "
                                    "nodes' checkout")
        return Path(named)
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "lib" / "ddlstudy").is_dir():
            return parent
    return Path.cwd()


def versions() -> dict[str, str]:
    """What driver and engines must share: Python, torch, ddlstudy's version, the hash of its
    code and the commit of its checkout ("unknown" where there is no git)."""
    import platform

    import torch

    from ddlstudy.records.store import git_sha

    return {"python": platform.python_version(), "torch": str(torch.__version__),
            "version": _version(), "code_hash": code_hash(),
            "git_sha": git_sha(Path(__file__).resolve().parent)}


def _version() -> str:
    """The imported package's own version (a node may import another checkout than the one
    pip's metadata names)."""
    import ddlstudy

    return str(getattr(ddlstudy, "__version__", "unknown"))


def code_hash() -> str:
    """sha256 (first 12 hex digits) of the ddlstudy package's .py files (paths and contents):
    driver and engines must run the same code. Read now, not cached: the files on disk."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def host_ip() -> str:
    """The address other nodes reach this one on: DDLSTUDY_HOST_IP (a local cluster's engines set
    127.0.0.1), else the address of DDLSTUDY_IFNAME (set by a launcher's `ifname`), else the NIC
    the route to a public address picks. Frameworks name it too."""
    iface = os.environ.get("DDLSTUDY_HOST_IP")
    if iface:
        return iface
    ifname = os.environ.get("DDLSTUDY_IFNAME")
    if ifname:
        ip = interface_ipv4(ifname)
        if ip is None:
            raise OSError(f"interface {ifname!r} has no IPv4 address on {socket.gethostname()}: "
                          "set cluster.ifname to the interface the nodes share")
        return ip
    with closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as s:
        try:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def _engine_master(addr: str | None, world_size: int, timeout_s: float) -> tuple[str, int]:
    """Rank 0 opens the TCPStore itself on a port the OS picks (no bind-close-reuse race)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    host = addr or host_ip()
    store = dist.TCPStore(host, 0, world_size, True, timeout=dt.timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    _ENGINE["store"] = store
    return host, int(store.port)


def _engine_init_group(init_method: str, rank: int, world_size: int, backend: str,
                       timeout_s: float) -> str:
    """Join the process group: by a file store (local) or rank 0's TCPStore (profile)."""
    import torch.distributed as dist

    store = _ENGINE.pop("store", None)
    if dist.is_initialized():
        dist.destroy_process_group()
    if rank >= world_size:
        return "idle"
    timeout = dt.timedelta(seconds=timeout_s)
    if init_method.startswith("tcp://"):
        # Every rank hands init_process_group a store: rank 0 its server, the others a client
        # of it. (Mixing store= on rank 0 with init_method= elsewhere makes torch prefix the
        # keys differently, "/0/..." against "/default_pg/0/...", and the group never forms.)
        if store is None or rank != 0:
            host, _, port = init_method[len("tcp://"):].rpartition(":")
            store = dist.TCPStore(host, int(port), world_size, False, timeout=timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timeout)
    else:
        dist.init_process_group(backend, init_method=init_method, rank=rank,
                                world_size=world_size, timeout=timeout)
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
                             "bandwidth_GBps": buf.numel() / one_way / 1e9})
        dist.barrier()
    return rows


# ----------------------------------------------------------------------------- driver side
def project_ipythondir() -> Path:
    """Cluster files live inside the project so `ipcluster stop` (and we) can find them."""
    from ddlstudy.records.store import project_root

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
    engines_per_core: the most local engines per core `start` accepts (launchers'
    REPLAY_ENGINES_PER_CORE for engines that only replay compute).
    """

    def __init__(self, workers: int = 2, profile: str | None = None, *,
                 start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
                 collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S,
                 threads_per_engine: int | None = None, engine_env: dict[str, str] | None = None,
                 engine_env_per_rank: Sequence[dict[str, str]] | None = None,
                 master_addr: str | None = None, launch: LaunchSpec | None = None,
                 engines_per_core: int = MAX_ENGINES_PER_CORE,
                 **cluster_kwargs: Any) -> None:
        if profile is None and (not isinstance(workers, int) or workers < 1):
            raise ClusterError(f"workers must be a positive integer, got {workers!r}: pass "
                               "--workers 2 (or more)")
        for name, value in (("start_timeout_s", start_timeout_s),
                            ("collective_timeout_s", collective_timeout_s)):
            if not 0 < value <= 86_400:  # timedelta overflows on 1e300; a day is plenty
                raise ClusterError(f"{name} must be in (0, 86400] seconds, got {value:g}")
        self.launch = launch or LaunchSpec()
        if self.launch.is_remote:
            if profile:
                raise ClusterError(f"launcher {self.launch.launcher} starts its own engines; it "
                                   f"cannot use profile {profile!r} too: drop one of them")
            try:
                self.launch.validate()
            except LaunchError as err:
                raise ClusterError(str(err)) from None
            workers = self.launch.slots or workers
        self.workers = workers
        self.profile = profile
        self.init_method: str | None = None  # the last process group's rendezvous
        self.start_timeout_s = start_timeout_s
        self.collective_timeout_s = collective_timeout_s
        self.threads_per_engine = threads_per_engine
        self.engine_env = dict(engine_env or {})
        self.engines_per_core = engines_per_core
        self.engine_env_per_rank = list(engine_env_per_rank or [])
        self.cluster_kwargs = cluster_kwargs
        self._cluster: Any = None
        self.client: Any = None
        self.engine_ids: list[int] = []
        self.infos: list[dict[str, Any]] = []
        self.world_size = 0
        self._pids: set[int] = set()
        self.master_addr = master_addr  # profile clusters: where rank 0's TCPStore listens
        self.run_dir: Path | None = None  # local clusters: pids.json and the rendezvous files
        # The network the engines talk over, set by whoever started them in one
        # (grid.emulated_cluster): what the records say (train(network=...) overrides it), and
        # the EmulatedNetwork to stop. None: the host's own interfaces, unshaped.
        self.network_info: dict[str, Any] | None = None
        self.emulated_network: Any = None
        self._groups = 0

    # -- lifecycle
    def start(self) -> Cluster:
        import ipyparallel as ipp

        from ddlstudy.cluster import loopback

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
            if problem := engine_count_problem(self.workers, self.engines_per_core):
                raise ClusterError(problem)
            stopped = cleanup()
            if stopped:
                log.warning("stopped %d processes left by clusters whose owner died", stopped)
            self.run_dir = clusters_dir() / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            self.run_dir.mkdir(parents=True)
            kwargs = {"n": self.workers, "log_level": logging.ERROR,
                      **self.launch.cluster_kwargs(_ensure_ipythondir()), **self.cluster_kwargs}
            self._cluster = ipp.Cluster(**kwargs)
            try:
                with defer_signals():  # a signal mid-start must not lose the controller's pid
                    self._cluster.start_controller_sync()
                    self._write_pids()
                with loopback.preloaded(not self.launch.is_remote):  # TF's gRPC binds 0.0.0.0
                    self._cluster.start_engines_sync()
                self._write_pids()
                self.client = self._cluster.connect_client_sync()
                try:
                    self.client.wait_for_engines(self.workers, timeout=self.start_timeout_s,
                                                 interactive=False)
                except TimeoutError as err:  # say what the missing engines' launchers printed
                    raise ClusterError(f"{err}; the engine launchers' output (last lines):\n"
                                       f"{self._launcher_tails()}") from None
            except BaseException:
                self.stop()
                raise
        self.engine_ids = sorted(self.client.ids)
        if self.profile and self.workers:
            self.engine_ids = self.engine_ids[: self.workers]
        try:
            self._setup_engines()
        except BaseException:
            self.stop()
            raise
        self._write_pids()
        return self

    def _launcher_tails(self, lines: int = 6) -> str:
        """One line per engine launcher (a local engine, ssh to a host, sbatch, mpiexec): its
        state and the last `lines` lines it printed, for an engine that never registered."""
        out = []
        for es in self._cluster.engines.values() if self._cluster is not None else []:
            for ident, lc in (getattr(es, "launchers", None) or {es.identifier: es}).items():
                try:
                    text = lc.get_output() or ""
                except OSError as err:
                    text = f"(output unreadable: {err})"
                where = f" on {lc.hostname}" if getattr(lc, "hostname", "") else ""
                last = [" ".join(x.split()) for x in text.strip().splitlines()[-lines:]]
                tail = " | ".join(last) or "(no output)"
                out.append(f"  engine {ident}{where} ({getattr(lc, 'state', '?')}): {tail}")
        return "\n".join(out) or "  (no engine launcher)"

    def _scratch(self, rank: int) -> str | None:
        """Rank's temporary directory in this cluster's run folder (removed by `stop`); None for
        engines this process did not start on this host (a profile's, a remote launcher's)."""
        if self.run_dir is None or self.launch.is_remote:
            return None
        return str(self.run_dir / "tmp" / f"rank{rank}")

    def _write_pids(self) -> None:
        """Owners and every process of this cluster, for `cleanup()` after its owner dies."""
        if self.run_dir is None:
            return
        self._pids.update(self._local_cluster_pids())
        record = {"owners": _owners(), "checkout": str(project_ipythondir().parent),
                  "created": time.time(), "pids": _stamped(self._pids),
                  "rank_pids": [info["pid"] for info in self.infos]}
        _write_json_atomic(self.run_dir / "pids.json", record)

    def _setup_engines(self) -> None:
        hosts = self.client[self.engine_ids].apply_async(socket.gethostname).get(
            timeout=self.start_timeout_s)
        # Ranks grouped by host, hosts in the order the launch names them (registration order
        # across hosts is a race), engine ids in order within a host.
        order = self.launch.host_order()

        def host_key(item: tuple[int, str]) -> tuple[int, str, int]:
            eid, host = item
            short = host.split(".")[0]
            return (order.index(short) if short in order else len(order), host, eid)

        pairs = sorted(zip(self.engine_ids, hosts, strict=True), key=host_key)
        self.engine_ids = [eid for eid, _ in pairs]
        hosts = [host for _, host in pairs]
        per_host: dict[str, int] = {}
        local_ranks = []
        for host in hosts:
            local_ranks.append(per_host.get(host, 0))
            per_host[host] = per_host.get(host, 0) + 1
        # On several hosts the node of each rank is a fact: DDLSTUDY_RANK_NODES (and k where the
        # hosts hold full nodes of one size) for the tier counts and the hierarchical all-reduce;
        # an engine environment the user gave wins, and `placement.check_layout` judges it.
        placed = host_env(hosts)
        pending = []
        for rank, eid in enumerate(self.engine_ids):
            env = {**placed, **self.engine_env}
            if rank < len(self.engine_env_per_rank):
                env.update(self.engine_env_per_rank[rank])
            pending.append(self.client[eid].apply_async(
                _engine_setup, rank, local_ranks[rank], per_host[hosts[rank]],
                self.threads_per_engine, env,
                LOCAL_ENGINE_ENV if self._cluster is not None and not self.launch.is_remote
                else None, self.launch.is_remote, self._scratch(rank)))
        self.infos = self._wait_all(pending, self.start_timeout_s)
        self._check_versions()
        self._pids.update(info["pid"] for info in self.infos
                          if info["host"] == socket.gethostname())
        self._pids.update(self._local_cluster_pids())

    def _check_versions(self) -> None:
        """Every engine must run the driver's Python, torch and ddlstudy (version, code hash,
        commit); the first difference is one line and the cluster stops."""
        mine = versions()
        for _ in range(3):
            if all(all(i.get(k) == v for k, v in mine.items()) for i in self.infos):
                return
            # read again, all at once: a file edited (or a commit made) between two reads of a
            # checkout shared with the nodes is no mismatch; one that stays different is
            time.sleep(1.0)
            fresh = self._wait_all([self.client[e].apply_async(versions)
                                    for e in self.engine_ids], self.start_timeout_s)
            mine = versions()
            for info, theirs in zip(self.infos, fresh, strict=True):
                info.update(theirs)
        for info in self.infos:
            for key, value in mine.items():
                theirs = info.get(key)
                if key == "git_sha" and "unknown" in (theirs, value):
                    continue  # a node's copy without .git: the code hash still decides
                if theirs != value:
                    what = {"python": "Python", "torch": "torch", "version": "ddlstudy",
                            "code_hash": "ddlstudy code (hash of its .py files)",
                            "git_sha": "ddlstudy commit"}[key]
                    raise ClusterError(
                        f"rank {info['rank']} on {info['host']} runs {what} {theirs}, this "
                        f"driver {value} (its ddlstudy: {info.get('package')}): install the "
                        "same Python, torch and ddlstudy commit on every node")

    def _local_cluster_pids(self) -> set[int]:
        """Controller, nannies and engines started for this cluster (not a connected profile's).
        Remote launchers' pids are other hosts' (or batch jobs'): only the controller's count."""
        if self._cluster is None:
            return set()
        pids = set()
        engines = [] if self.launch.is_remote else list(self._cluster.engines.values())
        for launcher in [self._cluster.controller, *engines]:
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

    def _engine_set_pids(self) -> set[int]:
        """The engine launchers' processes (nannies, engines), not the controller's."""
        found: set[int] = set()
        if self._cluster is None or self.launch.is_remote:
            return found
        for launcher in self._cluster.engines.values():
            for proc in [launcher, *getattr(launcher, "launchers", {}).values()]:
                pid = getattr(proc, "pid", None)
                if not isinstance(pid, int) or pid <= 0:
                    continue
                try:
                    found.add(pid)
                    found.update(c.pid for c in psutil.Process(pid).children(recursive=True))
                except psutil.NoSuchProcess:
                    continue
        return found

    def stop(self) -> None:
        """Stop engines and controller; SIGKILL whatever is still alive after a grace period.
        Signals wait until it is done (a second Ctrl-C must not orphan half the cluster)."""
        with defer_signals():
            self._stop()

    def _stop(self) -> None:
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
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None

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
        if backend is None:  # CUDA: cpu:gloo,cuda:nccl (NCCL data, gloo metadata/any-source)
            from ddlstudy.collectives.device import backend_for

            backend = backend_for(self.infos[0]["device"])
        timeout_s = timeout_s or self.collective_timeout_s
        self._raise_if_dead(world_size)
        self._groups += 1
        if self.run_dir is not None and not self.launch.is_remote:  # a file store, nothing listens
            init_method = f"file://{self.run_dir / f'store-{self._groups}'}"
        else:
            master, port = self._get(self.client[self.engine_ids[0]].apply_async(
                _engine_master, self.master_addr, world_size, timeout_s), 0, 30)
            init_method = f"tcp://{master}:{port}"
        pending = [self.client[eid].apply_async(_engine_init_group, init_method, rank,
                                                world_size, backend, timeout_s)
                   for rank, eid in enumerate(self.engine_ids)]
        self._wait_all(pending, timeout_s + 30)
        self.world_size = world_size
        self.init_method = init_method

    def run(self, fn: Callable[..., Any], *args: Any, world_size: int | None = None,
            timeout: float | None = None, **kwargs: Any) -> list[Any]:
        """Call fn on ranks 0..world_size-1 at once; results in rank order.

        fn must be importable on the engines (a function of an installed module) or defined in
        a notebook with its imports inside it.
        """
        world_size = world_size or self.world_size or self.size
        timeout = timeout or self.collective_timeout_s + 30
        self._raise_if_dead(world_size)
        pending = [self.client[eid].apply_async(fn, *args, **kwargs)
                   for eid in self.engine_ids[:world_size]]
        return self._wait_all(pending, timeout)

    def _wait_all(self, pending: list[Any], timeout: float,
                  ignore: Sequence[int] = ()) -> list[Any]:
        """Wait on every rank at once; the first failure (an engine's error, a dead engine, or
        the timeout) is raised at once, naming the rank and its engine, not after rank 0.
        Ranks in `ignore` (known dead) are not waited on; their result is None."""
        deadline = time.monotonic() + timeout
        results: dict[int, Any] = {r: None for r in ignore if r < len(pending)}
        while len(results) < len(pending):
            dead = self._dead_rank(len(pending), ignore)
            if dead is not None:
                raise RankFailed(dead)
            for rank, p in enumerate(pending):
                if rank not in results and p.ready():
                    results[rank] = self._get(p, rank, 1)
            if len(results) < len(pending):
                if time.monotonic() > deadline:
                    late = [r for r in range(len(pending)) if r not in results]
                    raise TimeoutError(
                        f"rank {late[0]} ({self._engine_name(late[0])}) did not answer within "
                        f"{timeout:.0f} s (still waiting: ranks {late}): a collective may be "
                        "stuck; stop the cluster and check the other ranks' errors")
                time.sleep(POLL_S)
        return [results[r] for r in range(len(pending))]

    def _raise_if_dead(self, world: int) -> None:
        """RankFailed naming the first of ranks 0..world-1 whose engine died between calls
        (the OOM killer ends the largest process, often an engine, while nothing waits on it);
        without this, addressing it fails inside ipyparallel ('No such engine: 0')."""
        dead = self._dead_rank(world)
        if dead is not None:
            raise RankFailed(dead + "; if nothing killed it, the host may have run out of "
                             "memory (fewer workers, or a smaller model)")

    def _engine_name(self, rank: int) -> str:
        info = self.infos[rank] if rank < len(self.infos) else {}
        eid = self.engine_ids[rank] if rank < len(self.engine_ids) else "?"
        return f"engine {eid}, pid {info.get('pid', '?')} on {info.get('host', '?')}"

    def _dead_rank(self, world: int, ignore: Sequence[int] = ()) -> str | None:
        """One line naming the first rank (of 0..world-1, not in `ignore`) whose engine is gone,
        or None (see `dead_ranks`)."""
        for rank in self.dead_ranks(world):
            if rank in ignore:
                continue
            info = self.infos[rank]
            gone = info.get("host") == socket.gethostname() and not _alive(int(info["pid"]))
            how = ("its process is gone" if gone else
                   "the controller dropped it: its nanny's report or a lost heartbeat")
            return (f"rank {rank} ({self._engine_name(rank)}) died ({how}); its peers are "
                    "stopped with the cluster")
        return None

    def _unregistered(self, rank: int) -> bool:
        """The controller dropped this rank's engine: its heartbeat stopped (any host)."""
        if self.client is None or rank >= len(self.engine_ids):
            return False
        try:
            return self.engine_ids[rank] not in self.client.ids  # .ids reads the notifications
        except Exception:  # noqa: BLE001 - a closing client knows nothing
            return False

    def submit(self, fn: Callable[..., Any], *args: Any, world_size: int | None = None,
               **kwargs: Any) -> list[Any]:
        """Start fn on ranks 0..world_size-1; `wait` collects (a fault-tolerant `run`)."""
        world_size = world_size or self.world_size or self.size
        self._raise_if_dead(world_size)
        return [self.client[eid].apply_async(fn, *args, **kwargs)
                for eid in self.engine_ids[:world_size]]

    def wait(self, pending: list[Any], timeout: float, ignore: Sequence[int] = ()) -> list[Any]:
        """Results of `submit` in rank order (None for ranks in `ignore`); RankFailed names a
        rank that died meanwhile."""
        return self._wait_all(pending, timeout, ignore)

    def dead_ranks(self, world: int | None = None) -> list[int]:
        """Ranks (of 0..world-1) whose engine is gone: on this host its process is (seen at
        once); on any host the controller has unregistered it (its heartbeat stopped: within
        launchers.HEARTBEAT_MS x HEARTBEAT_MISSES for launched engines, or at once when its
        nanny reports the death)."""
        here = socket.gethostname()
        return [r for r, info in enumerate(self.infos[:world or len(self.infos)])
                if (info.get("host") == here and not _alive(int(info["pid"])))
                or self._unregistered(r)]

    def drop_ranks(self, ranks: Sequence[int]) -> None:
        """Forget dead engines: the survivors keep their order and are renumbered 0..n-1 (the
        next `init_process_group` forms a group of them; Horovod elastic's re-formed ring)."""
        gone = set(ranks)
        self.engine_ids = [e for r, e in enumerate(self.engine_ids) if r not in gone]
        self.infos = [dict(info, rank=r) for r, info in
                      enumerate(i for q, i in enumerate(self.infos) if q not in gone)]
        self.world_size = 0
        self._write_pids()

    @property
    def can_restart(self) -> bool:
        """Local clusters can be restarted on fresh engines; a connected profile cannot."""
        return (self.profile is None and getattr(self, "emulated_network", None) is None
                and not self.launch.is_remote)

    def restart(self) -> None:
        """Replace every engine by a fresh one, same settings, keeping the controller: what
        torchelastic does when a worker of the group fails. The old engines (survivors stuck in
        gloo too) are SIGKILLed at once: they hold nothing a restart from a checkpoint needs,
        and SIGTERM + grace took 22 s on a loaded 2-core host."""
        if not self.can_restart or self._cluster is None:
            raise ClusterError("only a local cluster without an emulated network can be "
                               "restarted on fresh engines")
        from ddlstudy.cluster import loopback

        old_ids = set(self.client.ids)
        with defer_signals():
            self._pids.update(self._local_cluster_pids())
            kill_after_grace({int(i["pid"]) for i in self.infos} | self._engine_set_pids(), 0.0)
            self._cluster.stop_engines_sync()
            with loopback.preloaded():
                self._cluster.start_engines_sync()
            self._write_pids()
        deadline = time.monotonic() + self.start_timeout_s
        while len(set(self.client.ids) - old_ids) < self.workers:
            if time.monotonic() > deadline:
                raise ClusterError(f"fresh engines did not register within "
                                   f"{self.start_timeout_s:g} s; the engine launchers' output "
                                   f"(last lines):\n{self._launcher_tails()}")
            time.sleep(POLL_S)
        self.engine_ids = sorted(set(self.client.ids) - old_ids)[: self.workers]
        self.infos, self.world_size = [], 0  # the dead ranks' pids must not fail the setup
        self._setup_engines()
        self._write_pids()

    def run_ranks(self, ranks: Sequence[int], fn: Callable[..., Any], *args: Any,
                  timeout: float | None = None, **kwargs: Any) -> list[Any]:
        """fn on the given ranks at once (any subset, e.g. a monitor's); results in that order."""
        timeout = timeout or self.collective_timeout_s + 30
        pending = [(r, self.client[self.engine_ids[r]].apply_async(fn, *args, **kwargs))
                   for r in ranks]
        return [self._get(p, r, timeout) for r, p in pending]

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
        except ipp.error.EngineError as err:
            raise RankFailed(f"rank {rank} ({self._engine_name(rank)}) died: {err}") from None
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


# ----------------------------------------------------------------------------- signals
class Interrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM/SIGHUP as an exception, so `with Cluster(...)` blocks unwind and stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise_interrupted(signum: int, _frame: Any) -> None:
    # Once: the stop this starts is bounded (kill_after_grace), and a repeated signal (a
    # supervisor's second SIGTERM, a second Ctrl-C) raised again mid-unwind would land in some
    # finally or except block and turn the CLI's one line into a traceback.
    for sig in HANDLED_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def _raise_interrupted_quietly(signum: int, frame: Any) -> None:
    logging.disable(logging.CRITICAL)  # libraries' logs of the unwinding would bury the line
    _raise_interrupted(signum, frame)


def handle_signals(quiet: bool = False) -> None:
    """CLIs call this first: the first SIGINT/SIGTERM/SIGHUP raises Interrupted in the main
    thread (later ones are ignored: the stop is under way); the CLI stops its cluster, prints
    one line and exits 128 + the signal number.
    quiet: also silence logging from then on (e.g. asyncio's 'Task exception was never
    retrieved' after papermill's kernel dies)."""
    for sig in HANDLED_SIGNALS:
        signal.signal(sig, _raise_interrupted_quietly if quiet else _raise_interrupted)


@contextmanager
def defer_signals() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP while a start or stop must finish; deliver them after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS}
    for sig in HANDLED_SIGNALS:
        signal.signal(sig, lambda signum, _frame: got.append(signum))
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if got:
            os.kill(os.getpid(), got[0])


# ----------------------------------------------------------------------------- orphans
def clusters_dir(ipythondir: str | None = None) -> Path:
    """Where local clusters keep their pids.json, one folder each."""
    return Path(ipythondir or _ensure_ipythondir()) / "ddlstudy-clusters"


def _stamp(pid: int) -> dict[str, Any] | None:
    return identity.stamp(pid)


def _stamped(pids: set[int]) -> list[dict[str, Any]]:
    return [st for st in (_stamp(p) for p in sorted(pids)) if st is not None]


def _owners() -> list[dict[str, Any]]:
    """This process, and the runners named in DDLSTUDY_OWNER_PIDS (e.g. the report runner a
    notebook kernel runs under): if any of them dies, the cluster is an orphan."""
    owners = [_stamp(os.getpid())]
    owners += [identity.decode(item) for item in os.environ.get(OWNER_ENV, "").split(",")]
    return [o for o in owners if o is not None]


def owner_env() -> dict[str, str]:
    """DDLSTUDY_OWNER_PIDS for children (kernels) whose clusters must die with this process."""
    items = [x for x in os.environ.get(OWNER_ENV, "").split(",") if x]
    items.append(identity.encode(identity.mine()))
    return {OWNER_ENV: ",".join(items)}


def _matches(stamp: dict[str, Any]) -> psutil.Process | None:
    """The process of a recorded stamp if it still runs (same pid AND start), else None."""
    return identity.matches(stamp)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _write_json_atomic(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record) + "\n")
    os.replace(tmp, path)


def orphaned_clusters(ipythondir: str | None = None) -> tuple[list[Path], list[Path]]:
    """(orphans, live): cluster folders one of whose owners is dead, and the others."""
    orphans, live = [], []
    root = clusters_dir(ipythondir)
    for folder in sorted(root.glob("*")) if root.is_dir() else []:
        try:
            record = json.loads((folder / "pids.json").read_text())
            owners = record["owners"]
        except (OSError, ValueError, KeyError, TypeError):
            # no or partial pids.json: a cluster starting now, or one killed before writing;
            # its folder name starts with the owner's pid
            pid = folder.name.split("-")[0]
            if pid.isdigit() and _alive(int(pid)):
                live.append(folder)
            else:
                orphans.append(folder)
            continue
        (live if all(_matches(o) for o in owners) else orphans).append(folder)
    return orphans, live


def cleanup(ipythondir: str | None = None) -> int:
    """Stop exactly the processes of clusters whose owner died (never a live run's, never
    this process or its ancestors); returns how many processes were stopped."""
    orphans, _ = orphaned_clusters(ipythondir)
    protected = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    stopped = 0
    for folder in orphans:
        try:
            record = json.loads((folder / "pids.json").read_text())
            stamps = [*record.get("pids", []), *record.get("owners", [])]
        except (OSError, ValueError, TypeError):
            stamps = []
        procs = {proc.pid for st in stamps if (proc := _matches(st)) is not None}
        procs -= protected
        kill_after_grace(procs, STOP_GRACE_S)
        stopped += len(procs)
        shutil.rmtree(folder, ignore_errors=True)
    return stopped


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
    """Every engine/controller of this project's IPYTHONDIR, live runs' too (`--force`)."""
    procs = leftover_processes(ipythondir)
    kill_after_grace({p.pid for p in procs}, STOP_GRACE_S)
    root = clusters_dir(ipythondir)
    if root.is_dir():
        shutil.rmtree(root, ignore_errors=True)
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
    parser.add_argument("--ipp-profile", dest="profile",
                        help="connect to a running ipyparallel profile instead")
    add_launch_arguments(parser)
    parser.add_argument("--check", action="store_true",
                        help="print ranks/hosts/devices and a ping-pong latency/bandwidth table")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_CHECK_SIZES)),
                        help="ping-pong message sizes in bytes, comma-separated")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--start-timeout", type=float, default=DEFAULT_START_TIMEOUT_S,
                        help="seconds to wait for the engines to register (SSH, Slurm and MPI "
                        "launches on a busy host may need more)")
    parser.add_argument("--cleanup", action="store_true",
                        help="stop the clusters of this checkout whose owner process died")
    parser.add_argument("--stop-all", action="store_true",
                        help="--cleanup, and with --force also every live run's engines")
    parser.add_argument("--force", action="store_true",
                        help="with --stop-all: stop live runs' clusters too")
    args = parser.parse_args(argv)
    if args.cleanup or args.stop_all:
        return _cleanup_cli(args.stop_all and args.force)
    try:  # everything that can be checked is, before anything starts
        sizes = [int(s) for s in args.sizes.split(",")]
        launch = launch_spec(args.launcher, args.hosts, args.ifname, args.controller_ip,
                             args.remote_python, env_from_args(args.env), args.ssh_args,
                             args.launcher_args, args.remote_root)
    except (LaunchError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    handle_signals()
    try:
        with Cluster(workers=args.workers, profile=args.profile, launch=launch,
                     start_timeout_s=args.start_timeout) as cluster:
            print(format_table(cluster.info(), ["rank", "local_rank", "host", "node", "ip",
                                                "pid", "device", "threads"]))
            if args.check and cluster.size > 1:
                cluster.init_process_group()
                print(f"\nrendezvous: {cluster.init_method}")
                rows = cluster.run(pingpong, sizes, args.iters)[0]
                print(f"\nping-pong rank 0 <-> peer (one-way, median of {args.iters}):")
                print(format_table(rows, ["peer", "size_bytes", "latency_us", "bandwidth_GBps"]))
    except (ClusterError, ValueError, TimeoutError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Interrupted as err:
        print(f"interrupted by {err}; engines stopped", file=sys.stderr)
        return err.exit_code
    return 0


def _cleanup_cli(force: bool) -> int:
    if force:
        print(f"stopped {stop_all()} ipyparallel processes of this checkout (live runs too)")
        return 0
    stopped = cleanup()
    _, live = orphaned_clusters()
    print(f"stopped {stopped} processes of clusters whose owner died"
          + (f"; {len(live)} cluster(s) of live runs left running (add --stop-all --force to "
             "stop them too)" if live else ""))
    return 0


if __name__ == "__main__":
    # Import by name so engines unpickle ddlstudy.cluster.engines functions, not copies from
    # __main__.
    from ddlstudy.cluster.engines import main as _main
    from ddlstudy.host import entry

    raise SystemExit(entry.run(_main))
