"""One look for every figure of the book: a fixed colour per strategy, algorithm, link profile and
verdict, integer worker ticks, log axes only over decades, titles clear of facet titles.

`analysis.plots` draws with these; a strategy keeps its colour in every chapter, whatever else the
figure shows (seaborn's default cycle would colour by order of appearance). Names not listed get
a stable colour from a spare palette (hashed by name, so the same unknown name keeps its colour).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

# Okabe-Ito (colour-blind safe) first, then Tableau for the rest.
_OKABE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
_SPARE = ["#4E79A7", "#F28E2B", "#59A14F", "#B07AA1", "#9C755F", "#76B7B2", "#EDC948",
          "#FF9DA7", "#BAB0AC", "#E15759"]

STRATEGY: dict[str, str] = {
    "ps_sync": "#D55E00", "ps_async": "#E69F00", "ps_sharded": "#F28E2B", "ps": "#D55E00",
    "allreduce": "#0072B2", "ddp": "#56B4E9", "horovod": "#009E73", "horovod_fp16": "#59A14F",
    "tf_ps_sync": "#CC79A7", "tf_ps_async": "#B07AA1", "tf_allreduce": "#8C564B",
    "single": "#7F7F7F",
}
ALGORITHM: dict[str, str] = {
    "ring": "#0072B2", "tree": "#009E73", "ps": "#D55E00", "reference": "#7F7F7F",
    "ring_pipelined": "#56B4E9", "recursive_doubling": "#E69F00", "rabenseifner": "#CC79A7",
    "ps_sharded": "#F28E2B",
}
LINK: dict[str, str] = {
    "1GbE": "#CC79A7", "10GbE": "#D55E00", "25GbE": "#E69F00", "100GbE": "#009E73",
    "IB-EDR": "#0072B2", "loopback": "#7F7F7F", "none": "#7F7F7F",
}
VERDICT: dict[str, str] = {
    "agrees": "#009E73", "differs": "#D55E00", "inconclusive": "#E69F00",
    "not measured": "#BAB0AC", "set by configuration": "#56B4E9",
}
COLOURS: dict[str, str] = {**LINK, **ALGORITHM, **STRATEGY, **VERDICT}

MEASURED_MARKER = "o"
PROJECTED_LINE = "-"


def colour(name: Any) -> str:
    """The colour of a strategy / algorithm / link / verdict name; a stable spare one else."""
    key = str(name)
    if key in COLOURS:
        return COLOURS[key]
    base = key.split(" ")[0].split("(")[0].strip()
    if base in COLOURS:
        return COLOURS[base]
    return _SPARE[zlib.crc32(key.encode()) % len(_SPARE)]


def palette(names: Iterable[Any]) -> dict[Any, str]:
    """name -> colour for seaborn's `palette=` (each distinct name once, in order)."""
    return {n: colour(n) for n in dict.fromkeys(names)}


def integer_ticks(ax: Axes, values: Iterable[float] | None = None) -> None:
    """Worker counts are whole: ticks at the values when few, else integer locator."""
    if values is not None:
        vals = sorted({float(v) for v in values if np.isfinite(float(v))})
        if 0 < len(vals) <= 12 and all(v.is_integer() for v in vals):
            ax.set_xticks(vals, [f"{int(v)}" for v in vals])
            return
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def spans_decades(values: Iterable[float], decades: float = 1.5) -> bool:
    """True when positive values span more than `decades` orders of magnitude (a log axis)."""
    v = np.asarray([float(x) for x in values], dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return len(v) > 1 and float(np.log10(v.max() / v.min())) > decades


def log_if_decades(ax: Axes, values: Iterable[float], axis: str = "y") -> None:
    """A log scale on `axis` only where the values span decades; linear otherwise."""
    if spans_decades(values):
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


def percent_axis(ax: Axes) -> None:
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0%}"))


def title(fig: Figure, text: str, facets: bool = False) -> None:
    """A figure title on one line above any facet titles: long titles wrap at the width and the
    layout leaves room for them (a two-line suptitle at y=1.03 sat on the facet titles)."""
    if not text:
        return
    import textwrap

    width = max(40, int(fig.get_figwidth() * 11))
    wrapped = "\n".join(textwrap.wrap(text, width))
    lines = wrapped.count("\n") + 1
    fig.suptitle(wrapped, fontsize=11)
    top_in = 0.22 * lines + (0.3 if facets else 0.12)
    fig.subplots_adjust(top=max(0.5, 1 - top_in / fig.get_figheight()))


def finish(fig: Figure, data: Any = None, kind: str = "") -> Figure:
    """Tag a figure with the data it draws (written as `<name>.csv` by plots.save) and what it
    shows ('measured', 'emulated', 'replayed', 'projected'), for captions and data links."""
    fig.ddlstudy_data = data  # type: ignore[attr-defined]
    fig.ddlstudy_kind = kind  # type: ignore[attr-defined]
    return fig


def caption_of(fig: Figure) -> str:
    """The figure's own title text (suptitle, else the first axes' title), one line."""
    text = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
    if not text:
        text = next((ax.get_title() for ax in fig.axes if ax.get_title()), "")
    return " ".join(text.split())
