"""A one-node Slurm cluster (Debian's slurm-wlm and munge) in a temporary folder, for tests.

munged, slurmctld and slurmd run in the foreground as children of this process, with their
sockets, state, spool, logs and pid files in the folder and their own ports (16817/16818 unless
taken), so the system's munge or Slurm (if any) are left alone. Commands find the cluster through
SLURM_CONF (`node.env`). The node is this machine (`hostname -s`), at 127.0.0.1. Root only.

    python scripts/multihost/slurm_node.py      # starts it, prints SLURM_CONF; Ctrl-C stops it
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

DAEMONS = {"munged": "/usr/sbin/munged", "slurmctld": "/usr/sbin/slurmctld",
           "slurmd": "/usr/sbin/slurmd"}
PORTS = (16817, 16818)


class SlurmError(RuntimeError):
    """Slurm cannot start here; the message (one line) says why."""


def available() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root (slurmd, munged)"
    for name, path in DAEMONS.items():
        if not os.access(path, os.X_OK):
            return False, f"{name} not found (apt-get install -y slurm-wlm munge)"
    for tool in ("sbatch", "squeue", "scancel", "sinfo", "srun"):
        if shutil.which(tool) is None:
            return False, f"{tool} not found (apt-get install -y slurm-wlm)"
    if not Path("/etc/munge/munge.key").exists():
        return False, "/etc/munge/munge.key missing (apt-get install -y munge)"
    return True, ""


def ensure_installed() -> tuple[bool, str]:
    """apt-get install slurm-wlm munge where they are missing (root only)."""
    ok, why = available()
    if ok or os.geteuid() != 0:
        return ok, why
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "install", "-y", "-q", "slurm-wlm", "munge"],
                ["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "slurm-wlm", "munge"]):
        try:
            subprocess.run(cmd, capture_output=True, timeout=600, check=False, env=env)
        except subprocess.TimeoutExpired:
            return False, "apt-get install slurm-wlm munge timed out"
        ok, why = available()
        if ok:
            return ok, why
    return False, why


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no daemon
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class SlurmNode:
    """munged + slurmctld + slurmd on this machine, one partition `ddmh` of one node."""

    def __init__(self, workdir: str | Path | None = None, cpus: int | None = None) -> None:
        self._own = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="ddmh-slurm-"))
        self.node = socket.gethostname().split(".")[0]
        self.cpus = cpus or os.cpu_count() or 1
        self.conf = self.dir / "slurm.conf"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def _run(self, *cmd: str, timeout: float = 20) -> str:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})
        if proc.returncode != 0:
            raise SlurmError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def up(self, timeout_s: float = 60) -> SlurmNode:
        ok, why = available()
        if not ok:
            raise SlurmError(why)
        if not all(_port_free(p) for p in PORTS):
            raise SlurmError(f"ports {PORTS} are taken (another Slurm running?)")
        try:
            self._configure()
            self._start(timeout_s)
        except BaseException:
            self.down()
            raise
        return self

    def _configure(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        shutil.copy("/etc/munge/munge.key", d / "munge.key")
        os.chmod(d / "munge.key", 0o600)
        self.conf.write_text("\n".join([
            "ClusterName=ddmh", f"SlurmctldHost={self.node}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={d / 'munge.sock'}",
            f"SlurmctldPort={PORTS[0]}", f"SlurmdPort={PORTS[1]}",
            f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d / 'slurmd.pid'}",
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "MpiDefault=none", "ReturnToService=2", "SwitchType=switch/none",
            "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none", "SchedulerType=sched/backfill",
            "SlurmctldTimeout=30", "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=5",
            "MinJobAge=5",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN",
            "PartitionName=ddmh Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=FORCE:4", ""]))

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.dir / "log" / f"{name}.out", "wb")  # noqa: SIM115 - lives with the daemon
        self.procs[name] = subprocess.Popen([DAEMONS[name], *args], stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env={**os.environ, **self.env},
                                            start_new_session=True)
        log.close()

    def _start(self, timeout_s: float) -> None:
        d = self.dir
        self._spawn("munged", "-F", "--force", f"--socket={d / 'munge.sock'}",
                    f"--key-file={d / 'munge.key'}", f"--pid-file={d / 'munged.pid'}",
                    f"--log-file={d / 'log' / 'munged.log'}", f"--seed-file={d / 'munged.seed'}")
        self._wait(lambda: (d / "munge.sock").exists(), 10, "munged")
        self._spawn("slurmctld", "-D", "-i", "-f", str(self.conf))
        self._spawn("slurmd", "-D", "-f", str(self.conf))

        def idle() -> bool:
            try:
                state = self._run("sinfo", "-h", "-o", "%T", timeout=5).strip()
            except (SlurmError, subprocess.TimeoutExpired):
                return False
            return state in ("idle", "mixed", "allocated")

        self._wait(idle, timeout_s, "the node (sinfo says idle)")

    def _wait(self, ready: object, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():  # type: ignore[operator]
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    out = (self.dir / "log" / f"{name}.out").read_text(errors="replace")
                    raise SlurmError(f"{name} exited ({proc.returncode}): "
                                     f"{out.strip().splitlines()[-1:] or ''}")
            if time.monotonic() > deadline:
                raise SlurmError(f"{what} not ready within {timeout_s:g} s")
            time.sleep(0.3)

    def jobs(self) -> list[str]:
        """Ids of the jobs Slurm still knows as pending or running."""
        try:
            out = self._run("squeue", "-h", "-o", "%i", timeout=10)
        except (SlurmError, subprocess.TimeoutExpired):
            return []
        return out.split()

    def down(self) -> None:
        """Cancel every job, stop the daemons (SIGTERM, then SIGKILL), remove the folder."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            for job in self.jobs():
                try:
                    self._run("scancel", job, timeout=10)
                except (SlurmError, subprocess.TimeoutExpired):
                    pass
            deadline = time.monotonic() + 15
            while self.jobs() and time.monotonic() < deadline:
                time.sleep(0.3)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if self._own:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SlurmNode:
        return self.up()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()


def main() -> int:
    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        with SlurmNode() as node:
            print(f"export SLURM_CONF={node.conf}  # node {node.node}, partition ddmh",
                  flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except SlurmError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
