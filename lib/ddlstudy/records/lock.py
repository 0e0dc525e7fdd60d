"""One owner per output folder, and temp files no other process or thread can collide with.

`OutputLock` is an advisory ``fcntl.flock`` on ``<folder>/.ddlstudy.lock`` that `train`,
`report`, `reference` and `bench` take on their ``--out`` before anything starts: a second run on
the same folder stops at once with one line naming the owner (`FolderBusy`), and a lock file left
by a dead owner (SIGKILL) is taken over and said so (`OutputLock.took_over_from`). The kernel drops
a flock when its owner dies, so "held" always means "a live process holds it".

`unique_tmp` names a temp file next to its target that is unique per process and thread;
`atomic_write_bytes` / `atomic_write_text` / `atomic_path` write through such a temp, fsync and
``os.replace`` it, and remove it on any exception (a full disk included).

Standard library only: the CLIs import this before anything heavy.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import socket
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "LOCK_NAME",
    "FolderBusy",
    "FolderUnwritable",
    "OutputFolderError",
    "OutputLock",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "unique_tmp",
]

LOCK_NAME = ".ddlstudy.lock"
_RECORD_WAIT_S = 1.0  # how long a refused run waits for a fresh owner to write its record
_MAX_COMMAND_CHARS = 160


def _printable(text: object, limit: int = _MAX_COMMAND_CHARS) -> str:
    """`text` on one line with control bytes escaped (never echo a terminal escape raw),
    shortened to `limit` characters."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return out if len(out) <= limit else out[: limit - 3] + "..."


class OutputFolderError(RuntimeError):
    """An output folder cannot be used; the CLIs print ``str(exc)`` (one line) and exit 2."""


class FolderBusy(OutputFolderError):
    """Another live process holds the folder's lock.

    Attributes: `folder`, `pid` (None if the owner's record could not be read), `command`,
    `host`, `started` (the owner's start time as text), `owner_alive` (False when the recorded
    pid has exited but processes it forked still hold the lock).
    """

    def __init__(
        self,
        folder: Path,
        pid: int | None,
        command: str = "",
        host: str = "",
        started: str = "",
        owner_alive: bool = True,
    ) -> None:
        self.folder, self.pid, self.command = folder, pid, command
        self.host, self.started, self.owner_alive = host, started, owner_alive
        super().__init__(self._message())

    def _message(self) -> str:
        folder = _printable(self.folder, 300)
        if self.pid is None:
            return (
                f"{folder} is in use by another run (its lock record is unreadable); "
                "wait for it or choose another --out"
            )
        where = "" if not self.host or self.host == socket.gethostname() else f" on {self.host}"
        what = _owner_detail(self.command, self.started)
        if not self.owner_alive:
            return (
                f"{folder} is in use by processes left by pid {self.pid}{where}{what}, which has "
                "exited; stop them or choose another --out"
            )
        return (
            f"{folder} is in use by pid {self.pid}{where}{what}; "
            "wait for it or choose another --out"
        )


class FolderUnwritable(OutputFolderError):
    """The folder or its lock file cannot be created or written.

    Attributes: `folder`, `reason` (the OS's words, e.g. "Read-only file system").
    """

    def __init__(self, folder: Path, reason: str) -> None:
        self.folder, self.reason = folder, reason
        super().__init__(
            f"cannot write to output folder {_printable(folder, 300)} ({_printable(reason)}); "
            "choose a writable --out or fix its permissions"
        )


def _owner_detail(command: object, started: object) -> str:
    """The text " (<command>, started <time>)" with whatever of the two is known, or ""."""
    parts = [_printable(command)] if command else []
    if started:
        parts.append(f"started {started}")
    return f" ({', '.join(parts)})" if parts else ""


def _reason(exc: OSError) -> str:
    return exc.strerror or exc.__class__.__name__


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _read_record(fd: int) -> dict[str, Any] | None:
    """The JSON owner record in the open lock file, or None if empty or unparsable."""
    try:
        raw = os.pread(fd, 65536, 0)
        record = json.loads(raw.decode("utf-8")) if raw.strip() else None
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
        return None
    return record


# Locks held by this process: a child made by a bare fork (multiprocessing "fork", os.fork)
# closes its copies so that only the owner holds the flock, and a SIGKILLed owner's lock is
# free at once even if its forked children live on. Exec'd children never inherit the fd
# (Python opens it close-on-exec).
_HELD: weakref.WeakSet[OutputLock] = weakref.WeakSet()


def _forget_in_child() -> None:
    for lock in list(_HELD):
        lock._forget()
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_in_child)


class OutputLock:
    """Exclusive, advisory ownership of an output folder for one run.

    ``with OutputLock(out, "train --strategy ps_sync") as lock:`` creates `folder` if needed,
    takes ``<folder>/.ddlstudy.lock`` without waiting and records this process (pid, command,
    host, start time) in it; on exit it removes the lock file and releases the lock.

    Raises `FolderBusy` if a live process holds it, `FolderUnwritable` if the folder or lock file
    cannot be created or written. After a successful acquire, `took_over_from` is the pid of a
    dead owner whose lock file was left behind (else None); `takeover_note` words it for the user.
    """

    def __init__(self, folder: str | os.PathLike[str], command: str | None = None) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.command = command if command is not None else " ".join(sys.argv)
        self.took_over_from: int | None = None
        self.stale_record: dict[str, Any] | None = None
        self._fd: int | None = None
        self._pid = 0

    @property
    def held(self) -> bool:
        return self._fd is not None and self._pid == os.getpid()

    @property
    def takeover_note(self) -> str | None:
        """After a takeover, the line "took over a stale lock from pid N (...)"; else None."""
        if self.took_over_from is None:
            return None
        rec = self.stale_record or {}
        detail = _owner_detail(rec.get("command"), rec.get("started"))
        return f"took over a stale lock from pid {self.took_over_from}{detail}"

    def acquire(self) -> OutputLock:
        """Take the lock (see the class doc); returns self."""
        if self.held:
            raise RuntimeError(f"{self.path} is already held by this OutputLock")
        if self.folder.exists() and not self.folder.is_dir():
            raise FolderUnwritable(self.folder, "it exists and is not a folder")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FolderUnwritable(self.folder, _reason(exc)) from None
        while True:  # loops only if the file we opened was removed by its releasing owner
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise FolderUnwritable(self.folder, _reason(exc)) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise FolderUnwritable(self.folder, _reason(exc)) from None
                busy = self._busy(fd)
                os.close(fd)
                raise busy from None
            if self._same_file(fd):
                break
            os.close(fd)  # the previous owner unlinked it between our open and flock: retry
        stale = _read_record(fd)
        if stale is not None and stale.get("pid") != os.getpid():
            self.took_over_from, self.stale_record = stale["pid"], stale
        record = {
            "pid": os.getpid(),
            "command": self.command,
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "started_unix": time.time(),
        }
        data = (json.dumps(record) + "\n").encode("utf-8")
        try:
            os.ftruncate(fd, 0)
            if os.pwrite(fd, data, 0) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(fd)
            raise FolderUnwritable(self.folder, _reason(exc)) from None
        self._fd, self._pid = fd, os.getpid()
        _HELD.add(self)
        return self

    def release(self) -> None:
        """Remove the lock file and drop the lock; a no-op if not held (or in a forked child)."""
        if not self.held:
            return
        fd, self._fd = self._fd, None
        _HELD.discard(self)
        assert fd is not None
        try:
            if self._same_file(fd):  # unlink while still holding, so no one locks a dead inode
                os.unlink(self.path)
        except OSError:
            pass
        finally:
            os.close(fd)

    def _forget(self) -> None:
        """In a forked child: close our copy of the fd without unlocking the parent's lock."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _same_file(self, fd: int) -> bool:
        try:
            st, fst = os.stat(self.path), os.fstat(fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)

    def _busy(self, fd: int) -> FolderBusy:
        """The refusal for a lock held by someone else; waits briefly for a fresh owner's record."""
        deadline = time.monotonic() + _RECORD_WAIT_S
        record = _read_record(fd)
        while record is None and time.monotonic() < deadline:
            time.sleep(0.05)
            record = _read_record(fd)
        if record is None:
            return FolderBusy(self.folder, None)
        pid = record["pid"]
        host = str(record.get("host", ""))
        local = not host or host == socket.gethostname()
        return FolderBusy(
            self.folder,
            pid,
            command=str(record.get("command", "")),
            host=host,
            started=str(record.get("started", "")),
            owner_alive=_pid_alive(pid) if local else True,
        )

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __del__(self) -> None:
        if self.held:
            self.release()


def unique_tmp(path: str | os.PathLike[str]) -> Path:
    """A temp path next to `path` (same folder, so ``os.replace`` is atomic) that no other
    process or thread will pick: ``<name>.<pid>-<thread id>-<random>.tmp``. Nothing is created."""
    p = Path(path)
    tag = f"{os.getpid()}-{threading.get_native_id()}-{secrets.token_hex(4)}"
    return p.with_name(f"{p.name}.{tag}.tmp")


def _fsync_dir(folder: Path) -> None:
    """Best effort: make a rename in `folder` durable (some file systems refuse; that is fine)."""
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], fsync: bool = True) -> Iterator[Path]:
    """Yield a `unique_tmp` for a writer that wants a path (``torch.save``, ``df.to_csv``);
    on success it is fsynced and moved onto `path`, on any exception it is removed and the
    exception re-raised (`path` untouched)."""
    target = Path(path)
    tmp = unique_tmp(target)
    try:
        yield tmp
        if fsync:
            fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        _fsync_dir(target.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, fsync: bool = True) -> None:
    """Replace `path` with `data` atomically: readers see the old file or the new one, never a
    part. Writes a `unique_tmp`, fsyncs it, ``os.replace``s it; on any exception (ENOSPC
    included) the temp is removed and the exception re-raised."""
    target = Path(path)
    tmp = unique_tmp(target)
    fd: int | None = None
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
        os.close(fd)
        fd = None
        os.replace(tmp, target)
    except BaseException:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        _fsync_dir(target.parent)


def atomic_write_text(
    path: str | os.PathLike[str], text: str, encoding: str = "utf-8", fsync: bool = True
) -> None:
    """`atomic_write_bytes` of `text` encoded with `encoding`."""
    atomic_write_bytes(path, text.encode(encoding), fsync=fsync)
