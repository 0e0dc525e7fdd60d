"""The report a reader opens: a run's executed notebooks rendered as a Sphinx book.

Long because: the cleaning rules (outputs, captions, folded logs) and the landing page are one
rendering pass over the same pages; the claims page is in `claims_view.py`, the PDF in `pdf.py`.

Sphinx + myst-nb + sphinx-book-theme (Jupyter Book 1's stack; docs/book.md says why not Quarto)
render cleaned *copies* of `outputs/<run_id>/*.ipynb` without re-running them
(`nb_execution_mode = "off"`). The copies lose what is noise to a reader (stderr, tqdm bars and
widgets, warnings, tracebacks beyond their last line, absolute machine paths), get their code
folded (`hide-input` tags) and gain a summary computed from the chapter's records
(ddlstudy.chapters.summaries). The landing page puts the findings first: the claims table, the
headline
figures (each linking to its chapter), then the run's metadata. Math is written out as TeX (no
MathJax from a CDN), so the book works opened from disk with no network.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pandas as pd

from ddlstudy.chapters.registry import CHAPTERS
from ddlstudy.chapters.summaries import summarize
from ddlstudy.report import claims_view

REPO = Path(__file__).resolve().parents[3]
DASH = "\u2014"
SOURCE = ".book"  # staging folder inside the run folder: cleaned copies, landing page, conf.py

# (caption, chapter the figure belongs to, figure files to try in order) for the landing page:
# from the chapter registry (each chapter declares its headline figures).
HEADLINES: tuple[tuple[str, str, tuple[str, ...]], ...] = tuple(
    (caption, c.name, patterns) for c in CHAPTERS.values() for caption, patterns in c.headlines)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_TQDM = re.compile(r"\d+%\|.*\||\d+/\d+ \[\d|it/s\]|s/it\]")
_WARNING = re.compile(r"^\s*\S*(Warning|warn)\b.*:|^\s*warnings\.warn\(")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_POSIX = re.compile(r"(?:Posix|Windows|Pure\w*)?Path\((['\"])(.*?)\1\)")
STDOUT_MAX_LINES = 20  # a longer printed output goes to a log file linked from the page
STDOUT_HEAD = 12       # ... and its first lines stay on the page
_ABS_PATH = re.compile(r"(?<![\w.])/(?:tmp|home|root|work|var|opt|usr|srv|mnt)"
                       r"(?:/[^\s'\"<>()\]]*)?")


@dataclass
class Page:
    """One chapter page: the executed notebook's name (docname), its chapter and its status."""

    name: str
    chapter: str
    status: str


class BookError(RuntimeError):
    """Sphinx failed: the message is its last error line."""


# ------------------------------------------------------------------ cleaning the executed copies
def scrub_paths(text: str, run_dir: Path) -> str:
    """No machine paths in pages: the run folder and the repository become relative names, any
    other absolute path only its last component."""
    run = run_dir.resolve()
    label = os.path.relpath(run, REPO) if run.is_relative_to(REPO) else f"<run folder {run.name}>"
    text = text.replace(str(run), label).replace(str(REPO) + "/", "").replace(str(REPO), ".")
    text = _POSIX.sub(lambda m: m.group(2), text)
    text = re.sub(r"(?:Posix|Windows)?Path\(&#x27;(.*?)&#x27;\)", r"\1", text)
    return _ABS_PATH.sub(lambda m: ".../" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)


def _keep_output(out: dict[str, Any]) -> bool:
    """Stderr, tqdm widgets and empty streams are noise on a rendered page."""
    if out.get("output_type") == "stream":
        return out.get("name") == "stdout" and bool(str(out.get("text", "")).strip())
    return WIDGET_MIME not in out.get("data", {})


def _clean_stdout(text: str) -> str:
    """Stdout without tqdm bars or warning lines (a bar's carriage returns keep only the end)."""
    lines = [ln.rsplit("\r", 1)[-1] for ln in text.split("\n")]
    return "\n".join(ln for ln in lines if not (_TQDM.search(ln) or _WARNING.search(ln)))


def _clean_output(out: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """One output with paths scrubbed; an error keeps its last line, not the traceback."""
    if out.get("output_type") == "error":
        out["traceback"] = [f"{out.get('ename', 'Error')}: {_ANSI.sub('', out.get('evalue', ''))}"]
    if out.get("output_type") == "stream":
        out["text"] = _clean_stdout(str(out["text"]))
    for key, value in list(out.get("data", {}).items()):
        if key.startswith("text/") or key.endswith("json") and isinstance(value, str):
            out["data"][key] = scrub_paths("".join(value) if isinstance(value, list) else value,
                                           run_dir)
    for key in ("text", "evalue"):
        if isinstance(out.get(key), str):
            out[key] = scrub_paths(out[key], run_dir)
    out["traceback"] = [scrub_paths(t, run_dir) for t in out.get("traceback", [])]
    if not out["traceback"]:
        out.pop("traceback")
    return out


@dataclass
class PageContext:
    """Where cleaning a chapter page writes what it moves off the page: figures (numbered,
    captioned, with their data) and long printed output (log files), under the book's
    `_static/` so that Sphinx copies them beside the pages."""

    src: Path
    page: str
    chapter: str
    folder: Path
    figures: int = 0
    logs: int = 0
    saved: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.saved = sorted(self.folder.glob("*.png"), key=lambda p: p.stat().st_mtime) \
            if self.folder.is_dir() else []

    @property
    def number(self) -> str:
        head = self.chapter[:2]
        return str(int(head)) if head.isdigit() else head


_FLOAT_CELL = re.compile(r"(<td[^>]*>)\s*(-?\d+\.\d{4,}(?:e[-+]?\d+)?|-?\d+(?:\.\d+)?e[-+]?\d+)"
                         r"\s*(</td>)")
_NAN_CELL = re.compile(r"(<td[^>]*>)\s*(?:NaN|nan|None|&lt;NA&gt;|<NA>|NaT)\s*(</td>)")
UNITS = (("_per_sec", "/s"), ("_per_s", "/s"), ("_bytes", "bytes"), ("_GBps", "GB/s"),
         ("_mbps", "MB/s"), ("_pct", "%"), ("_us", "\u00b5s"), ("_ms", "ms"), ("_s", "s"),
         ("_mb", "MiB"), ("_gb", "GB"))


def unit_of(column: str) -> str:
    """The unit a column's name ends with ('time_p50_s' -> 's'), or ''."""
    for suffix, unit in UNITS:
        if column.endswith(suffix):
            return unit
    return ""


def format_number(value: float) -> str:
    """One rounding for every table: 4 significant digits, thousands grouped above 10^4."""
    if not np.isfinite(value):
        return DASH
    if value != 0 and (abs(value) >= 1e7 or abs(value) < 1e-4):
        return f"{value:.3e}"
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def format_table_html(text: str) -> str:
    """A pandas HTML table through the one formatter: long floats rounded, NaN as a dash with a
    title saying why, units appended to headers whose column names carry them."""
    if "<table" not in text:
        return text
    text = _FLOAT_CELL.sub(lambda m: m.group(1) + format_number(float(m.group(2))) + m.group(3),
                           text)
    text = _NAN_CELL.sub(lambda m: m.group(1)[:-1] + ' title="no value: not measured or not '
                         f'applicable">{DASH}' + m.group(2), text)

    text = _drop_range_index(text)

    def header(m: re.Match[str]) -> str:
        name = m.group(2)
        unit = unit_of(name)
        return m.group(1) + name + (f" ({unit})" if unit and "(" not in name else "") + m.group(3)
    return re.sub(r"(<th[^>]*>)([A-Za-z][\w]*)(</th>)", header, text)


def _drop_range_index(text: str) -> str:
    """A table's default 0..n-1 row index is not data: dropped (a named index stays)."""
    body = re.search(r"<tbody>(.*?)</tbody>", text, re.S)
    if not body:
        return text
    heads = re.findall(r"<tr[^>]*>\s*<th[^>]*>([^<]*)</th>", body.group(1))
    rows = body.group(1).count("<tr")
    if not rows or heads != [str(i) for i in range(rows)]:
        return text
    new_body = re.sub(r"(<tr[^>]*>)\s*<th[^>]*>\d+</th>", r"\1", body.group(1))
    head = text[:body.start()]
    head = re.sub(r"(<tr[^>]*>)\s*<th[^>]*>\s*</th>", r"\1", head)
    return head + "<tbody>" + new_body + "</tbody>" + text[body.end():]


def _long_stdout(out: dict[str, Any], ctx: PageContext | None) -> dict[str, Any]:
    """A printed output over STDOUT_MAX_LINES lines: its head on the page, the whole in a log
    file linked from it (no context: the whole folded under a <details>)."""
    lines = str(out["text"]).rstrip("\n").split("\n")
    if len(lines) <= STDOUT_MAX_LINES:
        return out
    head = html.escape("\n".join(lines[:STDOUT_HEAD]))
    if ctx is None:
        body = (f'<details class="long-output"><summary>printed output: {len(lines)} lines'
                f"</summary><pre>{html.escape(chr(10).join(lines))}</pre></details>")
    else:
        ctx.logs += 1
        name = f"{ctx.page}-output-{ctx.logs}.txt"
        (ctx.src / "_static" / "logs").mkdir(parents=True, exist_ok=True)
        (ctx.src / "_static" / "logs" / name).write_text("\n".join(lines) + "\n")
        body = (f'<pre class="stdout-head">{head}</pre><p class="log-link">... '
                f"{len(lines) - STDOUT_HEAD} more lines: "
                f'<a href="_static/logs/{name}">full output ({len(lines)} lines, {name})</a></p>')
    return nbformat.v4.new_output("display_data", data={"text/html": body})


def _caption(ctx: PageContext, png: bytes) -> tuple[str, str]:
    """(caption, data link) for the next displayed figure: the saved figure of the same shape
    (plots.save writes <name>.json with the title and <name>.csv with the data)."""
    import json

    shape = _png_ratio(png)
    for i, path in enumerate(ctx.saved):
        ratio = _png_ratio(path.read_bytes())
        if shape and ratio and abs(ratio / shape - 1) < 0.06:
            del ctx.saved[i]
            meta = path.with_suffix(".json")
            info = json.loads(meta.read_text()) if meta.exists() else {}
            title = info.get("caption") or path.stem.replace("_", " ").replace("-", " ")
            kind = info.get("kind", "")
            csv = path.with_suffix(".csv")
            link = ""
            if csv.exists():
                (ctx.src / "_static" / "data").mkdir(parents=True, exist_ok=True)
                local = f"{ctx.page}-{csv.name}"
                shutil.copy2(csv, ctx.src / "_static" / "data" / local)
                link = f'_static/data/{local}'
            return _label(title, kind, ctx), link
    return _label("", "", ctx), ""


def _label(title: str, kind: str, ctx: PageContext) -> str:
    """The caption with what the figure shows: emulated / replayed / projected / one host."""
    text = f"{title} " if title else ""
    words = [w for w in ("emulated", "replayed", "projected", "reference run", "one host")
             if w in (title + " " + kind + " " + ctx.page).lower()]
    if not words:
        kind = page_kind(ctx.chapter, ctx.page)
        words = [kind] if kind else []
    return text + (f"[{', '.join(dict.fromkeys(words))}]" if words else "")


def page_kind(chapter: str, page: str) -> str:
    """What a chapter page shows (the registry's `kind`); a chapter with both sections ('one
    host + emulated') says which one this page is."""
    kind = CHAPTERS[chapter].kind if chapter in CHAPTERS else ""
    parts = [k.strip() for k in kind.split("+")]
    if len(parts) > 1:
        return next((k for k in parts if k in page), parts[0]) if "emulated" in page \
            else parts[0]
    return kind


def _png_ratio(data: bytes) -> float | None:
    """Width / height from a PNG's header."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) < 24:
        return None
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return w / h if h else None


def _figure(out: dict[str, Any], ctx: PageContext) -> dict[str, Any]:
    """An image output as a numbered, captioned, clickable figure whose alt text is the
    caption, with a link to the data it draws."""
    import base64

    raw = out["data"]["image/png"]
    png = base64.b64decode("".join(raw) if isinstance(raw, list) else raw)
    ctx.figures += 1
    caption, data = _caption(ctx, png)
    number = f"Figure {ctx.number}.{ctx.figures}"
    full = f"{number}: {caption}" if caption else number
    # beside Sphinx's own images: `_extra/_images/` is copied to the output's `_images/`
    (ctx.src / "_extra" / "_images").mkdir(parents=True, exist_ok=True)
    name = f"{ctx.page}-fig{ctx.figures}.png"
    (ctx.src / "_extra" / "_images" / name).write_bytes(png)
    link = f' <a href="{data}">data (csv)</a>' if data else ""
    body = (f'<figure class="nbfig" id="fig-{ctx.number}-{ctx.figures}">'
            f'<a href="_images/{name}"><img src="_images/{name}" '
            f'alt="{html.escape(full)}"></a><figcaption><b>{number}</b>: '
            f"{html.escape(caption)}{link}</figcaption></figure>")
    return nbformat.v4.new_output("display_data", data={"text/html": body})


def _present(out: dict[str, Any], ctx: PageContext | None) -> dict[str, Any]:
    """An output as a reader sees it: tables formatted, long stdout moved, figures numbered."""
    if out.get("output_type") == "stream":
        return _long_stdout(out, ctx)
    data = out.get("data", {})
    if ctx is not None and "image/png" in data:
        return _figure(out, ctx)
    if isinstance(data.get("text/html"), str):
        data["text/html"] = format_table_html(data["text/html"])
    return out


def _coalesce(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent stdout outputs of one cell as one (a loop's prints are one box, not many)."""
    out: list[dict[str, Any]] = []
    for o in outputs:
        if (o.get("output_type") == "stream" and out and out[-1].get("output_type") == "stream"
                and out[-1].get("name") == o.get("name")):
            prev = str(out[-1]["text"])
            out[-1]["text"] = prev + ("" if prev.endswith("\n") else "\n") + str(o["text"])
        else:
            out.append(o)
    return out


def _tags(cell: Any) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def clean_notebook(nb: Any, run_dir: Path, summary: str, title_suffix: str = "",
                   ctx: PageContext | None = None) -> Any:
    """The copy the book renders: code folded, noise gone, paths relative, summary on top;
    tables through one formatter, long printed output moved to a log file, figures numbered and
    captioned (with `ctx`, the page's place in the book)."""
    nb.metadata.pop("widgets", None)
    # JupyterLab-only cells (sliders): on a static page they would move nothing
    nb.cells = [c for c in nb.cells if "interactive" not in _tags(c)]
    for cell in nb.cells:
        cell.source = scrub_paths(cell.source, run_dir)
        if cell.cell_type != "code":
            continue
        tags = _tags(cell)
        extra = "remove-cell" if "parameters" in tags else "hide-input"
        cell.metadata["tags"] = [*tags, extra]
        kept = [_clean_output(o, run_dir) for o in cell.get("outputs", []) if _keep_output(o)]
        kept = _coalesce([o for o in kept
                          if o.get("output_type") != "stream" or o["text"].strip()])
        cell.outputs = [_present(o, ctx) for o in kept]
    # papermill's "An Exception was encountered at In [n]" banner goes under the summary
    banner = [c for c in nb.cells if "papermill-error-cell-tag" in _tags(c)
              and "An Exception was encountered" in c.source]
    nb.cells = [c for c in nb.cells if not any(c is b for b in banner)]
    first_md = next((i for i, c in enumerate(nb.cells)
                     if c.cell_type == "markdown" and c.source.startswith("# ")), -1)
    if first_md >= 0:
        title, _, rest = nb.cells[first_md].source.partition("\n")
        nb.cells[first_md].source = title + (f" ({title_suffix})" if title_suffix else "")
        if rest.strip():
            nb.cells.insert(first_md + 1, nbformat.v4.new_markdown_cell(rest.strip()))
    box = f"```{{admonition}} What this run found\n:class: tip\n\n{summary}\n```\n"
    nb.cells[first_md + 1:first_md + 1] = [nbformat.v4.new_markdown_cell(box), *banner]
    return nb


def claims_page(nb: Any, claims: pd.DataFrame) -> Any:
    """Chapter 99's raw claims table replaced by the reviewer's view (claims_view): the rules
    once, claims.csv linked, per paper a compact table with the quote and reasoning folded."""
    intro = nbformat.v4.new_markdown_cell(
        "## The claims, paper by paper\n\n" + claims_view.rules() + "\n\nThe whole table as "
        f'data: <a href="{CLAIMS_CSV}">claims.csv</a> (one row per claim and testbed).')
    view = nbformat.v4.new_output("display_data",
                                  data={"text/html": claims_view.claims_html(claims)})

    def raw_table(cell: Any) -> bool:
        return any("claim_id" in str(o.get("data", {}).get("text/html", ""))
                   and "verdict" in str(o.get("data", {}).get("text/html", ""))
                   for o in cell.get("outputs", []))
    at = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code" and raw_table(c)),
              None)
    if at is None:
        cell = nbformat.v4.new_code_cell("# the claims (ddlstudy.report.claims_view)")
        cell.metadata["tags"] = ["hide-input"]
        nb.cells.append(cell)
        at = len(nb.cells) - 1
    nb.cells[at].outputs = [view]
    nb.cells.insert(at, intro)
    return nb


# ------------------------------------------------------------------------------ landing page
def _claims_table(df: pd.DataFrame) -> pd.DataFrame:
    """Verdict first, the estimate as one 'value [95 % interval]' cell at 3 significant digits;
    an older table (no value/interval columns) is shown as it is."""
    if not {"paper", "claim", "value", "verdict"} <= set(df.columns):
        return df

    def num(v: str) -> str:
        try:
            return f"{float(v):.3g}"
        except ValueError:
            return v

    est = df["value"].map(num)
    if {"ci_low", "ci_high"} <= set(df.columns):
        est = est + [f" [{num(lo)}, {num(hi)}]" if lo and hi else ""
                     for lo, hi in zip(df["ci_low"], df["ci_high"], strict=True)]
    out = pd.DataFrame({"paper": df["paper"], "verdict": df["verdict"]})
    for col in ("quantity",):
        if col in df.columns:
            out[col] = df[col]
    out["value [95 % interval]"] = est
    for col in ("repeats", "chapter", "claim", "reason"):
        if col in df.columns:
            out[col] = df[col]
    return out


CLAIMS_CSV = "_static/data/claims.csv"


def read_claims(run_dir: Path) -> pd.DataFrame | None:
    """Chapter 99's claims.csv of the run, or None when chapter 99 wrote none."""
    path = run_dir / "99_conclusions" / "claims.csv"
    return pd.read_csv(path) if path.exists() else None


def _claims(run_dir: Path, src: Path) -> str:
    """The landing page's claims summary: one paragraph of counts, the verdicts-by-paper figure,
    per paper one compact row of counts (full table: chapter 99), claims.csv linked."""
    df = read_claims(run_dir)
    if df is None:
        return "No claims table in this run: chapter `99_conclusions` did not write one.\n"
    if not {"paper", "claim_id", "verdict"} <= set(df.columns):  # an older table, as it is
        _claims_table(df.astype(str)).to_csv(src / "claims.csv", index=False)
        return ("```{csv-table}\n:file: claims.csv\n:header-rows: 1\n:name: claims\n"
                ":class: claims\n```\n")
    fig = claims_view.verdict_figure(df, src / "_static" / "figures" / "verdicts_by_paper.png")
    rows = "".join(
        f'<tr><td><a href="99_conclusions.html#paper-{claims_view._slug(p)}">{html.escape(p)}'
        f'</a></td><td class="paper-counts" data-paper="{html.escape(p)}">'
        f"({claims_view._count_words(df[df['paper'] == p])})</td></tr>"
        for p in dict.fromkeys(df["paper"].astype(str)))
    alt = "Verdicts by paper: claim rows per verdict, stacked, from claims.csv"
    return (f"{claims_view.summary_text(df)}\n\n"
            f'<div class="claims-summary"><a href="_static/figures/{fig.name}">'
            f'<img src="_static/figures/{fig.name}" alt="{alt}"></a>'
            f'<table class="claims claims-counts"><thead><tr><th>paper</th><th>verdicts (claim '
            f"rows)</th></tr></thead><tbody>{rows}</tbody></table></div>\n\n"
            f"Every claim with the paper's number, ours with its interval and runs, the testbed, "
            f"the source and the reasoning: {{doc}}`99_conclusions`; the table as data: "
            f'<a href="{CLAIMS_CSV}">claims.csv</a>.\n')


def _figure_for(run_dir: Path, pages: list[Page], chapter: str,
                patterns: tuple[str, ...]) -> tuple[Page, Path] | None:
    """The first figure a chapter's pages drew that matches the patterns, with its page."""
    for pattern in patterns:
        for page in pages:
            if page.chapter == chapter:
                found = sorted((run_dir / page.name).glob(pattern))
                if found:
                    return page, found[0]
    return None


LEAD_MODELS = ("resnet50", "vgg16", "resnet152", "alexnet", "vgg19")


def _lead(run_dir: Path, pages: list[Page], src: Path) -> str:
    """The emulated PS-vs-ring figure, full width and clickable: this run's chapter 03 emulated
    section, else drawn from the committed reference run's records (labelled so)."""
    from ddlstudy.analysis import plots

    emulated = sorted((p for p in pages if p.name.startswith("03_ps_vs_ring-emulated-")
                       and (run_dir / p.name / "summary.csv").exists()),
                      key=lambda p: next((i for i, m in enumerate(LEAD_MODELS)
                                          if p.name.endswith(m)), 99))
    frames, where = [], ""
    for page in emulated:
        frames.append(pd.read_csv(run_dir / page.name / "summary.csv"))
    if frames:
        where = f"this run, {{doc}}`{emulated[0].name}`"
        label = "emulated links, compute replayed; this run"
    else:
        from ddlstudy.records import reference

        cells = []
        for folder in sorted(reference.reference_dir().glob("03_ps_vs_ring-emulated-*")):
            if (folder / "summary.csv").exists():
                frames.append(pd.read_csv(folder / "summary.csv"))
                cells.append(reference.load(folder.name))
        if not frames:
            return ""
        found = [c for c in cells if len(c)]
        pooled = pd.concat(found, ignore_index=True) if found else pd.DataFrame()
        pooled.attrs["uncommitted_left_out"] = sum(  # concat keeps no attrs that differ
            int(c.attrs.get("uncommitted_left_out", 0)) for c in cells)
        where = (f"the committed reference records (`results/reference`; "
                 f"{reference.label(pooled)}): this run did not run chapter 03's emulated "
                 "section")
        label = "emulated links, compute replayed; committed reference run"
    data = pd.concat(frames, ignore_index=True)
    fig = plots.ps_vs_ring(data, "Parameter Server vs ring all-reduce: cluster-equivalent "
                                 "images/sec vs workers (emulated)")
    path = src / "_static" / "figures" / "lead_ps_vs_ring.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    cols = [c for c in ("model", "strategy", "workers", "network", "repeat", "images_per_sec",
                        "images_per_sec_cluster", "time_dilation") if c in data]
    data[cols].to_csv(src / "_static" / "data" / "lead_ps_vs_ring.csv", index=False)
    import matplotlib.pyplot as plt

    plt.close(fig)
    caption = (f"Figure 1: Parameter Server (PS) vs ring all-reduce, images/sec of the emulated "
               f"cluster vs workers from 2 workers (a 1-worker ring sends nothing), one panel "
               f"per model, median of runs and its 95 % interval - {label}")
    return (f'<figure class="lead"><a href="_static/figures/{path.name}">'
            f'<img src="_static/figures/{path.name}" alt="{html.escape(caption)}"></a>'
            f"<figcaption><b>Figure 1</b>: {html.escape(caption.split(': ', 1)[1])}. "
            f'<a href="_static/data/lead_ps_vs_ring.csv">data (csv)</a></figcaption></figure>'
            f"\n\nFrom {where}.\n")


def _headlines(run_dir: Path, pages: list[Page], src: Path) -> str:
    """The chapters' headline figures this run drew, as a row of clickable thumbnails, each
    captioned with a link to its chapter (the lead figure is drawn above)."""
    cells, seen = [], set()
    for caption, chapter, patterns in HEADLINES:
        hit = _figure_for(run_dir, pages, chapter, patterns)
        topic = caption.split(" per ")[0].split(":")[0]
        if hit is None or topic in seen or len(cells) == 4:
            continue
        page, fig = hit
        seen.add(topic)
        name = f"{page.name}-{fig.name}"
        (src / "_static" / "figures").mkdir(parents=True, exist_ok=True)
        shutil.copy2(fig, src / "_static" / "figures" / name)
        kind = page_kind(chapter, page.name)
        text = f"{caption} [{kind}]" if kind else caption
        cells.append(f'<td><a href="_static/figures/{name}"><img src="_static/figures/{name}" '
                     f'alt="{html.escape(text)}"></a><br>{html.escape(text)}: '
                     f'<a href="{page.name}.html">{html.escape(page.name)}</a></td>')
    if not cells:
        return "No chapter drew a headline figure in this run.\n"
    return f'<table class="headlines"><tr>{"".join(cells)}</tr></table>\n'


def _metadata(meta: dict[str, Any], params_yaml: str) -> str:
    """Run metadata: git sha, when, host, versions; the merged parameters folded."""
    host = meta.get("host", {})
    versions = ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items())
    return "\n".join([
        "## Run", "",
        f"git `{meta.get('git_sha', 'unknown')}`, {meta.get('created', '')}; host "
        f"{host.get('hostname', '')}, {host.get('cpu_count', '')} cores, "
        f"{host.get('memory_gb', '')} GB memory, GPUs: {host.get('cuda_devices', [])}; "
        f"{versions}.", "",
        '<details class="params"><summary>Parameters of this run (merged YAML)</summary>',
        f"<pre>{html.escape(params_yaml.rstrip())}</pre></details>", ""])


def landing_page(run_dir: Path, pages: list[Page], meta: dict[str, Any], run_id: str,
                 params_yaml: str, src: Path) -> str:
    """Findings first: the emulated PS-vs-ring figure, the claims summary, headline figures,
    chapters with status, then the run."""
    (src / "_static" / "data").mkdir(parents=True, exist_ok=True)
    chapters = "\n".join(
        f"- {{doc}}`{p.name}` ({scrub_paths(p.status, run_dir)})"
        if (src / f"{p.name}.ipynb").exists()
        else f"- {p.name} ({scrub_paths(p.status, run_dir)})" for p in pages)
    toc = "\n".join(p.name for p in pages if (src / f"{p.name}.ipynb").exists())
    docs = "\n".join(f"docs/{d.stem}" for d in _docs(src))
    return "\n".join([
        f"# Parameter Server vs all-reduce: run `{run_id}`", "",
        _lead(run_dir, pages, src), "",
        "## The papers' claims against this run", "", _claims(run_dir, src), "",
        "## Headline figures", "", _headlines(run_dir, pages, src), "",
        "## Chapters", "", chapters, "", _metadata(meta, scrub_paths(params_yaml, run_dir)),
        "```{toctree}\n:hidden:\n:caption: Chapters\n:maxdepth: 1\n\n" + toc + "\n```", "",
        ("```{toctree}\n:hidden:\n:caption: Reference\n:maxdepth: 1\n\n" + docs + "\n```\n")
        if docs else ""])


def _docs(src: Path) -> list[Path]:
    """The repository's docs pages a reader of the book needs (metrics, papers), copied in."""
    out = []
    for name in ("metrics.md", "papers.md"):
        if (REPO / "docs" / name).exists():
            (src / "docs").mkdir(exist_ok=True)
            out.append(Path(shutil.copy2(REPO / "docs" / name, src / "docs" / name)))
    return out


# ------------------------------------------------------------------------------------ Sphinx
CONF = """\
# Written by ddlstudy.report.book for one build; see that module.
project = {project!r}
extensions = ["myst_nb", "ddlstudy.report.book"]
nb_execution_mode = "off"          # the notebooks ran under papermill: render, never re-run
nb_output_stderr = "remove"
myst_enable_extensions = ["dollarmath", "amsmath"]
html_math_renderer = "ddlstudy_tex"  # TeX as text: no MathJax from a CDN
html_theme = "sphinx_book_theme"
html_title = {project!r}
html_context = {{"default_mode": "light"}}  # else the theme logs a console error on first open
html_theme_options = {{"show_toc_level": 2, "use_download_button": False,
                      "use_fullscreen_button": False, "home_page_in_toc": True,
                      "secondary_sidebar_items": []}}
html_static_path = ["_static"]
html_extra_path = ["_extra"]        # the chapters' figures, numbered (book._figure)
html_css_files = ["book.css"]
html_copy_source = False
html_show_sourcelink = False
exclude_patterns = ["_build", ".doctrees", "**.ipynb_checkpoints"]
suppress_warnings = ["myst.header", "misc.highlighting_failure", "myst.xref_missing"]
"""


# Lead figure full width; thumbnails in one row; claims tables compact with verdict badges.
CSS = """\
.bd-main .bd-content .bd-article-container { max-width: 72em; }
figure.lead img { width: 100%; max-height: 75vh; object-fit: contain; }
figure.lead figcaption, figure.nbfig figcaption { font-size: 0.85em; }
figure.nbfig img { max-width: 100%; }
table.headlines td { width: 25%; vertical-align: top; font-size: 0.8em; }
table.headlines img { width: 100%; max-height: 180px; object-fit: contain; }
div.claims-summary { display: flex; gap: 1em; align-items: flex-start; flex-wrap: wrap; }
div.claims-summary img { width: 55%; min-width: 320px; }
table.claims { font-size: 0.8em; }
table.claims-view { font-size: 0.8em; width: 100%; border-collapse: collapse; }
table.claims-view th, table.claims-view td { padding: 2px 6px; vertical-align: top; }
table.claims-view tr.claim-row { border-top: 1px solid #ccc; }
table.claims-view tr.claim-details td { padding-top: 0; font-size: 0.95em; }
table.claims-view details summary { color: #666; cursor: pointer; }
span.claim-label { color: #666; font-size: 0.9em; }
span.verdict { padding: 1px 6px; border-radius: 8px; white-space: nowrap; color: #000; }
span.verdict-agrees { background: #9be3c8; }
span.verdict-differs { background: #f4b183; }
span.verdict-inconclusive { background: #fbe19b; }
span.verdict-not-measured { background: #e0e0e0; }
span.verdict-set-by-configuration { background: #bfe3f7; }
pre.stdout-head { font-size: 0.8em; }
details.params pre { max-height: 30em; overflow: auto; font-size: 0.8em; }
@media print {
  @page { size: A4; margin: 12mm; }
  details.hide.above-input { display: none; }   /* folded code: not on paper */
  div.cell_output, div.output, div.pasted-text { overflow: visible !important; }
  div.cell_output table, table.claims-view { font-size: 0.62em; }
  .bd-sidebar-primary, .bd-sidebar-secondary, .bd-header, .bd-footer, .prev-next-area,
  .header-article, .bd-header-article { display: none !important; }
  .bd-main .bd-content .bd-article-container { max-width: 100% !important; }
}
"""


def _math(self: Any, node: Any) -> None:
    """Math as its TeX source in a <code>: readable with no network and no MathJax."""
    from docutils import nodes

    tex = node.astext()
    block = isinstance(node, nodes.math_block)
    self.body.append(f'<{"pre" if block else "code"} class="math tex">'
                     f'{self.encode(tex)}</{"pre" if block else "code"}>')
    raise nodes.SkipNode


def setup(app: Any) -> dict[str, Any]:
    """Sphinx extension entry: the offline TeX math renderer."""
    app.add_html_math_renderer("ddlstudy_tex", (_math, None), (_math, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def sphinx_build(src: Path, out: Path) -> None:
    """Run Sphinx in a child process (its warnings stay out of the terminal unless it fails)."""
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-d", str(src / ".doctrees"),
           str(src), str(out)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise BookError(lines[-1] if lines else f"sphinx exited {proc.returncode}")
    (out / ".buildinfo").unlink(missing_ok=True)
    shutil.rmtree(out.parent / "jupyter_execute", ignore_errors=True)  # myst-nb's scratch copy


def build_book(run_dir: Path, pages: list[Page], meta: dict[str, Any], run_id: str,
               params_yaml: str) -> tuple[Path, float]:
    """Cleaned copies + landing page -> `<run_dir>/report/index.html`; returns it and seconds."""
    start = time.perf_counter()
    src = run_dir / SOURCE
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    (src / "_static" / "data").mkdir(parents=True)
    claims = read_claims(run_dir)
    if claims is not None:
        shutil.copy2(run_dir / "99_conclusions" / "claims.csv", src / CLAIMS_CSV)
    for page in pages:
        executed = run_dir / f"{page.name}.ipynb"
        if not executed.exists():
            continue
        nb = nbformat.read(executed, as_version=4)
        suffix = page.name[len(page.chapter) + 1:] if page.name != page.chapter else ""
        has_claims = (page.chapter == "99_conclusions" and claims is not None
                      and "claim_id" in claims)
        text = (claims_view.summary_text(claims) if has_claims
                else summarize(page.chapter, run_dir / page.name))
        ctx = PageContext(src, page.name, page.chapter, run_dir / page.name)
        nb = clean_notebook(nb, run_dir, text, suffix, ctx)
        if has_claims:
            nb = claims_page(nb, claims)
        nbformat.write(nb, src / f"{page.name}.ipynb")
    (src / "index.md").write_text(landing_page(run_dir, pages, meta, run_id, params_yaml, src))
    (src / "conf.py").write_text(CONF.format(project=f"ddlstudy: {run_id}"))
    (src / "_static" / "book.css").write_text(CSS)
    (src / "_extra").mkdir(exist_ok=True)
    out = run_dir / "report"
    sphinx_build(src, out)
    return out / "index.html", time.perf_counter() - start
