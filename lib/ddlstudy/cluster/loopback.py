"""The loopback shim: a local cluster's engines listen on the cluster's address, never on all.

Why: TensorFlow's gRPC server binds "0.0.0.0:<port>" whatever the cluster spec names
(grpc_server_lib.cc), and neither TF nor gRPC has an option for it, so a tf_ps_sync /
tf_allreduce task on a local cluster would listen on every interface of the host.

How: loopback_bind.c (beside this file) wraps libc's bind(): a TCP bind to INADDR_ANY or
in6addr_any goes to DDLSTUDY_BIND_ADDR, else DDLSTUDY_HOST_IP (127.0.0.1 on a local cluster, the
namespace's veth address under emulation), else 127.0.0.1; an IPv4 address on a dual-stack IPv6
socket is bound v4-mapped (::ffff:127.0.0.1), so IPv4 peers still connect. Binds to a named
address (gloo, the controller, Horovod's rendezvous) and UDP pass through unchanged.

It is compiled with the system C compiler (`cc`, or $CC) at first use, or by `make setup`
(`python -m ddlstudy.cluster.loopback`), into ~/.cache/ddlstudy/ under a name carrying the
source's hash, and set as LD_PRELOAD only while a local cluster launches its engines
(`preloaded()` around Cluster.start / restart): the engines, which host the TF servers, carry
it; the driver, the controller and the user's shell do not. A TF run checks that every engine
on a local address has it loaded (`active()`), and refuses with one line otherwise.

Several hosts (ssh / slurm / mpi launchers): build it on each node (`python -m
ddlstudy.cluster.loopback` prints its path) and pass `LD_PRELOAD=<path>` in `cluster.env`; TF
tasks then bind the address the cluster spec names (DDLSTUDY_BIND_ADDR, set from the engine's
host address before the server starts).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("loopback_bind.c")
PREFIX = "ddlstudy-loopback-"
BIND_ENV = "DDLSTUDY_BIND_ADDR"  # what the shim binds a wildcard to (else DDLSTUDY_HOST_IP)
COMPILE_TIMEOUT_S = 120.0
FIX = "install a C compiler (apt-get install gcc) and run `make setup`"

_BUILT: dict[str, Path | str] = {}  # this process's answer: "path" or "error"


class ShimError(RuntimeError):
    """The shim cannot be built here: the message names why and the fix."""


def cache_dir() -> Path:
    """Where the built shim lives: $DDLSTUDY_CACHE, else $XDG_CACHE_HOME/ddlstudy, else
    ~/.cache/ddlstudy (the folder make setup caches Horovod's wheel in)."""
    if os.environ.get("DDLSTUDY_CACHE"):
        return Path(os.environ["DDLSTUDY_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ddlstudy"


def shim_path() -> Path:
    """The built shim's path for this source (its name carries the source's hash)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return cache_dir() / f"{PREFIX}{digest}.so"


def build(force: bool = False) -> Path:
    """The shim, compiled now unless already built from this source; ShimError (one line)."""
    target = shim_path()
    if target.is_file() and not force:
        return target
    if any(c in str(target) for c in " :\t\n"):
        raise ShimError(f"the shim's path {target} holds a space or colon, which LD_PRELOAD "
                        "cannot carry: set DDLSTUDY_CACHE to a plain folder")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise ShimError(f"no C compiler (cc) to build the loopback shim; {FIX}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ShimError(f"cannot create {target.parent} for the loopback shim "
                        f"({err.strerror}); set DDLSTUDY_CACHE to a writable folder") from None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", tmp, str(SOURCE),
                               "-ldl"], capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT_S, check=False)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no output"])[0][:200]
            raise ShimError(f"{cc} could not build the loopback shim ({first}); {FIX}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)  # atomic: a concurrent build writes the same bytes
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ShimError(f"{cc} could not build the loopback shim ({err}); {FIX}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def available() -> tuple[Path | None, str]:
    """(the shim's path, "") when it is built or can be built here, else (None, why); the
    answer is kept for this process."""
    if "path" not in _BUILT and "error" not in _BUILT:
        try:
            _BUILT["path"] = build()
        except ShimError as err:
            _BUILT["error"] = str(err)
    path = _BUILT.get("path")
    return (path if isinstance(path, Path) else None), str(_BUILT.get("error", ""))


@contextmanager
def preloaded(enabled: bool = True) -> Iterator[Path | None]:
    """LD_PRELOAD names the shim while the block runs (engines launched in it carry it), then
    the driver's own environment is restored. Without a shim: one warning, nothing set."""
    path, why = available() if enabled else (None, "")
    if path is None:
        if enabled:
            log.warning("engines start without the loopback shim (%s): TF runs will refuse", why)
        yield None
        return
    old = os.environ.get("LD_PRELOAD")
    os.environ["LD_PRELOAD"] = f"{path} {old}" if old else str(path)
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = old


def active() -> bool:
    """Whether the shim is loaded in this process (read from /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as f:
            return any(PREFIX in line for line in f)
    except OSError:
        return False


def engine_state(ip: str) -> dict[str, bool]:
    """On an engine: whether the shim is loaded here, and whether it must be (`ip`, the
    engine's address, is loopback, or the engine sits in an emulated network's namespace)."""
    import ipaddress

    local = ipaddress.ip_address(ip).is_loopback or bool(os.environ.get("DDLSTUDY_NETNS"))
    return {"shim": active(), "local": local}


def check_engines(strategy: str, states: list[dict[str, Any]]) -> None:
    """ValueError (one line) where an engine that must carry the shim does not (its TF gRPC
    server would listen on every interface); `states` as engine_state returns them."""
    bare = [rank for rank, s in enumerate(states) if s.get("local") and not s.get("shim")]
    if bare:
        why = available()[1] or "the engines were not started by ddlstudy.cluster.engines.Cluster"
        raise ValueError(f"{strategy}: engine rank(s) {bare} lack the loopback shim, so TF's "
                         f"gRPC server would listen on every interface ({why}); {FIX}, then "
                         "start a fresh cluster")


def bind_to(address: str) -> None:
    """Make the shim bind this process's wildcard listeners to `address` from now on."""
    os.environ[BIND_ENV] = address


def main() -> int:
    """Build the shim (make setup) and print its path; exit 2 with one line if it cannot, or
    for a flag other than --force."""
    args = sys.argv[1:]
    if any(a in ("-h", "--help") for a in args):
        print("usage: python -m ddlstudy.cluster.loopback [--force]\nBuild the loopback-only "
              "bind shim the local engines load (cached; --force rebuilds) and print its path.")
        return 0
    if bad := [a for a in args if a != "--force"]:
        print(f"python -m ddlstudy.cluster.loopback: error: unknown flag {bad[0]!r}; the only "
              "flag is --force", file=sys.stderr)
        return 2
    try:
        print(build(force="--force" in args))
    except ShimError as err:
        print(f"python -m ddlstudy.cluster.loopback: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
