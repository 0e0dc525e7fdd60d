"""The claims as a reviewer reads them: per paper a compact table (claim, the paper's number,
ours with its interval and runs, testbed, source, verdict badge) with the quote and the reasoning
folded under each row, the rules explained once, and one figure of verdicts by paper.

Everything here reads `claims.csv` (ddlstudy.claims.engine) and nothing else, so the landing page
and chapter 99 state the same verdicts as the file they link to. Each badge carries the row it
shows (`data-row`, the row's index in claims.csv, and `data-verdict`): tests/test_book.py checks
every rendered page's badges and stated counts against the file.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.chapters.summaries import VERDICTS, claims_summary, verdict_word
from ddlstudy.chapters.summaries import verdict_counts as _count_words

# the verdict families and the per-paper counts are defined once, in the chapter summaries
# (chapter 99's summary states them too, where the book has no claims view); shown from here
DASH = "\u2014"


def num(value: Any, digits: int = 3) -> str:
    """A number at `digits` significant digits; DASH for missing, NaN or infinite."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return DASH
    if not math.isfinite(v):
        return DASH
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
        return f"{v:.{digits - 1}e}"
    return f"{v:.{digits}g}"


def text(value: Any) -> str:
    """A cell as text: '' for missing (pandas reads an empty csv cell as NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def _claim_defs() -> dict[str, Any]:
    """claim_id -> Claim (kind, direction) from the claims registry; empty if unavailable."""
    try:
        from ddlstudy.claims.registry import CLAIMS
    except Exception:  # noqa: BLE001 - an old table renders without kinds
        return {}
    return dict(CLAIMS)


def papers_number(row: pd.Series, claim: Any = None) -> str:
    """What the paper states, as the compared number: '> 1', '< 1', '0.89 (0.8-1)',
    '≈ 1 (0.9-1.1)'."""
    kind = getattr(claim, "kind", "")
    ref, lo, hi = row.get("no_effect"), row.get("margin_low"), row.get("margin_high")
    if kind == "direction":
        sign = "<" if getattr(claim, "direction", "greater") == "less" else ">"
        return f"{sign} {num(ref)}"
    band = f" ({num(lo)}\u2013{num(hi)})" if num(lo) != DASH and num(hi) != DASH else ""
    if kind == "equivalence":
        return f"\u2248 {num(ref)}{band}"
    if kind == "magnitude" and band:  # the paper's stated number, as the accepted range
        return band.strip(" ()")
    return f"{num(ref)}{band}" if num(ref) != DASH else DASH


def measure_command(reason: str) -> str:
    """For a 'not measured' row: the command that would measure it, or why none does."""
    from ddlstudy.chapters.registry import CHAPTERS

    found = re.search(r"chapter (\d\d_[a-z_]+)|(\d\d_[a-z_]+) has no usable records", reason)
    if found:
        name = (found.group(1) or found.group(2)).split("-")[0]
        quick = name in CHAPTERS and CHAPTERS[name].quick
        if name.startswith("03_") and "emulated" in reason or name.startswith("05_"):
            return (f"`make report` as root (chapter {name}, emulated links need network "
                    "namespaces)")
        return (f"`make report` (chapter {name})" if quick
                else f"`make report-full` (chapter {name} runs in params/full.yaml)")
    if "GPU" in reason:
        return ("a GPU testbed: `ddlstudy report --params params/default.yaml --params "
                "params/gpu-cluster.yaml`")
    return "no chapter of this study measures it (see the reasoning)"


_LABEL = re.compile(r"reference run: (.+?), (\d{4}-\d\d-\d\d(?: to \d{4}-\d\d-\d\d)?), "
                    r"git ([^(]+?) \(([^)]+)\)(.*)", re.S)


def _source(label: str) -> str:
    """A reference run's label (`ddlstudy.records.reference.label`) shortened: host(s), dates,
    how many git shas, what it counted (runs of cells, or a table's rows) and the rest (runs of
    uncommitted code left out, what was measured); text before the label is kept as it is."""
    found = _LABEL.search(label)
    if not found:
        return label or DASH
    host, date, shas, counted, rest = found.groups()
    shas_l = [s.strip() for s in shas.split(",")]
    sha = shas_l[0] if len(shas_l) == 1 else f"{len(shas_l)} git shas"
    return f"{label[:found.start()]}reference run ({host}, {date}, {sha}, {counted}){rest}"


def ours(row: pd.Series) -> str:
    """This study's number: 'value [low, high], n runs', or DASH and why there is none."""
    word = verdict_word(row.get("verdict"))
    runs = int(float(row.get("runs") or 0)) if text(row.get("runs")) not in ("", "nan") else 0
    if word == "not measured":
        return f"{DASH} (not measured)"
    if word == "set by configuration":
        return f"{DASH} (set by configuration, not measured)"
    value, lo, hi = num(row.get("value")), num(row.get("ci_low")), num(row.get("ci_high"))
    if value == DASH:
        return f"{DASH} (no usable runs)"
    plural = "s" * (runs != 1)
    if lo != DASH and hi != DASH:
        return f"{value} [{lo}, {hi}], {runs} run{plural}"
    return f"{value}, {runs} run{plural} (no interval: a verdict needs {_min_runs()})"


def _min_runs() -> int:
    from ddlstudy.analysis import inference

    return int(inference.MIN_RUNS)


def badge(index: int, verdict: Any) -> str:
    word = verdict_word(verdict)
    cls = word.replace(" ", "-")
    return (f'<span class="verdict verdict-{cls}" data-row="{index}" '
            f'data-verdict="{html.escape(word)}">{html.escape(word)}</span>')


def rules(min_runs: int | None = None) -> str:
    """How to read the verdicts: the interval method and what 'inconclusive' means, once."""
    from ddlstudy.analysis import inference

    n = min_runs or inference.MIN_RUNS
    return (
        "**How to read this table.** *Ours* is the compared quantity's estimate from this run's "
        "records with its 95 % interval (90 % for an equivalence or magnitude test, two "
        "one-sided tests), computed on the log scale over **independent runs** (repeats or "
        "seeds: the `runs` column; method column of `claims.csv`, e.g. `t-log` = Student t on "
        f"log values). A verdict needs at least {n} runs. **agrees**: the interval lies wholly "
        "on the paper's side of its number (direction) or inside the paper's margins "
        "(equivalence, magnitude); **differs**: wholly on the other side or outside; "
        "**inconclusive**: the interval overlaps the paper's number or a margin, or there were "
        f"fewer than {n} runs (then no interval is shown) - it is no evidence either way. "
        "**set by configuration**: the emulator or the code fixes the value, so it is not "
        "measured; **not measured**: no chapter of this run recorded it (the row says which "
        "command would). *Paper*: the number the paper states, with the accepted margins.")


COLUMN_WORDS = {"reproduction": "reproduction (the paper's testbed)",
                "update": "update (today's hardware)"}


def _testbed_cell(row: pd.Series) -> str:
    """The testbed, labelled with its column (reproduction / update) and, where the two
    columns disagree, the ratio that flipped the verdict."""
    cell = html.escape(text(row.get("testbed")) or DASH)
    column = COLUMN_WORDS.get(text(row.get("column")), "")
    if column:
        cell = f"<b>{html.escape(column)}</b>: {cell}"
    if flipped := text(row.get("flipped_by")):
        cell += f"<br><small>verdicts differ between the columns: {html.escape(flipped)}</small>"
    return cell


def claims_html(df: pd.DataFrame, papers: list[str] | None = None) -> str:
    """Per paper a compact table, the quote, conditions and reasoning folded under each row."""
    defs = _claim_defs()
    df = df.reset_index(drop=True)
    papers = papers or list(dict.fromkeys(df["paper"].astype(str)))
    parts = []
    head = ("<tr><th>claim</th><th>paper</th><th>ours [interval], runs</th><th>testbed</th>"
            "<th>source</th><th>verdict</th></tr>")
    for paper in papers:
        part = df[df["paper"].astype(str) == paper]
        if part.empty:
            continue
        rows = []
        for i, row in part.iterrows():
            claim = defs.get(text(row.get("claim_id")))
            word = verdict_word(row.get("verdict"))
            label = re.search(r"\[([^\]]+)\]\s*$", text(row.get("quantity")))
            what = html.escape(text(row.get("claim")))
            if label:
                what += f'<br><span class="claim-label">{html.escape(label.group(1))}</span>'
            reason = text(row.get("reason"))
            details = [f"<b>Quote</b> ({html.escape(text(row.get('location')))}): "
                       f"\u201c{html.escape(text(row.get('quote')))}\u201d",
                       f"<b>Paper's conditions</b>: "
                       f"{html.escape(text(row.get('conditions')) or DASH)}",
                       f"<b>Quantity</b>: {html.escape(text(row.get('quantity')))}"]
            if claim is not None and getattr(claim, "reasoning", ""):
                details.append(f"<b>Margins</b>: {html.escape(claim.reasoning)}")
            details.append(f"<b>Reasoning</b>: {html.escape(reason or DASH)}")
            if word == "not measured":
                details.append(f"<b>Measured by</b>: {_md_code(measure_command(reason))}")
            source = html.escape(_source(text(row.get("source"))))
            if word == "not measured":
                source = f"measured by: {_md_code(measure_command(reason))}"
            rows.append(
                f'<tr class="claim-row" id="claim-{i}"><td>{what}</td>'
                f"<td>{html.escape(papers_number(row, claim))}</td>"
                f"<td>{html.escape(ours(row))}</td>"
                f"<td>{_testbed_cell(row)}</td>"
                f"<td>{source}</td>"
                f"<td>{badge(int(i), row.get('verdict'))}</td></tr>"
                f'<tr class="claim-details"><td colspan="6"><details><summary>quote and '
                f"reasoning</summary><p>{'</p><p>'.join(details)}</p></details></td></tr>")
        counts = _count_words(part)
        parts.append(f'<h3 id="paper-{_slug(paper)}">{html.escape(paper)} '
                     f'<small class="paper-counts" data-paper="{html.escape(paper)}">'
                     f"({counts})</small></h3>"
                     f'<table class="claims-view"><thead>{head}</thead><tbody>'
                     + "".join(rows) + "</tbody></table>")
    return "\n".join(parts)


def _md_code(text: str) -> str:
    return re.sub(r"`([^`]+)`", lambda m: f"<code>{html.escape(m.group(1))}</code>",
                  html.escape(text, quote=False).replace("&#x27;", "'"))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def summary_text(df: pd.DataFrame) -> str:
    """One paragraph: rows per verdict over all papers, then per paper (from claims.csv)."""
    return claims_summary(df)


def verdict_figure(df: pd.DataFrame, path: Path) -> Path:
    """Verdicts by paper as horizontal stacked bars (rows of claims.csv), verdict colours from
    analysis.style; saved as a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ddlstudy.analysis import style

    words = df["verdict"].map(verdict_word)
    table = (pd.crosstab(df["paper"].astype(str), words)
             .reindex(columns=[v for v in VERDICTS if v in set(words)], fill_value=0))
    table = table.reindex(list(dict.fromkeys(df["paper"].astype(str))))[::-1]
    fig, ax = plt.subplots(figsize=(7.5, 0.42 * len(table) + 1.1))
    left = pd.Series(0, index=table.index)
    for verdict in table.columns:
        ax.barh(table.index, table[verdict], left=left, color=style.colour(verdict),
                label=verdict, edgecolor="white")
        for y, (x0, w) in enumerate(zip(left, table[verdict], strict=True)):
            if w:
                ax.text(x0 + w / 2, y, str(int(w)), ha="center", va="center", fontsize=8)
        left = left + table[verdict]
    ax.set_xlabel("claim rows (one per testbed or measurement)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(ncol=len(table.columns), fontsize=8, loc="lower center",
              bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.grid(axis="y", visible=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def stated_verdicts(page_html: str) -> list[tuple[int, str]]:
    """(claims.csv row, verdict) for every badge on a rendered page."""
    return [(int(r), v) for r, v in re.findall(
        r'data-row="(\d+)"\s+data-verdict="([^"]+)"', page_html)]


def stated_counts(page_html: str) -> list[tuple[str, str]]:
    """(paper, '2 agrees, 3 differs') for every per-paper count stated on a rendered page."""
    return [(html.unescape(p), html.unescape(c)) for p, c in re.findall(
        r'data-paper="([^"]+)">\(([^)]*)\)', page_html)]


def _strip_tags(page_html: str) -> str:
    body = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", page_html, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def check_page(page_html: str, claims: pd.DataFrame) -> list[str]:
    """Where a rendered page states a verdict that differs from claims.csv: a badge (by row),
    a per-paper count (tagged, or written 'Paper: 2 agrees, 3 differs'); [] when none does."""
    claims = claims.reset_index(drop=True)
    words = claims["verdict"].map(verdict_word)
    bad = []
    for row, verdict in stated_verdicts(page_html):
        if row >= len(claims):
            bad.append(f"badge for row {row}: claims.csv has {len(claims)} rows")
        elif words[row] != verdict:
            bad.append(f"row {row} ({claims.loc[row, 'claim_id']}): page says {verdict}, "
                       f"claims.csv {words[row]}")
    expected = {p: _count_words(claims[claims["paper"].astype(str) == p])
                for p in dict.fromkeys(claims["paper"].astype(str))}
    stated = list(stated_counts(page_html))
    flat = " ".join(_strip_tags(page_html).split())
    verdict_re = "|".join(re.escape(v) for v in VERDICTS)
    for paper in expected:
        pattern = (rf"{re.escape(paper)}:\s*((?:\d+ (?:{verdict_re})(?:,\s*)?)+)")
        stated += [(paper, m.group(1).rstrip(", ")) for m in re.finditer(pattern, flat)]
        for m in re.finditer(rf"Agreeing:\s*([^.]*{re.escape(paper)}[^.]*)\.", flat):
            if set(words[claims["paper"] == paper]) != {"agrees"}:
                bad.append(f"'Agreeing: {m.group(1)}' but {paper}: {expected[paper]}")
    for paper, counts in stated:
        if paper in expected and counts != expected[paper]:
            bad.append(f"{paper}: page says ({counts}), claims.csv ({expected[paper]})")
    return bad
