"""What the tests that start engines on namespace hosts share (tests/test_multihost.py's ssh
hosts, tests/test_mpi.py's MPI job, tests/test_slurm.py's one-node Slurm): the scripts under
scripts/multihost loaded by path, the heavy marks, a log to stdout and a file, the hosts fixture's
setup and teardown, and the check that each engine sits on the host its slot names.

Not a test module (no `test_` prefix): the test files import it by name, as pytest puts tests/
on the path.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# The smallest training run the other tests use (tests/test_trainer.py TINY), fixed threads so
# a run on engines spread over hosts and one on local engines do the same float arithmetic.
TINY = dict(model="mlp", dataset="digits", batch_size=8, steps=4, warmup_steps=2, eval=False)


def script(name: str) -> Any:
    """scripts/multihost/<name>.py as a module (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "multihost"
                                                  / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def marked(*marks: Any) -> Callable[[Any], Any]:
    """A decorator putting `marks` on a test (the namespace tests' marker, slow, timeout)."""
    def mark(fn: Any) -> Any:
        for m in marks:
            fn = m(fn)
        return fn

    return mark


class Log:
    """`log(line)`: each line to stdout and, time-stamped, to `path`; `start()` empties the file
    (when the hosts come up, so collecting the tests leaves the last run's log alone)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    def __call__(self, line: str) -> None:
        print(line, flush=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


@contextmanager
def namespace_hosts(n: int, prefix: str, what: str, log: Log,
                    ready: Callable[[], tuple[bool, str]] = lambda: (True, "")) -> Iterator[Any]:
    """A module-scoped `hosts` fixture's setup (`with namespace_hosts(...) as net`): skips with
    one line `<what>: why` unless root with sshd, namespaces and whatever `ready` checks; starts
    `log`; gives `nshosts.NamespaceHosts(n, prefix)` up and takes it down after. IPYTHONDIR
    defaults to the Makefile's, one for the driver and every engine."""
    if os.geteuid() != 0:
        pytest.skip(f"{what}: needs root (network namespaces, sshd)")
    ok, why = ready()
    if not ok:
        pytest.skip(f"{what}: {why}")
    nshosts = script("nshosts")
    ok, why = nshosts.ensure_sshd()
    if ok:
        ok, why = nshosts.available()
    if not ok:
        pytest.skip(f"{what}: {why}")
    os.environ.setdefault("IPYTHONDIR", str(REPO / ".ipython"))
    log.start()
    try:
        net = nshosts.NamespaceHosts(n, prefix=prefix).up()  # removes the prefix's leftovers
    except nshosts.HostsError as err:
        pytest.skip(f"{what}: cannot start namespace hosts ({err})")
    try:
        yield net
    finally:
        net.down()


def engines_placed(cluster: Any, hosts: Any, slots: str, log: Log,
                   note: Callable[[dict[str, Any]], str] = lambda info: "") -> list[dict[str, Any]]:
    """Each engine's rank, host and pid, logged (plus `note(info)`), checked against `slots`
    ("h0:2,h1:1": ranks fill the hosts in order, local ranks count from 0 on each, each on its
    host's address) and against the namespaces (each engine's pid lives in its host's)."""
    infos = cluster.info()
    for info in infos:
        log(f"rank {info['rank']} local_rank {info['local_rank']} host {info['host']} "
            f"ip {info['ip']} pid {info['pid']}{note(info)}")
    want = [(name, local) for name, _, count in (s.partition(":") for s in slots.split(","))
            for local in range(int(count))]
    assert [(i["host"], i["local_rank"]) for i in infos] == want
    assert [i["ip"] for i in infos] == [hosts.ips[int(name[1:])] for name, _ in want]
    for k in range(hosts.n):
        assert {i["pid"] for i in infos if i["host"] == f"h{k}"} <= hosts.processes(k)
    return infos
