"""How engines start beyond this machine: ipyparallel's own launchers, configured from params.

`cluster.launcher` picks one of ipyparallel's engine-set launchers (we add no ssh or batch code):

- local: `LocalEngineSetLauncher`, engines on this machine (the default).
- ssh:   `SSHEngineSetLauncher`, `slots` engines on each of `hosts` ("name:slots"), started over
         ssh with `remote_python`; connection files go by scp to a per-host profile folder.
- slurm: `SlurmEngineSetLauncher`, one `sbatch` job of `srun` engines (`--nodelist` from hosts).
- mpi:   `MPIEngineSetLauncher`, one `mpiexec -n N` (Open MPI flags: `--host`, `-x VAR`).

The controller stays on the driver, listening on `controller_ip` (default: the address of
`ifname` on the driver). `ifname` also names the engines' interface: GLOO_SOCKET_IFNAME and
NCCL_SOCKET_IFNAME, and DDLSTUDY_IFNAME, from which rank 0 takes the TCPStore's address (the
rendezvous), so ranks on two hosts meet on that network and not on 127.0.1.1. Every engine gets
IPYTHONDIR (the driver's, `<repo>/.ipython`, unless `env` names another) and `env`.

`LaunchSpec.validate()` checks everything that can be checked before anything starts and raises
`LaunchError` (a ValueError) with one line.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import shlex
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAUNCHERS = ("local", "ssh", "slurm", "mpi")
# Linux interface names: at most 15 bytes, no '/', ':' or whitespace.
IFNAME_RE = re.compile(r"^[A-Za-z0-9_.@+-]{1,15}$")
# Host names as ssh / Slurm / MPI take them: RFC 1123 labels, optionally user@.
HOST_RE = re.compile(r"^([A-Za-z0-9_.-]+@)?[A-Za-z0-9]([A-Za-z0-9.-]{0,253}[A-Za-z0-9])?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The engines' project root (their working directory) when it is not their own checkout's.
REMOTE_ROOT_ENV = "DDLSTUDY_REMOTE_ROOT"
MAX_ENGINES_PER_CORE = 8  # more engines started here than this per core only thrash
# Engines that replay compute sleep through it; a grid of them may start twice as many (each
# cell's record still says whether the host's CPUs were saturated: `cpu_bound`).
REPLAY_ENGINES_PER_CORE = 16


def engine_count_problem(engines: int, per_core: int = MAX_ENGINES_PER_CORE) -> str | None:
    """None when `engines` can start as processes here (no ipyparallel profile), else the
    one-line problem: checked by the CLIs before torch loads and by Cluster.start. per_core:
    engines allowed per core (REPLAY_ENGINES_PER_CORE for a grid whose every cell replays)."""
    cores = os.cpu_count() or 1
    if engines > per_core * cores:
        return (f"{engines} workers on {cores} cores would thrash: use at most "
                f"{per_core * cores} here, or a cluster profile")
    return None


def engines_per_core(computes: Sequence[str]) -> int:
    """Engines per core runs with these compute modes may start: REPLAY_ENGINES_PER_CORE where
    there are some and every one replays, else MAX_ENGINES_PER_CORE."""
    replayed = bool(computes) and all(c == "replay" for c in computes)
    return REPLAY_ENGINES_PER_CORE if replayed else MAX_ENGINES_PER_CORE


# Engines on other hosts are declared dead after HEARTBEAT_MISSES missed pings HEARTBEAT_MS
# apart (ipyparallel's default is 10 x 3000 ms); a loaded host answers within 1 s.
HEARTBEAT_MS = 1000
HEARTBEAT_MISSES = 8


class LaunchError(ValueError):
    """A launch setting that cannot work; the message (one line) names it and the fix."""


@dataclass(frozen=True)
class Host:
    """One node: its name as ssh / Slurm / MPI know it, and how many engines it runs."""

    name: str
    slots: int

    @property
    def short(self) -> str:
        """The name without user@ and domain: what `socket.gethostname()` usually says."""
        return self.name.rpartition("@")[2].split(".")[0]


def parse_hosts(spec: str | list[str] | tuple[str, ...] | None) -> list[Host]:
    """"h0:2,h1:2" (or ["h0:2", "h1"]) -> hosts; a host without ":slots" gets one slot."""
    if spec is None:
        return []
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    hosts: list[Host] = []
    for raw in items:
        item = str(raw).strip()
        if not item:
            raise LaunchError(f"empty host in {spec!r}: write hosts as name:slots,name:slots")
        name, sep, slots = item.rpartition(":") if ":" in item else (item, "", "1")
        if not HOST_RE.match(name):
            raise LaunchError(f"bad host name {name!r} in {item!r}: write hosts as name:slots, "
                              "e.g. node1:4 (a port goes into ssh_args, e.g. -p 2222)")
        if not slots.isdigit() or not 1 <= int(slots) <= 1024:
            raise LaunchError(f"bad slot count {slots!r} in {item!r}: slots is the number of "
                              "engines on that host, 1..1024, e.g. node1:4")
        if any(h.name == name for h in hosts):
            raise LaunchError(f"host {name!r} is listed twice in {spec!r}: give it once with "
                              "all its slots")
        hosts.append(Host(name, int(slots)))
    return hosts


def interface_ipv4(ifname: str) -> str | None:
    """The first IPv4 address of interface `ifname` on this machine (None: no such interface
    or no IPv4 address on it)."""
    import psutil

    for addr in psutil.net_if_addrs().get(ifname, []):
        if addr.family == socket.AF_INET:
            return str(addr.address)
    return None


def _strip_home(path: str) -> str:
    """ipyparallel's rule for remote profile folders: relative to the remote home when the
    local path is under this home."""
    home = str(Path.home()).rstrip("/") + "/"
    return path[len(home):] if path.startswith(home) else path


@dataclass
class LaunchSpec:
    """Where and how engines start. Built from ClusterParams (`ClusterParams.launch_spec()`) or
    the CLI (`python -m ddlstudy.cluster --launcher ssh --hosts h0:2,h1:2 --ifname eth0`)."""

    launcher: str = "local"
    hosts: list[Host] = field(default_factory=list)
    ifname: str | None = None
    controller_ip: str | None = None
    remote_python: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    ssh_args: list[str] = field(default_factory=list)
    launcher_args: list[str] = field(default_factory=list)
    remote_root: str | None = None

    # -- checks
    def validate(self) -> LaunchSpec:
        """One-line LaunchError for anything that cannot work; fills controller_ip from ifname."""
        if self.launcher not in LAUNCHERS:
            raise LaunchError(f"unknown launcher {self.launcher!r}; valid: {', '.join(LAUNCHERS)}")
        if self.launcher in ("ssh", "mpi") and not self.hosts:
            raise LaunchError(f"launcher {self.launcher} needs hosts, e.g. --hosts node1:2,node2:2")
        if self.launcher == "local" and self.remote_root:
            raise LaunchError("remote_root only applies to the ssh, slurm and mpi launchers: "
                              "drop it (local engines work in this checkout)")
        if self.launcher == "local" and self.hosts:
            raise LaunchError("hosts only apply to the ssh, slurm and mpi launchers: set "
                              "launcher: ssh (or drop hosts)")
        if self.ifname is not None and not IFNAME_RE.match(self.ifname):
            raise LaunchError(f"bad interface name {self.ifname!r}: at most 15 characters, no "
                              "'/', ':' or spaces (see `ip -br link` on a node)")
        if self.launcher != "local" and self.ifname is None:
            raise LaunchError(f"launcher {self.launcher} needs ifname, the network interface "
                              "the nodes reach each other on (e.g. eth0, ib0): without it gloo "
                              "binds the host name's address (127.0.1.1 on Debian)")
        if self.controller_ip is not None:
            try:
                ipaddress.IPv4Address(self.controller_ip)
            except ValueError:
                raise LaunchError(f"bad controller_ip {self.controller_ip!r}: an IPv4 address "
                                  "of this machine the engines can reach") from None
        elif self.ifname is not None:
            ip = interface_ipv4(self.ifname)
            if ip is None:
                raise LaunchError(f"interface {self.ifname!r} has no IPv4 address on this "
                                  "machine: name the nodes' interface (`ip -br addr`), or set "
                                  "controller_ip to this machine's address on that network")
            self.controller_ip = ip
        if self.launcher == "ssh" and str(self.controller_ip).startswith("127."):
            # (slurm / mpi on one node may use loopback)
            raise LaunchError(f"controller_ip {self.controller_ip} is loopback: engines on "
                              "other hosts cannot reach it; name the nodes' interface")
        for key, value in self.env.items():
            if not ENV_NAME_RE.match(str(key)) or not isinstance(value, str):
                raise LaunchError(f"bad env entry {key!r}: {value!r}: names like NAME, values "
                                  "strings")
        if self.remote_root is not None and not Path(self.remote_root).is_absolute():
            raise LaunchError(f"remote_root {self.remote_root!r} is not an absolute path: the "
                              "nodes' checkout, e.g. /opt/ddlstudy")
        if self.remote_python is not None and not self.remote_python.strip():
            raise LaunchError("remote_python is empty: the Python on the nodes, e.g. "
                              "/opt/ddlstudy/.venv/bin/python")
        return self

    @property
    def slots(self) -> int:
        """Engines the hosts hold (0 when the launcher takes the count from workers)."""
        return sum(h.slots for h in self.hosts)

    @property
    def is_remote(self) -> bool:
        return self.launcher != "local"

    def host_order(self) -> list[str]:
        """Short host names in the order given: ranks are grouped by host in this order."""
        return [h.short for h in self.hosts]

    # -- what the engines and ipyparallel get
    def engine_env(self, ipythondir: str) -> dict[str, str]:
        """Environment of every engine: the socket interface for gloo / NCCL, the interface the
        rendezvous address comes from, one IPYTHONDIR, then the user's `env`."""
        env: dict[str, str] = {"IPYTHONDIR": ipythondir}
        if self.remote_root:
            env[REMOTE_ROOT_ENV] = self.remote_root
        if self.ifname:
            env.update(GLOO_SOCKET_IFNAME=self.ifname, NCCL_SOCKET_IFNAME=self.ifname,
                       DDLSTUDY_IFNAME=self.ifname)
        env.update(self.env)
        return env

    def cluster_kwargs(self, ipythondir: str) -> dict[str, Any]:
        """Keyword arguments for `ipyparallel.Cluster` (engine_launcher_class, controller_ip,
        config, n): empty for the local launcher."""
        if not self.is_remote:
            return {}
        from ipyparallel.cluster import launcher as ipl
        from traitlets.config import Config

        env = self.engine_env(ipythondir)
        python = self.remote_python or sys.executable
        cfg = Config()
        kwargs: dict[str, Any] = {"controller_ip": self.controller_ip, "config": cfg,
                                  # the controller's heartbeat: how soon a dead engine on
                                  # another host is noticed (ipyparallel's default: 30 s)
                                  "controller_args": [f"--ping={HEARTBEAT_MS}",
                                                      "--HeartMonitor.max_heartmonitor_misses="
                                                      f"{HEARTBEAT_MISSES}"]}
        if self.launcher == "ssh":
            sec = cfg.SSHEngineSetLauncher
            base = _strip_home(env["IPYTHONDIR"])
            # One profile folder per host: with a shared file system, scp of the connection
            # file onto the same path would truncate the file it reads.
            sec.engines = {h.name: {"n": h.slots,
                                    "remote_profile_dir": f"{base}/ddlstudy-hosts/{h.short}"}
                           for h in self.hosts}
            sec.remote_python = python
            sec.engine_cmd = [python, "-m", "ipyparallel.engine"]
            sec.ssh_args = list(self.ssh_args)
            sec.scp_args = list(self.ssh_args)
            sec.environment = env
            sec.delay = 0.0
            # Each engine's launcher waits on its remote pid through ssh, poll_seconds per
            # call (default 60), and a stop joins that wait: 5 s bounds the stop.
            sec.poll_seconds = 5
            kwargs.update(engine_launcher_class=ipl.SSHEngineSetLauncher, n=self.slots)
        elif self.launcher == "slurm":
            sec = cfg.SlurmEngineSetLauncher
            sec.environment = env
            sec.engine_cmd = [python, "-m", "ipyparallel.engine"]
            # sbatch flags on its command line (ipyparallel's `options` reaches no template)
            opts = list(self.launcher_args)
            if self.hosts:
                opts.append("--nodelist=" + ",".join(h.name for h in self.hosts))
                if len({h.slots for h in self.hosts}) == 1:
                    opts.append(f"--ntasks-per-node={self.hosts[0].slots}")
            sec.submit_command = ["sbatch", *opts]
            # sbatch's script goes to work_dir/batch_file_name, and ipyparallel passes work_dir
            # '.' (the caller's cwd): an absolute name keeps it with the cluster's other files
            work = Path(ipythondir) / "ddlstudy-slurm"
            work.mkdir(parents=True, exist_ok=True)
            sec.batch_file_name = str(work / "slurm_engine.sbatch")
            kwargs.update(engine_launcher_class=ipl.SlurmEngineSetLauncher)
            if self.hosts:
                kwargs["n"] = self.slots
        else:  # mpi (Open MPI's mpiexec flags)
            sec = cfg.MPIEngineSetLauncher
            sec.environment = env
            sec.engine_cmd = [python, "-m", "ipyparallel.engine"]
            args = ["--host", ",".join(f"{h.name}:{h.slots}" for h in self.hosts)]
            # Open MPI hands remote ranks only the variables named by -x: ours, and the two
            # ipyparallel sets for its engines (which cluster, whose connection file)
            for key in sorted({*env, "IPP_CLUSTER_ID", "IPP_PROFILE_DIR"}):
                args += ["-x", key]
            if self.ssh_args:  # Open MPI starts its daemons on the hosts with this ssh
                args += ["--mca", "plm_rsh_agent", shlex.join(["ssh", *self.ssh_args])]
            if self.ifname and not any("if_include" in a for a in self.launcher_args):
                # mpiexec's own wiring and MPI's TCP transport on the nodes' network too
                args += ["--mca", "oob_tcp_if_include", self.ifname,
                         "--mca", "btl_tcp_if_include", self.ifname]
            sec.mpi_args = args + list(self.launcher_args)
            kwargs.update(engine_launcher_class=ipl.MPIEngineSetLauncher, n=self.slots)
        return kwargs

    def engine_path(self, path: str, driver_root: Path) -> str:
        """A path as the engines get it. Launched on other hosts, each engine works in its own
        project root (`remote_root`, else its checkout): a relative path stays relative (it
        resolves there), an absolute one under the driver's checkout `driver_root` is sent
        relative to it, any other absolute path as is (a file system the nodes share)."""
        if not self.is_remote or not Path(path).is_absolute():
            return path
        try:
            return str(Path(path).relative_to(driver_root))
        except ValueError:
            return path

    def describe(self) -> dict[str, Any]:
        """What the records say about the launch."""
        return {"launcher": self.launcher, "hosts": [f"{h.name}:{h.slots}" for h in self.hosts],
                "ifname": self.ifname, "controller_ip": self.controller_ip,
                "remote_root": self.remote_root}


def launch_spec(launcher: str = "local", hosts: str | list[str] | None = None,
                ifname: str | None = None, controller_ip: str | None = None,
                remote_python: str | None = None, env: dict[str, str] | None = None,
                ssh_args: str | list[str] | None = None,
                launcher_args: str | list[str] | None = None,
                remote_root: str | None = None) -> LaunchSpec:
    """A validated LaunchSpec from plain values (params, CLI flags); LaunchError otherwise."""
    def split(v: str | list[str] | None) -> list[str]:
        return shlex.split(v) if isinstance(v, str) else list(v or [])

    return LaunchSpec(launcher=launcher, hosts=parse_hosts(hosts), ifname=ifname,
                      controller_ip=controller_ip, remote_python=remote_python,
                      env=dict(env or {}), ssh_args=split(ssh_args),
                      launcher_args=split(launcher_args), remote_root=remote_root).validate()


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """The launch flags of `python -m ddlstudy.cluster` and `python -m ddlstudy.train` (the same
    names as params' `cluster:` keys)."""
    a = parser.add_argument
    a("--launcher", default="local", choices=list(LAUNCHERS),
      help="how engines start (ipyparallel's launchers; docs/cluster.md)")
    a("--hosts", help="name:slots,name:slots (ssh, mpi; slurm: --nodelist)")
    a("--ifname", help="the nodes' interface: gloo/NCCL sockets, rendezvous")
    a("--controller-ip", help="controller address (default: ifname's here)")
    a("--remote-python", help="Python on the nodes (default: this one)")
    a("--remote-root", help="the nodes' checkout, when not where remote_python's ddlstudy is: "
      "engines work there and relative paths (--data-root) resolve there")
    a("--ssh-args", help="extra ssh/scp arguments, e.g. '-F ssh_config'")
    a("--launcher-args", help="extra sbatch options / mpiexec arguments")
    a("--env", action="append", default=[], metavar="NAME=VALUE",
      help="engine environment (repeatable)")


def env_from_args(items: list[str]) -> dict[str, str]:
    """--env NAME=VALUE items -> a dict; LaunchError on an item without '='."""
    bad = [item for item in items if "=" not in item]
    if bad:
        raise LaunchError(f"bad --env {bad[0]!r}: write NAME=VALUE")
    return dict(item.split("=", 1) for item in items)
