"""Chapter 06's what-if widgets (ddlstudy.chapters.explore) driven in a real JupyterLab.

The test starts `jupyter lab` from this environment on 127.0.0.1 with a token, opens a copy of
notebooks/06_projection.ipynb (CI params, outputs into a temporary folder) in headless Chromium
over the DevTools protocol (test_browser's driver), runs every cell through JupyterLab's own
"run all cells" command, checks that every control renders (a dropdown shows its choice, a
slider's track has a width, the bucket slider reads the params' value), drags the bucket-size
slider with the mouse and checks the figure is drawn, drags it again and checks the figure
changes, with no error in any cell or in the widgets' output. The server (and the kernels it
started) and the browser are stopped whatever happens. Waits are on conditions, with bounds
generous enough for a loaded host.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest

from test_browser import CHROMIUM, DevTools, chromium

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "06_projection.ipynb"
JUPYTER = Path(sys.executable).with_name("jupyter")
# bounds, not sleeps: each wait ends as soon as its condition holds. On a host at load 20 (2
# cores) the server took ~1 min to answer and JupyterLab ~3 min to open the notebook.
START_S = 420    # server up; JupyterLab loaded with the notebook and its kernel idle
RUN_S = 600      # every cell of chapter 06 on CI params (about a minute on an idle host)
REDRAW_S = 240   # one slider move -> a new figure

pytestmark = [
    pytest.mark.timeout(2400),
    pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make test installs it "
                                                "when run as root: apt-get install -y chromium)"),
    pytest.mark.skipif(not JUPYTER.exists(), reason=f"no jupyter in {JUPYTER.parent}"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, bound_s: float, probe: Callable[[], Any], every_s: float = 0.5) -> Any:
    """probe() until it returns something truthy; TimeoutError naming `what` after bound_s."""
    deadline, last = time.monotonic() + bound_s, None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (OSError, TimeoutError, RuntimeError) as err:  # not up yet / page reloading
            last = err
        else:
            if last:
                return last
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {bound_s:.0f} s (last seen: {last!r})")


def _stop_server(proc: subprocess.Popen, url: str, token: str, runtime: Path) -> None:
    """Ask the server to shut down (it stops its kernels), then kill its process group and any
    kernel still holding a connection file under this test's runtime folder."""
    try:
        from urllib.request import Request

        urlopen(Request(f"{url}/api/shutdown", method="POST",
                        headers={"Authorization": f"token {token}"}), timeout=10).read()
        proc.wait(timeout=30)
    except Exception:  # noqa: BLE001 -- whatever failed, the kills below still run
        pass
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    mine = str(runtime)
    for entry in Path("/proc").iterdir():  # kernels run in their own sessions
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if mine in cmd:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """JupyterLab on 127.0.0.1 serving a copy of chapter 06 whose run folder is temporary:
    (base url, token)."""
    home = tmp_path_factory.mktemp("lab")
    nb = json.loads(NOTEBOOK.read_text())
    params = next(c for c in nb["cells"] if c["cell_type"] == "code")
    source = "".join(params["source"])
    assert "run_dir = None" in source, "chapter 06's parameters cell changed: update the test"
    params["source"] = source.replace("run_dir = None", f"run_dir = {str(home / 'run')!r}")
    (home / NOTEBOOK.name).write_text(json.dumps(nb))
    token, port = os.urandom(12).hex(), _free_port()
    runtime = home / "runtime"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime),
           "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_DATA_DIR": str(home / "data"),
           "DDLSTUDY_PARAMS": os.pathsep.join([str(ROOT / "params/default.yaml"),
                                               str(ROOT / "params/ci.yaml")]),
           "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    cmd = [str(JUPYTER), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={home}", "--LabApp.expose_app_in_browser=True",
           f"--LabApp.workspaces_dir={home / 'workspaces'}",
           f"--LabApp.user_settings_dir={home / 'settings'}",
           "--ServerApp.terminals_enabled=False", "--LabApp.news_url=",
           *(["--allow-root"] if os.geteuid() == 0 else [])]
    log = (home / "server.log").open("w")
    proc = subprocess.Popen(cmd, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait("jupyter server answering", START_S,
              lambda: proc.poll() is None and urlopen(f"{url}/api/status?token={token}",
                                                      timeout=5).status == 200
              or (proc.poll() is not None and _raise(f"jupyter lab exited: "
                                                     f"{(home / 'server.log').read_text()}")))
        yield url, token
    finally:
        _stop_server(proc, url, token, runtime)
        log.close()


def _raise(message: str) -> bool:
    raise AssertionError(message)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    """Headless Chromium at 1400x900 with a throwaway profile (test_browser's `chromium`)."""
    with chromium(tmp_path_factory.mktemp("lab-chromium")) as tools:
        yield tools


# the notebook panel among the main area's widgets (shell.currentWidget follows focus)
NB = ("(window.jupyterapp && Array.from(jupyterapp.shell.widgets('main'))"
      ".find(w => w.content && w.sessionContext && w.content.widgets))")
STATE = f"""(() => {{
  const nb = {NB};
  if (!nb || !nb.content || !nb.sessionContext) return null;
  const kernel = nb.sessionContext.session && nb.sessionContext.session.kernel;
  const code = nb.content.widgets.filter(c => c.model.type === 'code');
  return {{kernel: kernel ? kernel.status : null, cells: code.length,
           run: code.filter(c => c.model.executionCount !== null).length,
           errors: code.flatMap(c => c.model.sharedModel.outputs
                                     .filter(o => o.output_type === 'error')
                                     .map(o => o.ename + ': ' + o.evalue))}};
}})()"""

# the widgets of the notebook's last cell: each control's label, kind, shown value and size
CONTROLS = """(() => {
  const box = document.querySelector('.jp-Cell:last-child .widget-vbox');
  if (!box) return null;
  const out = [];
  for (const w of box.querySelectorAll('.widget-dropdown, .widget-slider')) {
    const label = (w.querySelector('.widget-label') || {}).textContent || '';
    const select = w.querySelector('select');
    const track = w.querySelector('.slider-container, .noUi-target');
    const readout = w.querySelector('.widget-readout');
    const shown = select ? (select.selectedIndex >= 0 ?
                            select.options[select.selectedIndex].text : '')
                         : (readout ? readout.textContent : '');
    out.push({label: label.trim(), kind: select ? 'dropdown' : 'slider',
              shown: shown.replace(/\u00a0/g, ' ').trim(),  // options show spaces as nbsp
              width: (track || w).getBoundingClientRect().width});
  }
  const output = box.querySelector('.widget-output');
  const img = output && output.querySelector('img');
  return {controls: out, img: img ? img.src : null,
          text: output ? output.textContent : ''};
})()"""


def _handle(browser: DevTools, label: str) -> tuple[float, float]:
    """Centre of the slider handle labelled `label`, scrolled into view."""
    where = browser.js(f"""(() => {{
      const box = document.querySelector('.jp-Cell:last-child .widget-vbox');
      const w = Array.from(box.querySelectorAll('.widget-slider'))
        .find(s => (s.querySelector('.widget-label') || {{}}).textContent.trim() === {label!r});
      const h = w.querySelector('.noUi-handle, .ui-slider-handle');
      h.scrollIntoView({{block: 'center'}});
      const r = h.getBoundingClientRect();
      return [r.x + r.width / 2, r.y + r.height / 2];
    }})()""")
    return where[0], where[1]


def _drag(browser: DevTools, label: str, dx: float) -> None:
    """Press the slider's handle, move it `dx` pixels in small steps, release: a reader's drag."""
    x, y = _handle(browser, label)
    browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
    browser.call("Input.dispatchMouseEvent", type="mousePressed", x=x, y=y, button="left",
                 clickCount=1)
    for k in range(1, 11):
        browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=x + dx * k / 10, y=y,
                     button="left", buttons=1)
    browser.call("Input.dispatchMouseEvent", type="mouseReleased", x=x + dx, y=y,
                 button="left", clickCount=1)


def _control(seen: dict[str, Any], label: str) -> dict[str, Any]:
    found = [c for c in seen["controls"] if c["label"] == label]
    assert found, f"no control labelled {label!r} among {seen['controls']}"
    return found[0]


def test_chapter06_widgets_redraw_in_jupyterlab(lab: tuple[str, str],
                                                browser: DevTools) -> None:
    from ddlstudy.config.params import load_params

    url, token = lab
    P = load_params(ROOT / "params/default.yaml", ROOT / "params/ci.yaml")
    browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=900,
                 deviceScaleFactor=1, mobile=False)
    browser.call("Emulation.setFocusEmulationEnabled", enabled=True)  # a focused window
    # no wait for the load event (JupyterLab's bundle takes long on a loaded host): the
    # condition below is what counts
    browser.call("Page.navigate", url=f"{url}/lab/tree/{NOTEBOOK.name}?reset&token={token}")
    _wait("JupyterLab open with chapter 06 and its kernel idle", START_S,
          lambda: (browser.js(STATE) or {}).get("kernel") == "idle")
    browser.js(f"(() => {{ const nb = {NB}; jupyterapp.shell.activateById(nb.id); "
               "nb.content.activeCellIndex = 0; })()")
    # not awaited: the command's promise settles only when every cell has run
    browser.js("(() => { jupyterapp.commands.execute('notebook:run-all-cells'); return 1; })()")
    state = _wait("every code cell of chapter 06 run", RUN_S,
                  lambda: (lambda s: s and (s["errors"] or (s["run"] == s["cells"]
                                                            and s["kernel"] == "idle")) and s)(
                      browser.js(STATE)), every_s=1.0)
    assert state["errors"] == [], f"cells raised: {state['errors']}"
    seen = _wait("the what-if widgets rendered", REDRAW_S, lambda: browser.js(CONTROLS))

    # every control renders: a dropdown shows its choice, a slider has a track a reader can use
    assert len(seen["controls"]) == 7, seen["controls"]
    blank = [c["label"] for c in seen["controls"] if c["kind"] == "dropdown" and not c["shown"]]
    assert not blank, f"dropdowns showing nothing: {blank}"
    narrow = [c for c in seen["controls"] if c["kind"] == "slider" and c["width"] < 60]
    assert not narrow, f"sliders without a usable track: {narrow}"
    assert _control(seen, "latency")["shown"] == "profile's own"
    # the widgets start at the params' values
    assert float(_control(seen, "bucket MiB")["shown"]) == pytest.approx(P.training.bucket_mb)
    assert seen["img"] is None, "the figure is drawn before a reader acts"

    _drag(browser, "bucket MiB", 60)
    _wait("a figure after dragging the bucket slider", REDRAW_S,
          lambda: (browser.js(CONTROLS) or {}).get("img"))
    _wait("the kernel idle after the redraw", REDRAW_S,
          lambda: (browser.js(STATE) or {}).get("kernel") == "idle")
    first = browser.js(CONTROLS)
    moved = _control(first, "bucket MiB")["shown"]
    assert float(moved) > P.training.bucket_mb, f"the drag did not move the slider: {moved}"
    _drag(browser, "bucket MiB", -120)
    second = _wait("the figure redrawn after the second drag", REDRAW_S,
                   lambda: (lambda s: s["img"] and s["img"] != first["img"] and s)(
                       browser.js(CONTROLS)))
    assert float(_control(second, "bucket MiB")["shown"]) < float(moved)
    for s in (first, second):
        assert "Traceback" not in s["text"] and "Error" not in s["text"], s["text"]
    assert (browser.js(STATE) or {}).get("errors") == []
