"""Hosts on one machine for multi-host tests: network namespaces with their own hostnames and sshd.

Each host i is a network namespace `<prefix><i>` whose processes also share a UTS namespace with
hostname `h<i>` (sshd runs under `unshare --uts`, so everything ssh starts there says `h<i>`).
Its interface is called `<prefix>nic` in every namespace (the same name on each node, as eth0 is
on a real cluster), joined to the bridge `<prefix>br` in the root namespace, which holds the
bridge address (the controller's). Each namespace runs Debian's `/usr/sbin/sshd` on its own
address, with host and client keys made into a temporary folder; `ssh -F <workdir>/ssh_config h0`
reaches it as root.

Nothing outside the prefix is touched: `clean(prefix)` removes this prefix's namespaces, links,
/etc/netns/<prefix>* folders and the processes inside those namespaces, and runs at the start of
`up()` too (a killed run's leftovers). Root only.

    python scripts/multihost/nshosts.py up --hosts 3      # prints the ssh_config path; Ctrl-C ends
    python scripts/multihost/nshosts.py clean
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

PREFIX = "ddmh"
SUBNET_CANDIDATES = [f"10.231.{k}.0/24" for k in range(0, 250, 7)]
SSHD = "/usr/sbin/sshd"
CMD_TIMEOUT_S = 20


class HostsError(RuntimeError):
    """Namespace hosts cannot be made here; the message (one line) says why."""


def _run(*cmd: str, check: bool = True, timeout: float = CMD_TIMEOUT_S) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise HostsError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _routed_subnets() -> list[ipaddress.IPv4Network]:
    nets = []
    for line in _run("ip", "-4", "route", "show", "table", "all", check=False).splitlines():
        word = line.split()[0] if line.split() else ""
        try:
            nets.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    return nets


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.231.0.0/16 that no route on this host overlaps."""
    used = _routed_subnets()
    for cand in SUBNET_CANDIDATES:
        net = ipaddress.ip_network(cand)
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise HostsError("no free /24 in 10.231.0.0/16 on this host")


def namespace_pids(ns: str) -> set[int]:
    """Processes whose network namespace is `ns`."""
    out = _run("ip", "netns", "pids", ns, check=False)
    return {int(p) for p in out.split() if p.isdigit()}


def _kill(pids: set[int], grace_s: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def clean(prefix: str = PREFIX) -> list[str]:
    """Remove this prefix's namespaces (and their processes), links and /etc/netns folders."""
    removed = []
    for line in _run("ip", "netns", "list", check=False).splitlines():
        ns = line.split()[0] if line.split() else ""
        if ns.startswith(prefix):
            _kill(namespace_pids(ns))
            _run("ip", "netns", "delete", ns, check=False)
            removed.append(ns)
    for line in _run("ip", "-o", "link", "show", check=False).splitlines():
        parts = line.split(":")
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        if name.startswith(prefix):
            _run("ip", "link", "delete", name, check=False)
            removed.append(name)
    for folder in Path("/etc/netns").glob(f"{prefix}*") if Path("/etc/netns").is_dir() else []:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def available() -> tuple[bool, str]:
    """(True, "") where namespace hosts can be made, else (False, one line why)."""
    if os.geteuid() != 0:
        return False, "needs root (network namespaces, sshd)"
    for tool in ("ip", "unshare", "ssh", "ssh-keygen", "scp"):
        if shutil.which(tool) is None:
            return False, f"{tool} not found"
    if not os.access(SSHD, os.X_OK):
        return False, f"{SSHD} not found (apt-get install -y openssh-server)"
    return True, ""


def ensure_sshd() -> tuple[bool, str]:
    """Install Debian's openssh-server when sshd is missing (root only)."""
    if os.access(SSHD, os.X_OK):
        return True, ""
    if os.geteuid() != 0:
        return False, "sshd not installed and not root"
    for cmd in (["apt-get", "install", "-y", "-q", "openssh-server"],
                ["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "openssh-server"]):
        try:
            subprocess.run(cmd, capture_output=True, timeout=300, check=False,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        except subprocess.TimeoutExpired:
            return False, "apt-get install openssh-server timed out"
        if os.access(SSHD, os.X_OK):
            return True, ""
    return False, "apt-get install openssh-server failed (no package index or network?)"


class NamespaceHosts:
    """n hosts h0..h(n-1), each a network + UTS namespace with sshd; a context manager.

    After `up()`: `names`, `ips`, `namespaces`, `ifname` (the interface name inside every
    namespace), `bridge_ip` (the controller's address), `ssh_config` (a file for `ssh -F`).
    """

    def __init__(self, n: int = 3, prefix: str = PREFIX, workdir: str | Path | None = None) -> None:
        if not 1 <= n <= 9:
            raise HostsError(f"n must be 1..9, got {n}")
        self.n, self.prefix = n, prefix
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"{prefix}-"))
        self.names = [f"h{i}" for i in range(n)]
        self.namespaces = [f"{prefix}{i}" for i in range(n)]
        self.ifname = f"{prefix}nic"
        self.bridge = f"{prefix}br"
        self.ips: list[str] = []
        self.bridge_ip = ""
        self.sshd: list[subprocess.Popen[bytes]] = []
        self.ssh_config = self.workdir / "ssh_config"
        self.up_s = 0.0

    # -- lifecycle
    def up(self) -> NamespaceHosts:
        """Start the hosts (removing this prefix's leftovers first); `up_s`: how long it took."""
        t0 = time.monotonic()
        ok, why = available()
        if not ok:
            raise HostsError(why)
        clean(self.prefix)
        try:
            self._network()
            self._keys()
            for i in range(self.n):
                self._start_sshd(i)
            self._wait_ssh()
        except BaseException:
            self.down()
            raise
        self.up_s = time.monotonic() - t0
        return self

    def close_connections(self) -> None:
        """End the shared ssh connections (ControlMaster) to every host: afterwards a host runs
        nothing but its sshd listener unless something else is left."""
        for name in self.names:
            try:
                _run("ssh", "-F", str(self.ssh_config), "-O", "exit", name, check=False,
                     timeout=10)
            except subprocess.TimeoutExpired:
                continue

    def down(self) -> None:
        """Stop every process in the namespaces (sshd last), remove namespaces, links, files."""
        if self.ssh_config.exists():
            self.close_connections()
        for ns in self.namespaces:
            _kill(namespace_pids(ns))
        for proc in self.sshd:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.sshd.clear()
        clean(self.prefix)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> NamespaceHosts:
        return self.up()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()

    # -- parts
    def _network(self) -> None:
        subnet = free_subnet()
        addrs = list(subnet.hosts())
        self.bridge_ip = str(addrs[0])
        self.ips = [str(addrs[10 + i]) for i in range(self.n)]
        plen = subnet.prefixlen
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.bridge_ip}/{plen}", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(
            f"{ip} {name}\n" for ip, name in zip(self.ips, self.names, strict=True))
        for i, ns in enumerate(self.namespaces):
            host_end, peer = f"{self.prefix}v{i}", f"{self.prefix}p{i}"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", host_end, "master", self.bridge)
            _run("ip", "link", "set", host_end, "up")
            _run("ip", "link", "set", peer, "netns", ns)
            _run("ip", "-n", ns, "link", "set", peer, "name", self.ifname)
            _run("ip", "-n", ns, "addr", "add", f"{self.ips[i]}/{plen}", "dev", self.ifname)
            _run("ip", "-n", ns, "link", "set", self.ifname, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            # `ip netns exec` bind-mounts /etc/netns/<ns>/* over /etc: names resolve per host
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file)
            (etc / "hostname").write_text(self.names[i] + "\n")

    def _keys(self) -> None:
        for key in ("host_key", "id_ed25519"):
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.prefix}-{key}",
                 "-f", str(self.workdir / key))
        shutil.copy(self.workdir / "id_ed25519.pub", self.workdir / "authorized_keys")
        os.chmod(self.workdir, 0o700)
        lines = []
        for name, ip in zip(self.names, self.ips, strict=True):
            lines += [f"Host {name}", f"  HostName {ip}", "  User root",
                      f"  IdentityFile {self.workdir / 'id_ed25519'}", "  IdentitiesOnly yes",
                      "  StrictHostKeyChecking no", "  UserKnownHostsFile /dev/null",
                      "  BatchMode yes", "  ConnectTimeout 5", "  LogLevel ERROR",
                      # one connection per host, reused: ipyparallel's SSH launcher runs ~5
                      # ssh commands per engine (1 s each on a loaded 2-core machine)
                      "  ControlMaster auto", f"  ControlPath {self.workdir}/cm-%h",
                      "  ControlPersist 120", ""]
        self.ssh_config.write_text("\n".join(lines))

    def _start_sshd(self, i: int) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
        cfg = self.workdir / f"sshd_{i}.conf"
        cfg.write_text("\n".join([
            f"ListenAddress {self.ips[i]}", "Port 22", f"HostKey {self.workdir / 'host_key'}",
            f"PidFile {self.workdir / f'sshd_{i}.pid'}",
            f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "UseDNS no",
            "Subsystem sftp internal-sftp", "MaxStartups 100", "MaxSessions 100",
            "LogLevel ERROR", ""]))
        _run(SSHD, "-t", "-f", str(cfg))
        log = open(self.workdir / f"sshd_{i}.log", "wb")  # noqa: SIM115 - lives with sshd
        self.sshd.append(subprocess.Popen(
            ["ip", "netns", "exec", self.namespaces[i], "unshare", "--uts", "--",
             "sh", "-c", f'hostname {self.names[i]} && exec {SSHD} -D -e -f "$0"', str(cfg)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True))
        log.close()

    def shape(self, tbf: dict[str, int]) -> None:
        """tc tbf on both directions of every host's link (egress of its interface = uplink,
        egress of the bridge-side veth = downlink), as ddlstudy's emulated network does;
        `tbf` = ddlstudy.network.emulated.netem.tbf_params(rate_bps)."""
        args = ["root", "tbf", "rate", f"{tbf['rate_bps']}bit", "burst",
                str(tbf["burst_bytes"]), "limit", str(tbf["limit_bytes"])]
        for i, ns in enumerate(self.namespaces):
            _run("tc", "-n", ns, "qdisc", "replace", "dev", self.ifname, *args)
            _run("tc", "qdisc", "replace", "dev", f"{self.prefix}v{i}", *args)

    def shaped_bytes(self, i: int) -> tuple[int, int]:
        """Bytes host i's tbf qdiscs passed: (uplink, downlink)."""
        import json

        def sent(*cmd: str) -> int:
            rows = json.loads(_run("tc", "-s", "-j", *cmd) or "[]")
            return sum(int(r.get("bytes", 0)) for r in rows if r.get("kind") == "tbf")

        return (sent("-n", self.namespaces[i], "qdisc", "show", "dev", self.ifname),
                sent("qdisc", "show", "dev", f"{self.prefix}v{i}"))

    def ssh(self, host: str, *cmd: str, timeout: float = CMD_TIMEOUT_S) -> str:
        """Run a command on a host over ssh; its stdout."""
        return _run("ssh", "-F", str(self.ssh_config), host, *cmd, timeout=timeout)

    def _wait_ssh(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        for i, name in enumerate(self.names):
            while True:
                if self.sshd[i].poll() is not None:
                    log = (self.workdir / f"sshd_{i}.log").read_text().strip()
                    raise HostsError(f"sshd on {name} exited: {log[-300:]}")
                try:
                    if self.ssh(name, "hostname", timeout=5).strip() == name:
                        break
                except (HostsError, subprocess.TimeoutExpired):
                    pass
                if time.monotonic() > deadline:
                    raise HostsError(f"sshd on {name} ({self.ips[i]}) not reachable within "
                                     f"{timeout_s:g} s")
                time.sleep(0.2)

    def processes(self, i: int) -> set[int]:
        """Processes in host i's namespace other than its sshd listener."""
        return namespace_pids(self.namespaces[i]) - {p.pid for p in self.sshd} - {
            c for p in self.sshd for c in _children(p.pid)}

    def settled(self, wait_s: float = 10.0) -> list[set[int]]:
        """Processes left on each host once the shared ssh connections are closed (they hold a
        session process on each host) and the last sessions had up to `wait_s` to end."""
        self.close_connections()
        deadline = time.monotonic() + wait_s
        while True:
            left = [self.processes(i) for i in range(self.n)]
            if not any(left) or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    @staticmethod
    def describe(left: list[set[int]]) -> list[list[str]]:
        """`pid:command line` (its first 80 bytes) of each process in `settled()`'s sets."""
        out = []
        for pids in left:
            names = []
            for pid in sorted(pids):
                try:
                    names.append(f"{pid}:{Path(f'/proc/{pid}/cmdline').read_bytes()[:80]!r}")
                except OSError:
                    continue
            out.append(names)
        return out


def _children(pid: int) -> set[int]:
    """The listener itself: `ip netns exec` -> unshare -> sh exec'd into sshd keep one pid, but
    unshare forks where it cannot exec; count its direct child too."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return set()
    found = set()
    for kid in map(int, kids):
        try:
            cmd = Path(f"/proc/{kid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"sshd") and b"-D" in cmd:
            found.add(kid)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["up", "clean"])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--prefix", default=PREFIX)
    args = parser.parse_args(argv)
    if args.action == "clean":
        print("removed:", " ".join(clean(args.prefix)) or "nothing")
        return 0

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        with NamespaceHosts(args.hosts, args.prefix) as hosts:
            print(f"hosts {' '.join(hosts.names)} at {' '.join(hosts.ips)}; bridge "
                  f"{hosts.bridge_ip}; interface {hosts.ifname}; ssh -F {hosts.ssh_config} h0",
                  flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except HostsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
