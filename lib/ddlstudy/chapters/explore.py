"""Chapter 06's what-ifs as ipywidgets sliders, for exploring the projection in JupyterLab.

The report shows the static figures the chapter draws from its params; these sliders only redraw
`costmodel.project` for one model in the kernel a reader has open (projected, analytic: every
curve carries the validation label). The book drops the cell (tag `interactive`): a slider on a
static page would move nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt

from ddlstudy.analysis import costmodel
from ddlstudy.network.profiles import PROFILES
from ddlstudy.workload import replay

# what a reader may pick for latency: the profile's own, or one value for every link. The
# dropdown holds the labels (a None value would show a blank choice); `latency` maps them back.
LATENCIES: dict[str, float | None] = {"profile's own": None, "1 us": 1e-6, "10 us": 1e-5,
                                      "100 us": 1e-4, "1 ms": 1e-3, "10 ms": 1e-2}
# bucket sizes (MiB) a reader may pick; the params' own value is added, so it shows unrounded
BUCKETS_MB = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 25.0, 32.0, 64.0, 128.0, 256.0, 512.0)


def latency_choices(latency_s: float | None) -> dict[str, float | None]:
    """label -> latency for the dropdown: LATENCIES, plus the params' value if it is not one."""
    if latency_s in LATENCIES.values():
        return dict(LATENCIES)
    return {**LATENCIES, f"{latency_s * 1e6:g} us": latency_s}  # type: ignore[operator]


def bucket_options(start_mb: float) -> list[tuple[str, float]]:
    """(label, MiB) for the bucket slider, the params' value among them."""
    return [(f"{v:g}", v) for v in sorted({*BUCKETS_MB, float(start_mb)})]


def compute_tables() -> list[str]:
    """'gpu' and every other stored compute table (lib/ddlstudy/tables/*.csv)."""
    return ["gpu", *sorted(p.stem for p in replay.TABLES.glob("*.csv") if p.stem != "h100")]


def draw(model: str, profile: str, replay_source: str, latency_s: float | None, servers: int,
         bucket_mb: float, compute_scale: float, c: costmodel.Constants, workers: Sequence[int],
         shape: str, batch_size: int, algorithm: str, label: str) -> plt.Figure:
    """Projected scaling efficiency vs workers: ring (this bucket size) and PS (these servers)."""
    kw = dict(replay_source=replay_source, shape=shape, batch_size=batch_size,
              latency_s=latency_s, algorithm=algorithm, compute_scale=compute_scale)
    ring = costmodel.project([model], ["allreduce"], workers, [profile], c,
                             bucket_mb=[bucket_mb], **kw)
    ps = costmodel.project([model], ["ps_sync"], workers, [profile], c, servers=[servers], **kw)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(ring["workers"], ring["efficiency"], marker="o",
            label=f"ring all-reduce, {bucket_mb:g} MiB buckets")
    ax.plot(ps["workers"], ps["efficiency"], marker="s",
            label=f"PS, S = {'N' if servers == 0 else servers}")
    ax.set(xscale="log", ylim=(0, 1.05), xlabel="workers", ylabel="scaling efficiency")
    ax.legend(fontsize=8)
    ax.set_title(f"{model}, {profile} links, compute {replay_source} x {compute_scale:g}; "
                 f"{label}", fontsize=8)
    return fig


def sliders(models: Sequence[str], c: costmodel.Constants, workers: Sequence[int], shape: str,
            batch_size: int, algorithm: str, label: str, start: dict[str, Any]) -> Any:
    """A VBox of the what-if widgets over an Output that `draw` redraws on every change (or
    on the button: the first figure)."""
    import ipywidgets as w
    from IPython.display import display

    style = {"description_width": "initial"}
    latency = latency_choices(start.get("latency_s"))
    wide = w.Layout(width="330px")  # a long description must not squeeze a slider's track
    once = dict(continuous_update=False)  # a drag redraws once, on release (a redraw takes s)
    controls = {
        "model": w.Dropdown(options=list(dict.fromkeys(models)), value=start["model"],
                            description="model", style=style, layout=wide),
        "profile": w.Dropdown(options=list(PROFILES), value=start["profile"],
                              description="link profile", style=style, layout=wide),
        "replay_source": w.Dropdown(options=compute_tables(), value=start["replay_source"]
                                    if start["replay_source"] in compute_tables() else "gpu",
                                    description="compute table", style=style, layout=wide),
        "latency_s": w.Dropdown(options=list(latency),
                                value=next(k for k, v in latency.items()
                                           if v == start.get("latency_s")),
                                description="latency", style=style, layout=wide),
        "servers": w.IntSlider(value=start.get("servers", 1), min=0, max=16,
                               description="PS servers (0: S = N)", style=style, layout=wide,
                               **once),
        "bucket_mb": w.SelectionSlider(options=bucket_options(start.get("bucket_mb", 25.0)),
                                       value=float(start.get("bucket_mb", 25.0)),
                                       description="bucket MiB", style=style, layout=wide,
                                       **once),
        "compute_scale": w.FloatLogSlider(value=start.get("compute_scale", 1.0), base=10,
                                          min=-1, max=1, step=0.1, description="compute x",
                                          style=style, layout=wide, **once),
    }
    out = w.Output()
    button = w.Button(description="draw")

    def redraw(_: Any = None) -> None:
        out.clear_output(wait=True)
        with out:
            fig = draw(c=c, workers=workers, shape=shape, batch_size=batch_size,
                       algorithm=algorithm, label=label,
                       **{k: latency[v.value] if k == "latency_s" else v.value
                          for k, v in controls.items()})
            display(fig)
            plt.close(fig)

    # drawn only when a reader acts (a change or the button): a headless run (papermill,
    # nbval) builds the widgets and sends no output through them
    for control in controls.values():
        control.observe(redraw, names="value")
    button.on_click(redraw)
    shown = list(controls.values())  # three rows of at most 3 x 330 px: none is squeezed
    return w.VBox([w.HBox(shown[:3]), w.HBox(shown[3:5]), w.HBox(shown[5:]), button, out])
