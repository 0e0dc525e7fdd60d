"""The CI report's book opened in headless Chromium (Debian's `chromium`), driven over the DevTools
protocol: the landing page and every chapter load from disk with every image decoded, no console
error, no visible "Traceback", the claims summary on the landing page; the landing page within 4
screens at 1400x900, no printed output box over 20 lines, no `PosixPath`, no NaN in a rendered
table, every image with a caption as alt text, and no page stating a verdict that differs from
claims.csv. Screenshots are saved under `<run>/report/screenshots/` for a person to look at.
`make test` installs chromium when root.

DDLSTUDY_BOOK=RUN_DIR checks an already rendered run instead of rendering the CI report."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ddlstudy.host.process import kill_group
from ddlstudy.report.pdf import chromium_env

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--window-size=1400,900"]
SCREEN = (1400, 900)
MAX_SCREENS = 4
MAX_STDOUT_LINES = 20
PAGE_TIMEOUT_S = 30

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (make test installs it when run as root: "
                             "apt-get install -y chromium)")


class DevTools:
    """One page target over the DevTools websocket: send commands, collect console errors."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0
        self.errors: list[str] = []
        self.events: list[str] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its reply, keeping the events that arrive meanwhile."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        deadline = time.monotonic() + PAGE_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv(timeout=PAGE_TIMEOUT_S))
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)
        raise TimeoutError(f"{method}: no reply in {PAGE_TIMEOUT_S} s")

    def _event(self, msg: dict[str, Any]) -> None:
        """Console errors, uncaught exceptions and failed loads are the page's errors."""
        method, p = msg.get("method", ""), msg.get("params", {})
        self.events.append(method)
        if method == "Runtime.consoleAPICalled" and p.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value", a.get("description", "")))
                                        for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.errors.append(p["exceptionDetails"].get("text", "exception"))
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            self.errors.append(f"{p['entry'].get('text')} {p['entry'].get('url', '')}")

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + PAGE_TIMEOUT_S
        while "Page.loadEventFired" not in self.events:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: no load event in {PAGE_TIMEOUT_S} s")
            self._event(json.loads(self.ws.recv(timeout=PAGE_TIMEOUT_S)))

    def js(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        return result["result"].get("value")


@contextmanager
def chromium(profile: Path) -> Iterator[DevTools]:
    """Headless Chromium (FLAGS: 1400x900, DevTools on a free loopback port) with the throwaway
    profile folder `profile`, its one page driven over DevTools with the Page, Runtime and Log
    events on; its process group (renderers, GPU, zygote) killed at the end. The book test here
    and tests/test_lab_widgets.py both drive it."""
    proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=chromium_env(profile), start_new_session=True)
    try:
        port = _devtools_port(proc)
        from urllib.request import urlopen

        targets = json.loads(urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t.get("type") == "page")
        from websockets.sync.client import connect

        with connect(page["webSocketDebuggerUrl"], max_size=None,
                     open_timeout=PAGE_TIMEOUT_S) as ws:
            tools = DevTools(ws)
            for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
                tools.call(domain)
            yield tools
    finally:
        kill_group(proc)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    """Headless Chromium with a throwaway profile (`chromium`)."""
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as tools:
        yield tools


def _devtools_port(proc: subprocess.Popen) -> int:
    """Chromium prints 'DevTools listening on ws://127.0.0.1:PORT/...' on stderr."""
    deadline = time.monotonic() + PAGE_TIMEOUT_S
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
        if found:
            return int(found.group(1))
        if not line and proc.poll() is not None:
            break
    raise RuntimeError("chromium did not open its DevTools port")


CHECK = """({
  images: Array.from(document.images).map(i => [i.getAttribute('src'), i.complete,
                                                 i.naturalWidth, i.getAttribute('alt') || '']),
  text: document.body.innerText,
  html: document.documentElement.outerHTML,
  claims: !!document.querySelector('table.claims, table.claims-view'),
  sidebar: document.querySelectorAll('nav.bd-links a').length,
  search: !!document.querySelector('form.bd-search, .search-button-field, [data-bs-target]'),
  codeShown: Array.from(document.querySelectorAll('details.hide-above-input, details'))
             .filter(d => d.open && d.querySelector('.cell_input')).length,
  height: document.documentElement.scrollHeight,
  stdout: Array.from(document.querySelectorAll('div.output.stream, div.output.stream pre'))
          .map(b => b.innerText.replace(/\\n$/, '').split('\\n').length),
  nanTables: Array.from(document.querySelectorAll('table'))
             .filter(t => /\\b(NaN|nan)\\b/.test(t.innerText)).length,
})"""


def _visit(browser: DevTools, page: Path, shots: Path) -> dict[str, Any]:
    """Open one page from disk at 1400x900, screenshot it, return what CHECK reads and the
    console errors."""
    browser.errors.clear()
    browser.call("Emulation.setDeviceMetricsOverride", width=SCREEN[0], height=SCREEN[1],
                 deviceScaleFactor=1, mobile=False)
    browser.open(page.resolve().as_uri())
    browser.js("Promise.all(Array.from(document.images).map(i => i.decode().catch(() => 0)))")
    seen = browser.js(CHECK)
    shot = browser.call("Page.captureScreenshot", format="png")
    (shots / f"{page.stem}.png").write_bytes(base64.b64decode(shot["data"]))
    return {**seen, "errors": list(browser.errors)}


@pytest.fixture(scope="module")
def book(request: pytest.FixtureRequest) -> tuple[Path, list[str]]:
    """(run folder, chapter pages) of a rendered book: DDLSTUDY_BOOK's, else the CI report's."""
    given = os.environ.get("DDLSTUDY_BOOK")
    if given:
        run = Path(given)
        names = sorted(p.stem for p in (run / "report").glob("[0-9][0-9]_*.html"))
        return run, names
    _, out, result = request.getfixturevalue("ci_report")
    return out, list(result.ran)


def test_book_opens_in_chromium(book, browser: DevTools) -> None:
    import pandas as pd

    from ddlstudy.report import claims_view

    out, ran = book
    report = out / "report"
    shots = report / "screenshots"
    shots.mkdir(exist_ok=True)
    pages = [report / "index.html", *(report / f"{n}.html" for n in ran)]
    assert len(pages) > 1
    claims_csv = out / "99_conclusions" / "claims.csv"
    claims = pd.read_csv(claims_csv) if claims_csv.exists() else None
    landing = None
    for page in pages:
        seen = _visit(browser, page, shots)
        where = page.name
        assert seen["errors"] == [], f"{where}: console errors {seen['errors']}"
        broken = [src for src, done, width, _ in seen["images"] if not (done and width > 0)]
        assert not broken, f"{where}: images that did not load: {broken}"
        no_caption = [src for src, _, _, alt in seen["images"]
                      if " " not in alt.strip() or re.fullmatch(r"[0-9a-f]{16,}", alt.strip())]
        assert not no_caption, f"{where}: images without a caption as alt text: {no_caption}"
        assert "Traceback" not in seen["text"], f"{where}: a traceback is visible"
        assert "TqdmWarning" not in seen["text"] and "/tmp/" not in seen["text"], where
        assert "PosixPath" not in seen["text"], f"{where}: a PosixPath repr is visible"
        long_boxes = [n for n in seen["stdout"] if n > MAX_STDOUT_LINES]
        assert not long_boxes, f"{where}: printed output boxes of {long_boxes} lines"
        assert seen["nanTables"] == 0, f"{where}: {seen['nanTables']} tables show NaN"
        assert seen["sidebar"] >= len(ran), f"{where}: sidebar lacks chapters"
        assert seen["codeShown"] == 0, f"{where}: code is unfolded by default"
        if claims is not None and "claim_id" in claims:
            wrong = claims_view.check_page(seen["html"], claims)
            assert not wrong, f"{where}: verdicts that differ from claims.csv: {wrong}"
        landing = landing or seen
    assert landing is not None and landing["claims"], "landing page has no claims summary"
    assert len(landing["images"]) >= 2, "landing page shows fewer than 2 figures"
    screens = landing["height"] / SCREEN[1]
    assert screens <= MAX_SCREENS, f"landing page is {screens:.1f} screens at 1400x900"
    assert (shots / "index.png").stat().st_size > 10_000
    assert {p.stem for p in shots.glob("*.png")} >= {p.stem for p in pages}
