"""The book on paper, and pictures of it: one PDF of a rendered run, screenshots for docs/.

    python -m ddlstudy.report.pdf RUN_DIR [--screenshots docs/figures]   (make pdf RUN=RUN_DIR)

The book's staged source (`RUN_DIR/.book`, written by ddlstudy.report.book) is built once more
with Sphinx's `singlehtml` builder into `RUN_DIR/report-print/` (every chapter on one page, the
claims' quotes and reasoning unfolded, code still folded), and headless Chromium prints that page
to `RUN_DIR/report/book.pdf` (`--print-to-pdf`). The command prints the PDF's page count.
`--screenshots DIR` also saves the landing page and chapter 99 as PNGs at 1400 px wide.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ddlstudy.host.process import kill_group
from ddlstudy.report.book import SOURCE, BookError

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--run-all-compositor-stages-before-draw",
         "--virtual-time-budget=15000"]
TIMEOUT_S = 300
SHOTS = {"book-landing.png": "index.html", "book-chapter99.png": "99_conclusions.html"}
SHOT_SIZE = (1400, 1800)  # two screens of 1400x900


def chromium() -> str:
    """The Chromium binary, or RuntimeError saying how to install it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise RuntimeError("chromium not found: apt-get install -y chromium (root), or `make "
                           "browser`")
    return found


def chromium_env(profile: Path) -> dict[str, str]:
    """The environment for a Chromium whose profile is `profile`: its own temporary folder inside
    the profile, so the `org.chromium.Chromium.*` folders it makes (and leaves when it is killed)
    go away with the profile instead of piling up in the host's /tmp."""
    tmp = Path(profile) / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp)}


def _run_chromium(args: list[str]) -> None:
    """Run Chromium once (print or screenshot) in a throwaway profile; its whole process group
    (renderers, GPU, zygote) is killed if it overruns TIMEOUT_S or this call is interrupted, so
    none of it outlives the call. Raises RuntimeError on a non-zero exit."""
    with tempfile.TemporaryDirectory(prefix="ddlstudy-chromium-") as profile:
        proc = subprocess.Popen([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=chromium_env(Path(profile)), start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=TIMEOUT_S)
        except BaseException:
            kill_group(proc)
            raise
        kill_group(proc)  # a helper may linger after the browser process exits
    if proc.returncode != 0:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        raise RuntimeError(f"chromium exited {proc.returncode}: {lines[-1] if lines else ''}")


def single_page(run_dir: Path) -> Path:
    """The book as one HTML page (Sphinx singlehtml over the staged source), claims unfolded."""
    src = run_dir / SOURCE
    if not (src / "conf.py").exists():
        raise FileNotFoundError(f"{src}/conf.py not found: render the run first (python -m "
                                "ddlstudy.report --params ... --out RUN_DIR)")
    out = run_dir / "report-print"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "sphinx", "-b", "singlehtml", "-q", "-d",
           str(src / ".doctrees-print"), str(src), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise BookError(lines[-1] if lines else f"sphinx exited {proc.returncode}")
    page = out / "index.html"
    text = page.read_text()
    # on paper the reviewer's folds are open (the parameters and the code stay folded)
    text = re.sub(r"<details>(\s*<summary>quote and reasoning)", r"<details open>\1", text)
    text = text.replace('<details class="long-output">', '<details class="long-output" open>')
    page.write_text(text)
    return page


def page_count(pdf: Path) -> int:
    """Pages in a PDF: its page objects (Chromium writes them uncompressed)."""
    return len(re.findall(rb"/Type\s*/Page(?![s\w])", pdf.read_bytes()))


def print_pdf(run_dir: Path, out: Path | None = None) -> tuple[Path, int]:
    """RUN_DIR's book printed to one PDF (default RUN_DIR/report/book.pdf); (path, pages)."""
    page = single_page(run_dir)
    pdf = (out or run_dir / "report" / "book.pdf").resolve()
    pdf.parent.mkdir(parents=True, exist_ok=True)
    pdf.unlink(missing_ok=True)
    _run_chromium(["--no-pdf-header-footer", f"--print-to-pdf={pdf}", page.resolve().as_uri()])
    if not pdf.exists():
        raise RuntimeError(f"chromium wrote no {pdf}")
    return pdf, page_count(pdf)


def screenshots(run_dir: Path, dest: Path, size: tuple[int, int] = SHOT_SIZE) -> list[Path]:
    """The landing page and chapter 99 of RUN_DIR's book as PNGs in `dest` (1400 px wide)."""
    dest.mkdir(parents=True, exist_ok=True)
    made = []
    for name, page in SHOTS.items():
        html = run_dir / "report" / page
        if not html.exists():
            continue
        path = (dest / name).resolve()
        _run_chromium([f"--window-size={size[0]},{size[1]}", f"--screenshot={path}",
                       html.resolve().as_uri()])
        made.append(path)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddlstudy.report.pdf", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a rendered run folder (python -m ddlstudy.report ... "
                        "--out RUN_DIR)")
    parser.add_argument("--out", help="the PDF's path (default RUN_DIR/report/book.pdf)")
    parser.add_argument("--screenshots", metavar="DIR",
                        help="also save the landing page and chapter 99 as PNGs here")
    args = parser.parse_args(argv)
    run = Path(args.run_dir)
    try:
        pdf, pages = print_pdf(run, Path(args.out) if args.out else None)
        print(f"pdf: {os.path.relpath(pdf)} ({pages} pages)")
        if args.screenshots:
            for shot in screenshots(run, Path(args.screenshots)):
                print(f"screenshot: {os.path.relpath(shot)}")
    except (FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
