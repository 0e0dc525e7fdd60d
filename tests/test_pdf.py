"""`python -m ddlstudy.report.pdf`: the CI report's book printed by headless Chromium (Debian's
`chromium`), its screenshots, and Chromium leaving nothing behind: no process of its group and no
`org.chromium.Chromium.*` folder in the host's temporary folder, whether it finishes or overruns."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from ddlstudy.report import pdf

pytestmark = pytest.mark.skipif(
    pdf.shutil.which("chromium") is None and pdf.shutil.which("chromium-browser") is None,
    reason="chromium not installed (make test installs it when run as root: apt-get install -y "
           "chromium)")


def _chromium_temp_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("org.chromium.Chromium.*")}


def _chromium_pids() -> set[int]:
    """Processes whose command line runs this host's chromium binary."""
    binary = os.path.realpath(pdf.chromium())
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0].decode()
        except OSError:
            continue
        if argv0 and os.path.realpath(argv0) == binary:
            found.add(int(proc.name))
    return found


def test_book_prints_to_pdf_with_screenshots(ci_report, tmp_path: Path) -> None:
    _, out, _ = ci_report
    before = _chromium_temp_dirs()
    path, pages = pdf.print_pdf(out, tmp_path / "book.pdf")
    assert path.read_bytes().startswith(b"%PDF-"), path
    assert pages >= 5, f"{pages} pages: the CI book has a landing page and several chapters"
    printed = (out / "report-print" / "index.html").read_text()
    assert "<details open>" in printed, "the claims' quotes and reasoning unfold on paper"
    shots = pdf.screenshots(out, tmp_path / "shots")
    assert [p.name for p in shots] == ["book-landing.png", "book-chapter99.png"][:len(shots)]
    assert shots, "the CI book has a landing page"
    for shot in shots:
        assert shot.read_bytes().startswith(b"\x89PNG"), shot
    assert _chromium_temp_dirs() <= before, "chromium's temp folders went with its profile"


def test_overrunning_chromium_is_killed_with_its_helpers(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """A print that overruns TIMEOUT_S raises, and no chromium process it started survives: the
    page is a loopback server that accepts the connection and never answers, so the overrun is
    made to happen, not hoped for."""
    before_pids = _chromium_pids()
    before_dirs = _chromium_temp_dirs()
    monkeypatch.setattr(pdf, "TIMEOUT_S", 3)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        started = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            pdf._run_chromium([f"--print-to-pdf={tmp_path / 'never.pdf'}", url])
        assert time.monotonic() - started < 30
    left = _chromium_pids() - before_pids
    for pid in left:  # do not leave them to the next test either
        os.kill(pid, signal.SIGKILL)
    assert not left, f"chromium processes outlived the call: {sorted(left)}"
    assert not (tmp_path / "never.pdf").exists()
    assert _chromium_temp_dirs() <= before_dirs
