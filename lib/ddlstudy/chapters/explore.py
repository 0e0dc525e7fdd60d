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

# what a reader may pick for latency: the profile's own, or one value for every link
LATENCIES: list[tuple[str, float | None]] = [("profile's own", None), ("1 us", 1e-6),
                                             ("10 us", 1e-5), ("100 us", 1e-4), ("1 ms", 1e-3),
                                             ("10 ms", 1e-2)]


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
    controls = {
        "model": w.Dropdown(options=list(dict.fromkeys(models)), value=start["model"],
                            description="model", style=style),
        "profile": w.Dropdown(options=list(PROFILES), value=start["profile"],
                              description="link profile", style=style),
        "replay_source": w.Dropdown(options=compute_tables(), value=start["replay_source"]
                                    if start["replay_source"] in compute_tables() else "gpu",
                                    description="compute table", style=style),
        "latency_s": w.Dropdown(options=LATENCIES, value=start.get("latency_s"),
                                description="latency", style=style),
        "servers": w.IntSlider(value=start.get("servers", 1), min=0, max=16,
                               description="PS servers (0: S = N)", style=style),
        "bucket_mb": w.FloatLogSlider(value=start.get("bucket_mb", 25.0), base=2, min=-2,
                                      max=9, step=0.5, description="bucket MiB", style=style),
        "compute_scale": w.FloatLogSlider(value=start.get("compute_scale", 1.0), base=10,
                                          min=-1, max=1, step=0.1,
                                          description="compute x", style=style),
    }
    out = w.Output()
    button = w.Button(description="draw")

    def redraw(_: Any = None) -> None:
        out.clear_output(wait=True)
        with out:
            fig = draw(c=c, workers=workers, shape=shape, batch_size=batch_size,
                       algorithm=algorithm, label=label,
                       **{k: v.value for k, v in controls.items()})
            display(fig)
            plt.close(fig)

    # drawn only when a reader acts (a change or the button): a headless run (papermill,
    # nbval) builds the widgets and sends no output through them
    for control in controls.values():
        control.observe(redraw, names="value")
    button.on_click(redraw)
    return w.VBox([w.HBox(list(controls.values())[:3]), w.HBox(list(controls.values())[3:]),
                   button, out])
