"""The CI report's book opened in headless Chromium (Debian's `chromium`), driven over the DevTools
protocol: the landing page and every chapter load from disk with every image decoded, no console
error, no visible "Traceback", the claims table on the landing page; screenshots are saved under
`<run>/report/screenshots/` for a person to look at. `make test` installs chromium when root."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--window-size=1400,1000"]
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


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    """Headless Chromium with a throwaway profile; killed (its process group) at the end."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
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
        proc.kill()
        proc.wait(timeout=10)


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
                                                 i.naturalWidth]),
  text: document.body.innerText,
  claims: !!document.querySelector('table.claims'),
  sidebar: document.querySelectorAll('nav.bd-links a').length,
  search: !!document.querySelector('form.bd-search, .search-button-field, [data-bs-target]'),
  codeShown: Array.from(document.querySelectorAll('details.hide-above-input, details'))
             .filter(d => d.open && d.querySelector('.cell_input')).length,
})"""


def _visit(browser: DevTools, page: Path, shots: Path) -> dict[str, Any]:
    """Open one page from disk, screenshot it, return what CHECK reads and the console errors."""
    browser.errors.clear()
    browser.open(page.resolve().as_uri())
    browser.js("Promise.all(Array.from(document.images).map(i => i.decode().catch(() => 0)))")
    seen = browser.js(CHECK)
    shot = browser.call("Page.captureScreenshot", format="png")
    (shots / f"{page.stem}.png").write_bytes(base64.b64decode(shot["data"]))
    return {**seen, "errors": list(browser.errors)}


def test_book_opens_in_chromium(ci_report, browser: DevTools) -> None:
    _, out, result = ci_report
    report = out / "report"
    shots = report / "screenshots"
    shots.mkdir(exist_ok=True)
    pages = [report / "index.html", *(report / f"{n}.html" for n in result.ran)]
    assert len(pages) > 1
    landing = None
    for page in pages:
        seen = _visit(browser, page, shots)
        where = page.name
        assert seen["errors"] == [], f"{where}: console errors {seen['errors']}"
        broken = [src for src, done, width in seen["images"] if not (done and width > 0)]
        assert not broken, f"{where}: images that did not load: {broken}"
        assert "Traceback" not in seen["text"], f"{where}: a traceback is visible"
        assert "TqdmWarning" not in seen["text"] and "/tmp/" not in seen["text"], where
        assert seen["sidebar"] >= len(result.ran), f"{where}: sidebar lacks chapters"
        assert seen["codeShown"] == 0, f"{where}: code is unfolded by default"
        landing = landing or seen
    assert landing is not None and landing["claims"], "landing page has no claims table"
    assert len(landing["images"]) >= 3, "landing page shows fewer than 3 headline figures"
    assert (shots / "index.png").stat().st_size > 10_000
    assert {p.stem for p in shots.glob("*.png")} >= {p.stem for p in pages}
