"""An emulated cluster network on one machine: a network namespace per node, shaped veth links.

Long because: it owns every kernel object the emulator creates (namespaces, bridge, veth, tc
qdiscs, state files) and removes them; creation and cleanup stay in one module so the cleanup
invariants (only our own objects, a dead owner's objects always) are checked in one place.
Measuring and the command line are in `measure.py`.

Each node (worker or PS server) gets its own network namespace with one veth whose other end is a
port of a bridge in the root namespace - a star topology, like hosts on one switch. Every link is
shaped with `tc tbf` in both directions (egress of the node's veth = its uplink, egress of the
bridge port = its downlink), so each node has a full-duplex link of the profile's rate, scaled by
one factor this machine can drive.

What is and is not emulated:
- Bandwidth: yes (tbf, measured within a few % of the target; goodput is lower by the TCP/IP/
  Ethernet headers, 66 of every 1514 bytes at MTU 1500).
- Latency: NO. `netem` does not exist on this kernel (nor fq/codel), so no delay can be added; the
  real one-way latency of each profile is stored for cost models, with `latency_emulated: False`.
  (A run may ask for it in the transport instead: `latency.py`, a sender-side delay per message.)
  Measured one-way latency between namespaces is that of veth + TCP (tens of microseconds).
- Packets: with segmentation offload off (ethtool, or the same ioctl ethtool uses) the counters
  count wire-sized packets (<= MTU); if neither works, a "packet" is a merged segment of up to
  64 KiB and `describe()["packet_counting"]` says so.

Everything created is named `ddls<run id>-...` (namespaces, veths, bridge; the qdiscs live on the
veths) and recorded in a state file with the creating pid, so `cleanup_all()` removes what a crashed
run left behind (with the engines still running in its namespaces and the controller on its bridge
address) and never touches another live run's network, nor any interface not ours.

Engines in the namespaces (`start_cluster_in_namespaces`): each engine is started as
`ip netns exec <ns> ipengine` with GLOO_SOCKET_IFNAME=<its veth> and DDLSTUDY_HOST_IP=<its address>,
the controller listens on the bridge address. Ranks follow engine registration order, so rank r
is not necessarily node r: `rank_nodes(cluster, net)` maps them, `net.counters(rank_nodes(...))`
reads the counters in rank order.

    with EmulatedNetwork(3, "10GbE") as net:          # or network_or_loopback(...) -> net | None
        cluster = start_cluster_in_namespaces(net)
        ...
        record(net.describe())                         # profile, scale, real/emulated rates

    python -m ddlstudy.netem --check --network 10GbE   # 2 nodes, shaped rate vs measured
    python -m ddlstudy.netem --calibrate               # unshaped veth rate: what scale fits
    python -m ddlstudy.netem --cleanup [--force]       # remove leftovers of crashed runs
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil

from ddlstudy.host import identity
from ddlstudy.network.profiles import HEADER_BYTES, MTU, PROFILES, UNSHAPED, Profile  # noqa: F401

PREFIX = "ddls"
_NAME_RE = re.compile(rf"^{PREFIX}([0-9a-f]{{4}})-")
STATE_DIR = Path(os.environ.get("DDLSTUDY_NETEM_STATE", "/run/ddlstudy-netem"))
SUBNET_BASE = "10.213.0.0/16"  # one /24 per network, skipping any subnet the host already routes
MAX_NODES = 250

# One scale for every profile, so their ratios stay those of the real networks. Measured here
# (2 cores, Python sockets, one TCP stream between two namespaces): unshaped veth 11-15 Gbit/s with
# segmentation offload on, 2.6-2.8 Gbit/s with it off (wire-sized packets, the default); tbf holds
# its rate within ~5% up to ~1 Gbit/s with offload off and falls behind above (1.8 of 2 Gbit/s).
# 1/100 puts the fastest profile (IB-EDR, 100 Gb/s) at 1 Gbit/s and 10GbE at 100 Mbit/s. It also
# keeps the compute/communication ratio of a GPU cluster roughly: a 2-core CPU computes a step
# about two orders of magnitude slower than a datacenter GPU.
DEFAULT_SCALE = 0.01
# Several links at once share the same 2 cores: 3-4 nodes sending round a ring, unshaped, offload
# off, moved 3.6-3.9 Gbit/s in total here (IB-EDR x 3 nodes held 93% of its rate per link). Beyond
# this total the emulation is CPU-bound, not link-bound: describe() flags it.
AGGREGATE_CEILING_BPS = 3.6e9
# The same with segmentation offload ON (the throughput chapters' default: only chapter 04's
# packet counts need it off). Measured here by `netem --calibrate` (every node of a 4-7 node ring
# sending at once, unshaped) on a 2-core host shared with other jobs; `--calibrate` stores the
# host's own figures (CALIBRATION_FILE), which replace these.
CALIBRATION_DEFAULTS: dict[str, dict[str, float]] = {
    # aggregate: payload all links carry together, unshaped; link: fastest tbf rate one link of
    # a loaded ring still held within 10 % of
    "offload_off": {"aggregate_bps": AGGREGATE_CEILING_BPS, "link_bps": 1e9},
    "offload_on": {"aggregate_bps": 2.2e9, "link_bps": 1e9},
}
# Scales tried, largest first: the largest that fits the calibration is used (records keep it).
SCALES = (0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001)
HEADROOM = 0.8  # use at most this share of the measured ceiling
HELD = 0.85  # a link "holds" its rate when its payload reaches this share (headers take ~4.4 %)
CALIBRATION_FILE = Path(os.environ.get("DDLSTUDY_NETEM_CALIBRATION",
                                       "outputs/netem_calibration.json"))




class NetemError(RuntimeError):
    """A problem building the emulated network; the message names the command and its error."""


# ----------------------------------------------------------------------------- commands
def _bin(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if not path:
        raise NetemError(f"`{name}` not found: install iproute2 (apt-get install iproute2)")
    return path


def _run(args: Sequence[str], check: bool = True, timeout: float = 30) -> str:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NetemError(f"`{' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _ip(*args: str, check: bool = True) -> str:
    return _run([_bin("ip"), *args], check=check)


def _tc(*args: str, check: bool = True) -> str:
    return _run([_bin("tc"), *args], check=check)


_AVAILABLE: tuple[bool, str] | None = None


def available(refresh: bool = False) -> tuple[bool, str]:
    """(True, "") when namespaces, veth, bridge and tbf work here; else (False, why not).

    Probes by creating (and removing) a throw-away namespace with a tbf qdisc, because being root
    is not enough inside some containers.
    """
    global _AVAILABLE
    if _AVAILABLE is not None and not refresh:
        return _AVAILABLE
    _AVAILABLE = _probe()
    return _AVAILABLE


def _probe() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return False, "not root: network namespaces and tc need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
    for tool in ("ip", "tc"):
        if not (shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")):
            return False, f"`{tool}` not found (install iproute2)"
    ns = f"{PREFIX}{secrets.token_hex(2)}-probe"
    try:
        _ip("netns", "add", ns)
    except (NetemError, OSError, subprocess.SubprocessError) as err:
        return False, f"cannot create a network namespace: {err}"
    try:
        _ip("-n", ns, "link", "set", "lo", "up")
        _tc("-n", ns, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit", "burst",
            "16000", "limit", "32000")
    except (NetemError, OSError, subprocess.SubprocessError) as err:
        return False, f"tc tbf does not work in a namespace: {err}"
    finally:
        _ip("netns", "del", ns, check=False)
    return True, ""


def netem_qdisc_known() -> bool:
    """Whether this kernel has the netem qdisc (loaded, or a module file for this release)."""
    if Path("/sys/module/sch_netem").exists():
        return True
    release = os.uname().release
    base = Path("/lib/modules") / release
    builtin = base / "modules.builtin"
    if builtin.exists() and "sch_netem" in builtin.read_text(errors="replace"):
        return True
    return any(base.glob("kernel/net/sched/sch_netem.ko*"))


def latency_note() -> str:
    """What the records say about latency: ddlstudy shapes rates only (tc tbf), whatever the
    kernel has; the note says whether netem exists here, as found, not as assumed."""
    found = ("netem is available on this kernel but not used" if netem_qdisc_known()
             else "no netem qdisc found on this kernel (/sys/module, /lib/modules)")
    return f"not emulated: links are rate-shaped with tc tbf only; {found}"


# ----------------------------------------------------------------------------- offloads
SIOCETHTOOL = 0x8946
_ETHTOOL_GET = {"tso": 0x1E, "gso": 0x23, "gro": 0x2B}
_ETHTOOL_SET = {"tso": 0x1F, "gso": 0x24, "gro": 0x2C}


def _ethtool_ioctl(iface: str, cmd: int, value: int = 0) -> int:
    """The legacy ETHTOOL_[GS]{TSO,GSO,GRO} ioctl: what `ethtool -k/-K` does, without ethtool."""
    data = ctypes.create_string_buffer(struct.pack("II", cmd, value))
    ifreq = struct.pack("16sP", iface.encode()[:15], ctypes.addressof(data)).ljust(40, b"\0")
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as s:
        fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifreq)
    return int(struct.unpack("II", data.raw[:8])[1])


def offload_state(iface: str) -> dict[str, bool] | None:
    """{tso, gso, gro: on?} of an interface in this process's namespace; None if unreadable."""
    try:
        return {k: bool(_ethtool_ioctl(iface, c)) for k, c in _ETHTOOL_GET.items()}
    except OSError:
        return None


def packet_counting(iface: str) -> str:
    """What one "packet" of this interface's counters is, for the records."""
    if iface == "lo":
        return "loopback (segments up to 64 KiB, offload on)"
    state = offload_state(iface)
    if state is None:
        return "unknown (offload state unreadable)"
    if state["tso"] or state["gso"] or state["gro"]:
        return "merged segments (offload on)"
    return "wire-sized (offload off)"


def _offload_off(iface: str) -> str | None:
    """Turn TSO/GSO/GRO off on a root-namespace interface; the method that worked, or None."""
    ethtool = shutil.which("ethtool") or shutil.which("ethtool", path="/usr/sbin:/sbin")
    if ethtool:
        proc = subprocess.run([ethtool, "-K", iface, "tso", "off", "gso", "off", "gro", "off"],
                              capture_output=True, text=True)
        if proc.returncode == 0 and offload_state(iface) in (None, _ALL_OFF):
            return "ethtool"
    try:
        for cmd in _ETHTOOL_SET.values():
            _ethtool_ioctl(iface, cmd, 0)
    except OSError:
        return None
    return "ioctl" if offload_state(iface) == _ALL_OFF else None


_ALL_OFF = {"tso": False, "gso": False, "gro": False}


# ----------------------------------------------------------------------------- state / cleanup
def _state_file(run_id: str) -> Path:
    return STATE_DIR / f"{run_id}.json"


def _owner_alive(run_id: str) -> bool:
    try:
        state = json.loads(_state_file(run_id).read_text())
        owner = state.get("owner") or {"pid": state["pid"],
                                        "create_time": state["pid_create_time"]}
    except (OSError, ValueError, KeyError, AttributeError):
        return False
    return identity.matches(owner) is not None


def _our_objects() -> dict[str, dict[str, list[str]]]:
    """Every ddls-named namespace and link in the root namespace, grouped by run id."""
    found: dict[str, dict[str, list[str]]] = {}
    try:
        for line in _ip("netns", "list", check=False).splitlines():
            name = line.split()[0] if line.strip() else ""
            m = _NAME_RE.match(name)
            if m:
                found.setdefault(m.group(1), {"netns": [], "links": []})["netns"].append(name)
        for link in json.loads(_ip("-j", "link", "show", check=False) or "[]"):
            name = link.get("ifname", "")
            m = _NAME_RE.match(name)
            if m:
                found.setdefault(m.group(1), {"netns": [], "links": []})["links"].append(name)
    except NetemError:
        pass
    if STATE_DIR.is_dir():
        for f in STATE_DIR.glob("*.json"):
            found.setdefault(f.stem, {"netns": [], "links": []})
    return found


def _run_controllers(run_id: str) -> set[int]:
    """The ipyparallel controller a run started on its bridge address (it lives in the root
    namespace, so the namespace sweep does not find it)."""
    try:
        bridge_ip = json.loads(_state_file(run_id).read_text())["bridge_ip"]
    except (OSError, ValueError, KeyError):
        return set()
    if not bridge_ip:
        return set()
    pids = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if f"--ip={bridge_ip}" in cmd and any("ipyparallel" in c or "ipcontroller" in c
                                              for c in cmd):
            pids.add(proc.pid)
    return pids


def _remove_run(run_id: str, netns: Sequence[str], links: Sequence[str]) -> list[str]:
    from ddlstudy.cluster.engines import kill_after_grace

    removed = []
    pids = _run_controllers(run_id)
    for ns in netns:
        # processes started in our namespace: engines (and nannies) of a crashed run
        pids.update(int(p) for p in _ip("netns", "pids", ns, check=False).split() if p.isdigit())
    pids.discard(os.getpid())
    if pids:
        kill_after_grace(pids, 2.0)
        removed.append(f"processes {sorted(pids)}")
    for ns in netns:
        _ip("netns", "del", ns, check=False)
        removed.append(f"netns {ns}")
    # Deleting a namespace deletes its veth end and, with it, the peer; the bridge goes last.
    for name in sorted(links, key=lambda n: n.endswith("-br")):
        if _ip("link", "show", "dev", name, check=False):
            _ip("link", "del", "dev", name, check=False)
            removed.append(f"link {name}")
    with contextlib.suppress(OSError):
        _state_file(run_id).unlink()
    return removed


def cleanup_all(force: bool = False) -> list[str]:
    """Remove ddls-named namespaces, veths and bridges (and their qdiscs) of crashed runs.

    A run whose creating process is alive is left alone unless force=True (another session may be
    using it). Returns what was removed.
    """
    if os.geteuid() != 0:
        return []
    removed = []
    for run_id, objs in _our_objects().items():
        if force or not _owner_alive(run_id):
            removed += _remove_run(run_id, objs["netns"], objs["links"])
    return removed


# ----------------------------------------------------------------------------- calibration
def calibration(offload_off: bool) -> dict[str, Any]:
    """The host's ceilings for this offload state: from CALIBRATION_FILE (written by
    `netem --calibrate`, relative paths from the project root) or the defaults measured here."""
    from ddlstudy.records.store import project_root

    key = "offload_off" if offload_off else "offload_on"
    path = CALIBRATION_FILE if CALIBRATION_FILE.is_absolute() else project_root() / CALIBRATION_FILE
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        saved = json.loads(path.read_text())[key]
        return {"aggregate_bps": float(saved["aggregate_bps"]),
                "link_bps": float(saved["link_bps"]), "source": str(path)}
    return {**CALIBRATION_DEFAULTS[key], "source": "netem.CALIBRATION_DEFAULTS"}


def scale_for(profile: str, n_nodes: int, offload_off: bool = False) -> float:
    """The largest of SCALES at which n_nodes links of `profile` all sending at once stay under
    HEADROOM x the measured aggregate ceiling, and one link under the fastest rate tbf held: the
    emulation then measures the links, not this host's CPUs."""
    if profile == UNSHAPED:
        return DEFAULT_SCALE
    rate = profile_info(profile, 1.0)["real_rate_bps"]
    cal = calibration(offload_off)
    for scale in SCALES:
        if (n_nodes * rate * scale <= HEADROOM * cal["aggregate_bps"]
                and rate * scale <= cal["link_bps"]):
            return scale
    return SCALES[-1]


def cpu_bound(info: dict[str, Any] | None, nodes: int) -> bool:
    """True when `nodes` links at the record's emulated rate would ask more of this host than its
    measured aggregate ceiling, or one link more than the fastest rate tbf held in calibration:
    such a cell measures the CPUs, not the links."""
    info = info or {}
    rate, ceiling = info.get("emulated_rate_bps"), info.get("aggregate_ceiling_bps")
    if not rate or not ceiling:
        return False
    link = info.get("link_ceiling_bps")
    return bool(nodes * float(rate) > float(ceiling) or (link and float(rate) > float(link)))


# ----------------------------------------------------------------------------- the network
def profile_info(profile: str, scale: float | None = None) -> dict[str, Any]:
    """Real and emulated rate of a profile, as records store them."""
    scale = DEFAULT_SCALE if scale is None else scale
    if profile == UNSHAPED:
        return {"profile": UNSHAPED, "scale": None, "real_rate_bps": None,
                "emulated_rate_bps": None, "real_latency_s": None, "latency_emulated": False,
                "rate_source": "veth without tc (as fast as this machine's CPUs move packets)",
                "latency_source": ""}
    if profile not in PROFILES:
        raise ValueError(f"unknown network profile {profile!r}; valid: "
                         f"{', '.join([*PROFILES, UNSHAPED])}")
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale!r}")
    p = PROFILES[profile]
    return {"profile": p.name, "scale": scale, "real_rate_bps": p.rate_bps,
            "emulated_rate_bps": p.rate_bps * scale, "real_latency_s": p.latency_s,
            "latency_emulated": False, "rate_source": p.rate_source,
            "latency_source": p.latency_source}


def tbf_params(rate_bps: float) -> dict[str, int]:
    """burst: ~1 ms of traffic (>= 16 kB, > one MTU); limit: ~20 ms of queue (a switch buffer)."""
    rate_Bps = rate_bps / 8
    burst = max(int(rate_Bps * 1e-3), 16_000)
    return {"rate_bps": int(rate_bps), "burst_bytes": burst,
            "limit_bytes": max(int(rate_Bps * 20e-3), 4 * burst)}


def _free_subnet() -> ipaddress.IPv4Network:
    used = []
    for cmd in (["-j", "-4", "route", "show", "table", "all"], ["-j", "-4", "addr", "show"]):
        for entry in json.loads(_ip(*cmd, check=False) or "[]"):
            for cidr in [entry.get("dst", "")] + [f"{a['local']}/{a['prefixlen']}"
                                                  for a in entry.get("addr_info", [])]:
                with contextlib.suppress(ValueError):
                    if cidr and cidr != "default":
                        used.append(ipaddress.ip_network(cidr, strict=False))
    base = ipaddress.ip_network(SUBNET_BASE)
    start = secrets.randbelow(256)
    subnets = list(base.subnets(new_prefix=24))
    for k in range(len(subnets)):
        net = subnets[(start + k) % len(subnets)]
        if not any(net.overlaps(u) for u in used):
            return net
    raise NetemError(f"no free /24 left in {SUBNET_BASE}")


class EmulatedNetwork:
    """n_nodes namespaces on one bridge, each link shaped to `profile` x `scale`.

    Use as a context manager (or .up()/.down()); `down()` runs also on exceptions and at exit.
    Node i: namespace `.namespaces[i]`, address `.ips[i]`, interface inside it `.ifaces[i]`.
    """

    def __init__(self, n_nodes: int, profile: str = "10GbE", scale: float | None = None, *,
                 offload_off: bool = True, mtu: int = MTU) -> None:
        if not isinstance(n_nodes, int) or not 1 <= n_nodes <= MAX_NODES:
            raise ValueError(f"n_nodes must be an integer in 1..{MAX_NODES}, got {n_nodes!r}")
        self.profile = profile_info(profile, scale)  # validates profile and scale
        self.n_nodes = n_nodes
        self.scale = self.profile["scale"]
        self.offload_off = offload_off
        self.ceiling = calibration(offload_off)
        self.mtu = mtu
        self._name(secrets.token_hex(2))
        self.subnet: ipaddress.IPv4Network | None = None
        self.bridge_ip = ""
        self.ips: list[str] = []
        self.offload_method: str | None = None
        self.tbf = tbf_params(self.profile["emulated_rate_bps"]) if self.scale else None
        self.congestion: str | None = None
        self.is_up = False

    def _name(self, run_id: str) -> None:
        self.run_id = run_id
        p = f"{PREFIX}{run_id}"
        self.bridge = f"{p}-br"
        self.namespaces = [f"{p}-{i}" for i in range(self.n_nodes)]
        self.ifaces = [f"{p}-n{i}" for i in range(self.n_nodes)]
        self.host_ifaces = [f"{p}-h{i}" for i in range(self.n_nodes)]

    # -- lifecycle
    def up(self) -> EmulatedNetwork:
        ok, why = available()
        if not ok:
            raise NetemError(f"cannot build an emulated network: {why}")
        if self.is_up:
            return self
        cleanup_all()  # leftovers of crashed runs (not live ones)
        taken = _our_objects()
        while self.run_id in taken:  # another live run has this id: down() must not touch it
            self._name(secrets.token_hex(2))
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        me = identity.mine()
        self.subnet = _free_subnet()
        hosts = list(self.subnet.hosts())
        self.bridge_ip = str(hosts[0])
        self.ips = [str(hosts[i + 1]) for i in range(self.n_nodes)]
        # Written first: a crash half-way still leaves a record that cleanup_all can act on.
        _state_file(self.run_id).write_text(json.dumps(
            {"pid": me["pid"], "pid_create_time": me["create_time"], "owner": me,
             **self.describe()}))
        atexit.register(self.down)
        self.is_up = True
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        self.congestion = congestion_control(self.namespaces[0])
        return self

    def _build(self) -> None:
        prefix = self.subnet.prefixlen if self.subnet else 24
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.bridge_ip}/{prefix}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "mtu", str(self.mtu), "up")
        methods = set()
        for ns, veth, host, ip in zip(self.namespaces, self.ifaces, self.host_ifaces, self.ips,
                                      strict=True):
            _ip("netns", "add", ns)
            _ip("link", "add", host, "mtu", str(self.mtu), "type", "veth", "peer", "name", veth,
                "mtu", str(self.mtu))
            if self.offload_off:  # before the move: offloads stay with the device
                methods.add(_offload_off(host))
                methods.add(_offload_off(veth))
            _ip("link", "set", veth, "netns", ns)
            _ip("link", "set", host, "master", self.bridge, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{ip}/{prefix}", "dev", veth)
            _ip("-n", ns, "link", "set", veth, "up")
            # No default route, as on an isolated cluster network: lookups of the host's DNS
            # server fail at once instead of timing out (gloo's reverse lookups of peer
            # addresses cost 10 s per process-group init through an unreachable resolver).
            if self.tbf:
                args = ["root", "tbf", "rate", f"{self.tbf['rate_bps']}bit", "burst",
                        str(self.tbf["burst_bytes"]), "limit", str(self.tbf["limit_bytes"])]
                _tc("-n", ns, "qdisc", "replace", "dev", veth, *args)  # uplink
                _tc("qdisc", "replace", "dev", host, *args)  # downlink
        self.offload_method = methods.pop() if len(methods) == 1 else None
        self._wait_links_up()

    def _wait_links_up(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = [json.loads(_ip("-j", "link", "show", "dev", h))[0].get("operstate")
                      for h in self.host_ifaces]
            if all(s in ("UP", "UNKNOWN") for s in states):
                return
            time.sleep(0.05)

    def down(self) -> None:
        """Remove this network (namespaces, veths, bridge, qdiscs), then other crashed runs'."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.down)
        if not self.is_up:
            return
        self.is_up = False
        _remove_run(self.run_id, [ns for ns in self.namespaces if ns in _netns_list()],
                    [*self.host_ifaces, self.bridge])
        cleanup_all()

    def __enter__(self) -> EmulatedNetwork:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- reading
    def exec_prefix(self, node: int) -> list[str]:
        """Command prefix that runs a program inside node's namespace."""
        return [_bin("ip"), "netns", "exec", self.namespaces[node]]

    def counters(self, nodes: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """Bytes/packets each node's veth has sent and received since creation (read from outside).

        nodes: which nodes, in which order (e.g. `rank_nodes(cluster, net)` for rank order).
        bytes count Ethernet frames (headers included); payload_*_est subtracts HEADER_BYTES per
        packet: the TCP payload, when the traffic is TCP (data segments and ACKs alike).
        """
        rows = []
        for i in range(self.n_nodes) if nodes is None else nodes:
            ns, veth = self.namespaces[i], self.ifaces[i]
            link = json.loads(_ip("-n", ns, "-s", "-j", "link", "show", "dev", veth))[0]
            stats = link.get("stats64") or link.get("stats")
            tx, rx = stats["tx"], stats["rx"]
            rows.append({
                "node": i, "netns": ns, "iface": veth, "ip": self.ips[i],
                "bytes_sent": int(tx["bytes"]), "bytes_recv": int(rx["bytes"]),
                "packets_sent": int(tx["packets"]), "packets_recv": int(rx["packets"]),
                "payload_sent_est": int(tx["bytes"]) - HEADER_BYTES * int(tx["packets"]),
                "payload_recv_est": int(rx["bytes"]) - HEADER_BYTES * int(rx["packets"]),
                "dropped_sent": int(tx.get("dropped", 0)),
            })
        return rows

    def qdisc_stats(self) -> list[dict[str, Any]]:
        """tbf statistics per node link (drops and overlimits show where the shaping bit)."""
        out = []
        for i, (ns, veth, host) in enumerate(zip(self.namespaces, self.ifaces,
                                                 self.host_ifaces, strict=True)):
            up = json.loads(_tc("-n", ns, "-s", "-j", "qdisc", "show", "dev", veth) or "[]")
            dn = json.loads(_tc("-s", "-j", "qdisc", "show", "dev", host) or "[]")
            out.append({"node": i, "uplink": up[0] if up else {}, "downlink": dn[0] if dn else {}})
        return out

    def describe(self) -> dict[str, Any]:
        """Everything a record needs to say what network the numbers were measured on."""
        if not self.offload_off:
            counting = "merged segments (offload on, by request)"
        elif self.offload_method:
            counting = f"wire-sized packets (TSO/GSO/GRO off via {self.offload_method})"
        elif self.is_up:
            counting = "merged segments (offload on)"
        else:
            counting = "not yet built"
        return {
            **self.profile, "run_id": self.run_id, "n_nodes": self.n_nodes,
            "topology": "star: one veth per node to a Linux bridge (one switch)",
            "shaping": ("tc tbf on both directions of every node link" if self.tbf
                        else "none"), "tbf": self.tbf, "mtu": self.mtu,
            "offload_method": self.offload_method, "packet_counting": counting,
            "latency_note": latency_note(),
            "tcp_congestion_control": self.congestion or congestion_control(None),
            "offload_off": self.offload_off,
            "aggregate_ceiling_bps": self.ceiling["aggregate_bps"],
            "link_ceiling_bps": self.ceiling["link_bps"],
            "ceiling_source": self.ceiling["source"],
            "cpu_bound_risk": bool(self.scale) and self.n_nodes * self.profile[
                "emulated_rate_bps"] > HEADROOM * self.ceiling["aggregate_bps"],
            "subnet": str(self.subnet) if self.subnet else None, "bridge": self.bridge,
            "bridge_ip": self.bridge_ip, "namespaces": list(self.namespaces),
            "ips": list(self.ips), "ifaces": list(self.ifaces),
        }


def congestion_control(namespace: str | None) -> str:
    """TCP congestion control the engines' connections use: a new namespace inherits the
    host's (e.g. bbr), which sets how flows share a tbf-shaped link, so records say it.
    'unknown' where it cannot be read."""
    path = "/proc/sys/net/ipv4/tcp_congestion_control"
    if namespace is None:
        try:
            return Path(path).read_text().strip() or "unknown"
        except OSError:
            return "unknown"
    try:
        return _ip("netns", "exec", namespace, "cat", path).strip() or "unknown"
    except (NetemError, OSError, subprocess.SubprocessError):
        return "unknown"


def _netns_list() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list", check=False).splitlines()
            if line.strip()]


@contextlib.contextmanager
def network_or_loopback(n_nodes: int, profile: str = "10GbE", scale: float | None = None,
                        **kwargs: Any) -> Iterator[EmulatedNetwork | None]:
    """An EmulatedNetwork where namespaces work, else None after one printed line (loopback)."""
    ok, why = available()
    if not ok:
        print(f"netem: emulated network not available ({why}); using loopback, unshaped")
        yield None
        return
    with EmulatedNetwork(n_nodes, profile, scale, **kwargs) as net:
        yield net


# ----------------------------------------------------------------------------- ipyparallel
try:
    from ipyparallel.cluster.launcher import LocalEngineLauncher, LocalEngineSetLauncher
    from traitlets import Dict, List

    class NetnsEngineLauncher(LocalEngineLauncher):
        """One engine, started as `ip netns exec <its namespace> ipengine ...`.

        `ip netns exec` execs the engine, so its pid is the engine's pid (stop/kill work as usual).
        The node's environment (GLOO_SOCKET_IFNAME, DDLSTUDY_HOST_IP, DDLSTUDY_NETNS) is set at
        process start, so it follows the namespace, not the rank (ids come in registration order).
        """

        def _node(self) -> dict[str, Any]:
            nodes = getattr(self.parent, "nodes", [])
            index = int(self.identifier)
            if index >= len(nodes):
                raise NetemError(f"engine {index} has no namespace: the network has "
                                 f"{len(nodes)} nodes; start at most that many engines")
            return dict(nodes[index])

        def find_args(self) -> list[str]:
            return [_bin("ip"), "netns", "exec", self._node()["netns"], *super().find_args()]

        def get_env(self) -> dict[str, str]:
            env = dict(super().get_env())
            env.update(self._node()["env"])
            return env

    class NetnsEngineSetLauncher(LocalEngineSetLauncher):
        """Engines each in their own namespace of an EmulatedNetwork (see netem_cluster_kwargs)."""

        launcher_class = NetnsEngineLauncher
        nodes = List(Dict(), config=True, help="per engine: {'netns': name, 'env': {...}}")

except ImportError:  # pragma: no cover - ipyparallel is a dependency; netem works without it
    NetnsEngineLauncher = NetnsEngineSetLauncher = None  # type: ignore[assignment,misc]


def node_env(net: EmulatedNetwork, node: int) -> dict[str, str]:
    """What an engine in node's namespace needs: gloo on its veth, its address as master address."""
    return {"GLOO_SOCKET_IFNAME": net.ifaces[node], "DDLSTUDY_HOST_IP": net.ips[node],
            "DDLSTUDY_NETNS": net.namespaces[node]}


def netem_cluster_kwargs(net: EmulatedNetwork) -> dict[str, Any]:
    """Keyword arguments for ddlstudy.cluster.engines.Cluster: one engine per namespace, controller
    on the
    bridge address (reachable from every namespace and from the driver in the root namespace)."""
    from traitlets.config import Config

    if not net.is_up:
        raise NetemError("the network is not up: call net.up() (or use it as a context manager)")
    cfg = Config()
    cfg.NetnsEngineSetLauncher.nodes = [{"netns": net.namespaces[i], "env": node_env(net, i)}
                                        for i in range(net.n_nodes)]
    return {"engine_launcher_class": NetnsEngineSetLauncher, "controller_ip": net.bridge_ip,
            "config": cfg}


def start_cluster_in_namespaces(net: EmulatedNetwork, workers: int | None = None,
                                **kwargs: Any) -> Any:
    """A started ddlstudy Cluster with one engine per namespace (node i = namespace i).

    Ranks follow engine registration order, not node order: `rank_nodes(cluster, net)` maps them.
    """
    from ddlstudy.cluster.engines import Cluster

    workers = workers or net.n_nodes
    if workers > net.n_nodes:
        raise NetemError(f"{workers} engines need {workers} namespaces; the network has "
                         f"{net.n_nodes}: EmulatedNetwork({workers}, ...)")
    return Cluster(workers=workers, **netem_cluster_kwargs(net), **kwargs).start()


def rank_nodes(cluster: Any, net: EmulatedNetwork) -> list[int]:
    """Node index (into net.namespaces / net.counters()) of each rank."""
    return [net.ips.index(info["ip"]) for info in cluster.info()]


# ----------------------------------------------------------------------------- CLI
