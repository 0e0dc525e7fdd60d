"""One owner per output folder (issue 23 item 2): the folder lock and the collision-free temp files.

Real processes hold and contend for the lock; a full disk is a 64 KiB tmpfs where root may mount
one (else a patched fsync raising ENOSPC); a read-only folder is a read-only tmpfs or an immutable
folder for root, a 0o555 folder otherwise.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ddlstudy.records import lock as lockmod
from ddlstudy.records.lock import (
    LOCK_NAME,
    FolderBusy,
    FolderUnwritable,
    OutputLock,
    atomic_path,
    atomic_write_bytes,
    atomic_write_text,
    unique_tmp,
)

IS_ROOT = os.geteuid() == 0

# Holds the lock on argv[1] as command argv[2] and prints "locked 0"; with argv[3] == "fork" it
# forks a child that outlives it, and the child (past its fork hooks) prints "locked <its pid>".
# Both sleep until killed.
HOLDER = """
import os, sys, time
from ddlstudy.records.lock import OutputLock
lock = OutputLock(sys.argv[1], sys.argv[2]).acquire()
if sys.argv[3:] == ["fork"]:
    if os.fork() == 0:
        print("locked", os.getpid(), flush=True)
        time.sleep(600)
        os._exit(0)
else:
    print("locked 0", flush=True)
time.sleep(600)
"""

# Tries the lock on argv[1]: exit 2 with how many times it slept (waited) inside acquire and the
# message, or 0 if it got it. Counting the waits, not timing them: a loaded host stretches the
# wall seconds of a refusal that never waits; a blocking lock hangs into contend's timeout.
CONTENDER = """
import sys, time
from ddlstudy.records.lock import FolderBusy, OutputLock
waits = []
sleep = time.sleep
time.sleep = lambda s: (waits.append(s), sleep(s))[1]
try:
    OutputLock(sys.argv[1], "contender").acquire()
except FolderBusy as exc:
    print(len(waits))
    print(exc)
    sys.exit(2)
"""


@contextmanager
def holder(
    folder: Path, command: str, fork: bool = False
) -> Iterator[tuple[subprocess.Popen, int]]:
    """A real process holding `folder`'s lock: yields (process, pid of its forked child or 0)."""
    args = [sys.executable, "-c", HOLDER, str(folder), command] + (["fork"] if fork else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)  # a Python start: loaded host
        assert ready, "the holder did not take the lock within 120 s"
        line = proc.stdout.readline().split()
        assert line[:1] == ["locked"], line
        child = int(line[1])
        yield proc, child
    finally:
        for pid in (proc.pid, child):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        proc.wait(10)
        proc.stdout.close()
        if child:  # reaped by init once its parent is gone; wait until it is
            _wait_gone(child)


def _wait_gone(pid: int, timeout_s: float = 5.0) -> None:
    """Until `pid` is dead: gone, or a zombie waiting for init to reap it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.02)


def contend(folder: Path) -> tuple[int, int, str]:
    """Run CONTENDER on `folder`: (exit code, times it waited inside acquire, its message). The
    holders sleep 600 s: a contender blocking on their lock runs into the 120 s timeout."""
    res = subprocess.run(
        [sys.executable, "-c", CONTENDER, str(folder)], capture_output=True, text=True, timeout=120
    )
    lines = res.stdout.splitlines()
    waits = int(lines[0]) if lines else -1
    return res.returncode, waits, "\n".join(lines[1:])


def test_second_process_is_refused_naming_the_owner(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with holder(out, "train --strategy ps_sync") as (proc, _):
        rc, waits, message = contend(out)
        assert rc == 2, message
        assert waits == 0, f"the refusal waited {waits} times for a record already written"
        assert "\n" not in message
        assert message.startswith(f"{out} is in use by pid {proc.pid} (train --strategy ps_sync, ")
        assert message.endswith("; wait for it or choose another --out")
        # ...and this process too, with the fields on the exception
        with pytest.raises(FolderBusy) as info:
            OutputLock(out, "report").acquire()
        assert info.value.pid == proc.pid and info.value.command == "train --strategy ps_sync"
        assert info.value.owner_alive


def test_killed_owner_is_taken_over_and_said_so(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with holder(out, "train --out x") as (proc, _):
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        dead = proc.pid
    assert (out / LOCK_NAME).exists()  # SIGKILL left the file behind
    with OutputLock(out, "train again") as lock:
        assert lock.took_over_from == dead
        assert lock.takeover_note is not None
        note = f"took over a stale lock from pid {dead} (train --out x, started "
        assert lock.takeover_note.startswith(note)
        rc, _, message = contend(out)
        assert rc == 2 and f"pid {os.getpid()} (train again" in message
    assert not (out / LOCK_NAME).exists()  # a clean release leaves nothing
    with OutputLock(out, "third") as lock:
        assert lock.took_over_from is None and lock.takeover_note is None


def test_forked_children_do_not_keep_a_killed_owners_lock(tmp_path: Path) -> None:
    """A bare fork (multiprocessing "fork") must not hold the lock after its parent dies."""
    out = tmp_path / "out"
    with holder(out, "bench", fork=True) as (proc, child):
        assert child > 0
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        os.kill(child, 0)  # the forked child still lives...
        with OutputLock(out, "next") as lock:  # ...and the lock is free
            assert lock.took_over_from == proc.pid


def test_lock_creates_the_folder_and_refuses_itself_twice(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "c"
    with OutputLock(out, "x") as lock:
        assert out.is_dir() and lock.held
        with pytest.raises(FolderBusy, match=f"in use by pid {os.getpid()}"):
            OutputLock(out, "y").acquire()
    assert not lock.held and list(out.iterdir()) == []


def test_busy_message_escapes_control_bytes(tmp_path: Path) -> None:
    with OutputLock(tmp_path, "train \x1b[31mred\nline"):
        with pytest.raises(FolderBusy) as info:
            OutputLock(tmp_path).acquire()
    text = str(info.value)
    assert "\x1b" not in text and "\n" not in text and "\\x1b[31mred\\nline" in text


def test_file_as_folder_is_unwritable(tmp_path: Path) -> None:
    f = tmp_path / "passwd"
    f.write_text("x")
    for out in (f, f / "x"):
        with pytest.raises(FolderUnwritable) as info:
            OutputLock(out, "train").acquire()
        assert "\n" not in str(info.value) and str(out) in str(info.value)
        assert "choose a writable --out" in str(info.value)


def _mount_tmpfs(where: Path, options: str) -> bool:
    if not IS_ROOT:
        return False
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True
    )
    return res.returncode == 0


def _umount(where: Path) -> None:
    if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture
def readonly_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder this process cannot write to: 0o555 for a user; for root (who ignores modes)
    a read-only tmpfs, else an immutable (chattr +i) folder, else skip."""
    d = tmp_path / "ro"
    d.mkdir()
    undo = None
    if not IS_ROOT:
        d.chmod(0o555)
        undo = lambda: d.chmod(0o755)  # noqa: E731
    elif _mount_tmpfs(d, "ro,size=64k"):
        undo = lambda: _umount(d)  # noqa: E731
    elif subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0:
        undo = lambda: subprocess.run(["chattr", "-i", str(d)], capture_output=True)  # noqa: E731
    else:
        pytest.skip("root can write anywhere here: no read-only tmpfs mount and no chattr +i")
    try:
        try:
            (d / "probe").touch()
        except OSError:
            yield d
        else:
            pytest.skip(f"{d} is still writable (root without a working read-only mount)")
    finally:
        undo()


def test_read_only_folder_is_unwritable(readonly_dir: Path) -> None:
    for out in (readonly_dir, readonly_dir / "new"):
        with pytest.raises(FolderUnwritable) as info:
            OutputLock(out, "report").acquire()
        msg = str(info.value)
        assert "\n" not in msg and str(out) in msg and "choose a writable --out" in msg


def test_unique_tmp_differs_per_thread_and_call(tmp_path: Path) -> None:
    target = tmp_path / "steps.csv"
    names: list[Path] = []
    threads = [threading.Thread(target=lambda: names.append(unique_tmp(target))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names += [unique_tmp(target), unique_tmp(target)]
    assert len(set(names)) == 4
    for n in names:
        assert n.parent == tmp_path and n.name.startswith(f"steps.csv.{os.getpid()}-")
        assert n.suffix == ".tmp"
    assert list(tmp_path.iterdir()) == []  # naming creates nothing


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "steps.csv"
    atomic_write_text(target, "a\n")
    atomic_write_bytes(target, b"b\n")
    assert target.read_bytes() == b"b\n"
    with atomic_path(tmp_path / "ckpt.pt") as tmp:
        tmp.write_bytes(b"weights")
    assert (tmp_path / "ckpt.pt").read_bytes() == b"weights"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt", "steps.csv"]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "small"
    d.mkdir()
    if not _mount_tmpfs(d, "size=64k"):
        pytest.skip("needs root and a mountable tmpfs (the patched-fsync test covers the rest)")
    try:
        yield d
    finally:
        _umount(d)


def test_full_disk_leaves_no_temp_and_the_old_file(small_tmpfs: Path) -> None:
    target = small_tmpfs / "steps.csv"
    atomic_write_text(target, "old\n")
    with pytest.raises(OSError) as info:
        atomic_write_bytes(target, b"x" * (1 << 20))
    assert info.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as info:
        with atomic_path(small_tmpfs / "ckpt.pt") as tmp:
            tmp.write_bytes(b"x" * (1 << 20))
    assert info.value.errno == errno.ENOSPC
    assert [p.name for p in small_tmpfs.iterdir()] == ["steps.csv"]
    assert target.read_text() == "old\n"


def test_failing_write_leaves_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "steps.csv"
    target.write_text("old\n")

    def enospc(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(lockmod.os, "fsync", enospc)
    with pytest.raises(OSError) as info:
        atomic_write_text(target, "new\n")
    assert info.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        with atomic_path(tmp_path / "ckpt.pt") as tmp:
            tmp.write_bytes(b"w")
    monkeypatch.undo()
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(tmp_path / "ckpt.pt") as tmp:
            tmp.write_bytes(b"w")
            raise KeyboardInterrupt
    assert [p.name for p in tmp_path.iterdir()] == ["steps.csv"]
    assert target.read_text() == "old\n"
