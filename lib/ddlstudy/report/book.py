"""The report a reader opens: a run's executed notebooks rendered as a Sphinx book.

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

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd

from ddlstudy.chapters.registry import CHAPTERS
from ddlstudy.chapters.summaries import summarize

REPO = Path(__file__).resolve().parents[3]
SOURCE = ".book"  # staging folder inside the run folder: cleaned copies, landing page, conf.py

# (caption, chapter the figure belongs to, figure files to try in order) for the landing page:
# from the chapter registry (each chapter declares its headline figures).
HEADLINES: tuple[tuple[str, str, tuple[str, ...]], ...] = tuple(
    (caption, c.name, patterns) for c in CHAPTERS.values() for caption, patterns in c.headlines)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_TQDM = re.compile(r"\d+%\|.*\||\d+/\d+ \[\d|it/s\]|s/it\]")
_WARNING = re.compile(r"^\s*\S*(Warning|warn)\b.*:|^\s*warnings\.warn\(")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
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


def _tags(cell: Any) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def clean_notebook(nb: Any, run_dir: Path, summary: str, title_suffix: str = "") -> Any:
    """The copy the book renders: code folded, noise gone, paths relative, summary on top."""
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
        cell.outputs = [o for o in kept if o.get("output_type") != "stream" or o["text"].strip()]
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


def _claims(run_dir: Path, src: Path) -> str:
    """Chapter 99's claims table as a csv-table."""
    path = run_dir / "99_conclusions" / "claims.csv"
    if not path.exists():
        return "No claims table in this run: chapter `99_conclusions` did not write one.\n"
    df = _claims_table(pd.read_csv(path, dtype=str).fillna(""))
    df.to_csv(src / "claims.csv", index=False)
    return ("```{csv-table}\n:file: claims.csv\n:header-rows: 1\n:name: claims\n"
            ":class: claims\n```\n\nEach claim is measured, explained and given its interval "
            "in {doc}`99_conclusions`.\n")


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


def _headlines(run_dir: Path, pages: list[Page], src: Path) -> str:
    """The headline figures this run drew, copied beside the page, side by side in one row (the
    first screen holds them and the claims table), each captioned with a link to its chapter."""
    cells, seen = [], set()
    for caption, chapter, patterns in HEADLINES:
        hit = _figure_for(run_dir, pages, chapter, patterns)
        topic = caption.split(" per ")[0].split(":")[0]
        if hit is None or topic in seen or len(cells) == 4:
            continue
        page, fig = hit
        seen.add(topic)
        local = Path("figures") / f"{page.name}-{fig.name}"
        (src / "figures").mkdir(exist_ok=True)
        shutil.copy2(fig, src / local)
        cells.append(f"![{caption}]({local.as_posix()})\n\n    {caption}: {{doc}}`{page.name}`")
    if not cells:
        return "No chapter drew a headline figure in this run.\n"
    row = "* - " + "\n  - ".join(cells)
    return ("```{list-table}\n:class: headlines\n\n" + row + "\n```\n")


def _metadata(meta: dict[str, Any], params_yaml: str) -> str:
    """Run metadata: git sha, when, host, versions, the merged parameters."""
    host = meta.get("host", {})
    versions = ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items())
    return "\n".join([
        "## Run", "",
        f"- git sha: `{meta.get('git_sha', 'unknown')}`",
        f"- created: {meta.get('created', '')}",
        f"- host: {host.get('hostname', '')}, {host.get('cpu_count', '')} cores, "
        f"{host.get('memory_gb', '')} GB memory, GPUs: {host.get('cuda_devices', [])}",
        f"- versions: {versions}", "",
        "## Parameters", "", "```yaml", params_yaml.rstrip(), "```", ""])


def landing_page(run_dir: Path, pages: list[Page], meta: dict[str, Any], run_id: str,
                 params_yaml: str, src: Path) -> str:
    """Findings first: claims, headline figures, chapters with status, then the run."""
    chapters = "\n".join(
        f"- {{doc}}`{p.name}` ({scrub_paths(p.status, run_dir)})"
        if (src / f"{p.name}.ipynb").exists()
        else f"- {p.name} ({scrub_paths(p.status, run_dir)})" for p in pages)
    toc = "\n".join(p.name for p in pages if (src / f"{p.name}.ipynb").exists())
    docs = "\n".join(f"docs/{d.stem}" for d in _docs(src))
    return "\n".join([
        f"# Parameter Server vs all-reduce: run `{run_id}`", "",
        "## Findings", "", summarize("99_conclusions", run_dir / "99_conclusions"), "",
        _headlines(run_dir, pages, src), "", "### The papers' claims against this run", "",
        _claims(run_dir, src),
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
                      "use_fullscreen_button": False, "home_page_in_toc": True}}
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_copy_source = False
html_show_sourcelink = False
exclude_patterns = ["_build", ".doctrees", "**.ipynb_checkpoints"]
suppress_warnings = ["myst.header", "misc.highlighting_failure", "myst.xref_missing"]
"""


# The headline figures share one row; the claims table in a smaller font.
CSS = """\
table.headlines td { width: 25%; vertical-align: top; font-size: 0.85em; }
table.headlines img { width: 100%; }
table.claims { font-size: 0.8em; }
table.claims td { min-width: 5em; }
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
    for page in pages:
        executed = run_dir / f"{page.name}.ipynb"
        if not executed.exists():
            continue
        nb = nbformat.read(executed, as_version=4)
        suffix = page.name[len(page.chapter) + 1:] if page.name != page.chapter else ""
        text = summarize(page.chapter, run_dir / page.name)
        nbformat.write(clean_notebook(nb, run_dir, text, suffix), src / f"{page.name}.ipynb")
    (src / "index.md").write_text(landing_page(run_dir, pages, meta, run_id, params_yaml, src))
    (src / "conf.py").write_text(CONF.format(project=f"ddlstudy: {run_id}"))
    (src / "_static").mkdir()
    (src / "_static" / "book.css").write_text(CSS)
    out = run_dir / "report"
    sphinx_build(src, out)
    return out / "index.html", time.perf_counter() - start
