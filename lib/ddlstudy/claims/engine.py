"""Chapter 99's engine: evaluates every claim of the five papers (one file per paper in
`ddlstudy.claims`) on a run folder's records and writes claims.csv; compares two runs' verdicts;
calibrates the verdict rules on the run-to-run spread of the committed reference records.

Verdicts come from `ddlstudy.analysis.inference.verdict` on one value per independent run:
agrees/differs only with >= 5 runs and an interval that clears the claim's no-effect value
(direction) or lies wholly inside / outside its margins (equivalence, magnitude: TOST); fewer
runs give "inconclusive: N runs (needs 5)". A quantity fixed by the code or the emulator's
settings is "set by configuration" and draws no verdict; a claim no chapter measures is "not
measured: <what is missing>". Only the chapter folders the run's params name are read
(`chapter_folders`), never a glob.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.analysis import calibration, inference
from ddlstudy.claims.base import (
    EMULATED_03,
    NOT_MEASURED,
    REPRODUCTION,
    SET_BY_CONFIG,
    TESTBED_NONE,
    UPDATE,
    Claim,
    Folders,
    Measurement,
    Records,
)
from ddlstudy.claims.registry import all_claims

# The built-in claims (a snapshot for tables and tests); evaluation reads the registry itself,
# so a claim registered later is judged too.
CLAIMS: list[Claim] = all_claims()
PAPERS = ["Shi 2019", "Fourie 2019", "Malik 2018", "Pani", "Wang (NCHC)", "Rajbhandari 2020",
          "Vogels 2019", "Jiang 2020", "Zhao 2023"]
COLUMNS = ["paper", "claim_id", "claim", "quote", "location", "conditions", "quantity", "value",
           "ci_low", "ci_high", "no_effect", "margin_low", "margin_high", "runs", "method",
           "testbed", "source", "verdict", "reason", "chapter", "column", "ratio_what",
           "ratio", "flipped_by"]
AGREES, DIFFERS, INCONCLUSIVE = inference.AGREES, inference.DIFFERS, inference.INCONCLUSIVE
DECIDED = (AGREES, DIFFERS)


def chapter_folders(chapters: Sequence[str], models: Sequence[str],
                    emulated_models: Sequence[str] = ()) -> Folders:
    """chapter -> the folders this parameter set writes (chapter 03: one per model; its
    emulated section, one per `network.chapter03_models`, under EMULATED_03, plus the folders
    results/reference keeps a testbed's grid in, `03_ps_vs_ring-testbed-<testbed>-<model>` for
    every testbed of the catalog: read where present)."""
    folders = {ch: ([f"{ch}-{m}" for m in models] if ch == "03_ps_vs_ring" else [ch])
               for ch in chapters}
    if "03_ps_vs_ring" in chapters and emulated_models:
        from ddlstudy.testbeds import catalog

        folders[EMULATED_03] = [f"{EMULATED_03}-{m}" for m in emulated_models] + [
            f"03_ps_vs_ring-testbed-{tb}-{m}" for tb in catalog.names()
            for m in emulated_models]
    return folders


def folders_from_meta(run: Path) -> Folders:
    """The folders the run's recorded params name (meta.json at the run root); none if absent."""
    if not (run / "meta.json").exists():
        return {}
    from ddlstudy.records.store import read_meta

    params = read_meta(run).get("params", {})
    return chapter_folders(params.get("report", {}).get("chapters", []),
                           params.get("training", {}).get("models", []),
                           params.get("network", {}).get("chapter03_models", []))


def undeclared_reads(claims: Sequence[Claim] | None = None) -> list[str]:
    """'claim_id: chapter/table' for every read the chapter registry does not declare."""
    from ddlstudy.chapters.registry import table_known

    bad = []
    for c in all_claims() if claims is None else claims:
        for chapter, table in c.reads:
            try:
                ok = table_known(chapter, table)
            except ValueError:
                ok = False
            if not ok:
                bad.append(f"{c.id}: {chapter}/{table}")
    return bad


def _row(c: Claim, m: Measurement) -> dict:
    """One claims.csv row: the claim's words, the measurement and its verdict."""
    quantity = f"{c.quantity} [{m.label}]" if m.label else c.quantity
    base = {"paper": c.paper, "claim_id": c.id, "claim": c.claim, "quote": c.quote,
            "location": c.location, "conditions": c.conditions, "quantity": quantity,
            "no_effect": c.no_effect, "margin_low": c.margin_low, "margin_high": c.margin_high,
            "testbed": m.testbed, "source": m.source, "chapter": m.chapter,
            "value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "runs": 0, "method": "",
            "column": m.column, "ratio_what": m.ratio[0] if m.ratio else "",
            "ratio": m.ratio[1] if m.ratio else math.nan, "flipped_by": ""}
    if m.fixed:
        return {**base, "testbed": m.testbed if m.source else "emulator settings",
                "verdict": SET_BY_CONFIG, "reason": m.fixed}
    if m.missing or not m.a or (m.b is not None and not m.b):
        why = m.missing or f"not measured: no usable runs for {m.label}"
        return {**base, "verdict": NOT_MEASURED, "reason": why}
    try:
        v = inference.verdict(m.a, m.b, kind=c.kind, no_effect=c.no_effect,
                              margin_low=c.margin_low, margin_high=c.margin_high,
                              direction=c.direction, exact=m.exact)
    except ValueError as err:
        return {**base, "verdict": NOT_MEASURED, "reason": f"not measured: {err}"}
    reason = v.reason + (f"; {m.note}" if m.note else "")
    return {**base, "value": v.value, "ci_low": v.ci_low, "ci_high": v.ci_high, "runs": v.runs,
            "method": v.method, "verdict": v.verdict, "reason": reason}


def evaluate(claim: Claim, run_dir: Path, folders: Folders) -> list[dict]:
    """The claim's rows on this run (one per measurement; one 'not measured' row if none)."""
    if claim.measure is None:
        return [_row(claim, Measurement("", missing=claim.needs, testbed=TESTBED_NONE))]
    found = claim.measure(Records(run_dir, folders, claim.reads))
    rows = [_row(claim, m) for m in found] or [
        _row(claim, Measurement("", missing="not measured: no records"))]
    return flips(rows)


def flips(rows: list[dict]) -> list[dict]:
    """Chapter 99's two columns: where a claim's row on the paper's testbed (reproduction) and
    its row on today's (update) for the same subject (the label before ':', a model) are both
    decided and disagree, both rows name the ratio that flipped it, with its value on each."""
    def subject(row: dict) -> str:
        label = str(row["quantity"]).rsplit(" [", 1)[-1]
        return label.split(":", 1)[0]

    decided = [r for r in rows if r["verdict"] in DECIDED and r["column"] in (REPRODUCTION,
                                                                              UPDATE)]
    for rep in (r for r in decided if r["column"] == REPRODUCTION):
        for upd in (r for r in decided if r["column"] == UPDATE):
            if subject(rep) != subject(upd) or rep["verdict"] == upd["verdict"]:
                continue
            if rep["ratio_what"] and rep["ratio_what"] == upd["ratio_what"]:
                why = (f"{rep['ratio_what']}: {rep['ratio']:.3g} on the paper's testbed "
                       f"({rep['testbed']}) vs {upd['ratio']:.3g} on today's ({upd['testbed']})")
            else:
                why = ("the testbeds differ (compute per step and link rate); no common ratio "
                       "recorded")
            rep["flipped_by"] = upd["flipped_by"] = why
    return rows


def claims_table(run_dir: str | Path, folders: Folders | None = None,
                 claims: Sequence[Claim] | None = None,
                 reference: str | Path | None = None) -> pd.DataFrame:
    """Every claim's rows; `folders` from `chapter_folders` (default: the run's meta.json).

    `reference`: a reference run folder (results/reference) whose rows stand in, labelled, where
    this run's evidence is short (`with_reference`): a short report decides what the committed
    independent runs decide. None, or the run itself: this run's rows only."""
    run = Path(run_dir)
    folders = folders_from_meta(run) if folders is None else folders
    claims = all_claims() if claims is None else claims
    ref = Path(reference) if reference is not None else None
    use_ref = ref is not None and ref.is_dir() and ref.resolve() != run.resolve()
    ref_folders = folders_from_meta(ref) if use_ref and ref is not None else {}
    rows = []
    for c in claims:
        own = evaluate(c, run, folders)
        if use_ref and ref is not None and any(r["verdict"] not in DECIDED for r in own):
            own = with_reference(own, evaluate(c, ref, ref_folders), c.quantity)
        rows.extend(own)
    return pd.DataFrame(rows, columns=COLUMNS)


def _stronger(ref: dict, own: dict | None) -> bool:
    """The reference row says more than this run's: it is decided, or rests on more runs."""
    if ref["verdict"] == SET_BY_CONFIG or ref["verdict"] == NOT_MEASURED:
        return False
    if own is None:
        return True
    return own["verdict"] not in DECIDED and (ref["verdict"] in DECIDED
                                              or int(ref["runs"]) > int(own["runs"]))


def _from_reference(ref: dict, own: dict | None) -> dict:
    """`ref` labelled as the committed reference's, saying what this run measured itself."""
    src = str(ref["source"] or "")
    if not src.startswith("reference run"):
        src = "committed reference records (results/reference)" + (f"; {src}" if src else "")
    if own is None:
        mine = "this run has no row for it"
    elif own["verdict"] == NOT_MEASURED:
        mine = "this run: not measured"
    else:
        mine = f"this run: {own['verdict']}, {int(own['runs'])} run(s)"
    return {**ref, "source": src,
            "reason": f"{ref['reason']}; from the committed reference ({mine})"}


def _subject(row: dict) -> tuple[str, str, str]:
    """What a row is about: chapter, testbed and the label's subject (before ':', a model or
    a profile), so a run's 'not measured [vgg16]' meets the reference's 'vgg16: ...' row."""
    label = str(row["quantity"]).rsplit(" [", 1)[-1].rstrip("]") if " [" in str(
        row["quantity"]) else ""
    return str(row["chapter"]), str(row["testbed"]), label.split(":", 1)[0].strip()


def with_reference(own: list[dict], ref: list[dict], quantity: str = "") -> list[dict]:
    """One claim's rows: this run's, with the reference's row in place of each of this run's
    undecided rows it outweighs (`_stronger`; matched by `_subject`), and the reference's rows
    for subjects this run did not measure at all. A run row that only says 'not measured' for
    a whole chapter (its quantity is the claim's bare `quantity`, its subject is the chapter,
    or the run measured nothing in that chapter for this claim) goes where the reference
    supplies that chapter's rows. Decided rows of this run are never replaced."""
    ref_by = {}
    for r in ref:
        ref_by.setdefault(_subject(r), r)
    own_keys = {_subject(r) for r in own}
    out = []
    for row in own:
        alt = ref_by.get(_subject(row))
        out.append(_from_reference(alt, row) if alt is not None and _stronger(alt, row)
                   else row)
    extra = [r for r in ref if _subject(r) not in own_keys and _stronger(r, None)]
    if extra:
        supplied = {r["chapter"] for r in extra}
        measured = {r["chapter"] for r in own if int(r["runs"]) > 0}
        out = [r for r in out if not (
            r["verdict"] == NOT_MEASURED and r["chapter"] in supplied
            and (r["quantity"] == quantity or _subject(r)[2] in ("", r["chapter"])
                 or r["chapter"] not in measured))]
        out.extend(_from_reference(r, None) for r in extra)
    return flips(out)


def chapter_claims(run_dir: str | Path, chapter: str) -> pd.DataFrame:
    """The rows of every claim that reads `chapter`, judged exactly as chapter 99 judges them,
    on the chapter folders present in `run_dir`: how a chapter states a paper's claim without a
    second definition of it (one quantity, one margin, one verdict across the book)."""
    run = Path(run_dir)
    claims = [c for c in all_claims() if any(ch == chapter for ch, _ in c.reads)]
    read = {ch for c in claims for ch, _ in c.reads}
    folders = {ch: [ch] for ch in read if (run / ch).is_dir()}
    return claims_table(run, folders, claims)


def claims_text(table: pd.DataFrame) -> str:
    """One bullet per row: paper, claim, verdict and its reason (the chapters' wording)."""
    def why(r: Any) -> str:
        reason = str(r.reason)
        for prefix in (f"{r.verdict}: ", f"{r.verdict}"):
            reason = reason.removeprefix(prefix)
        return reason

    return "\n".join(f"- {r.paper}: {r.claim} -> **{r.verdict}**: {why(r)}"
                     for r in table.itertuples())


def paper_counts(table: pd.DataFrame) -> pd.DataFrame:
    """Per paper: claims found, tested (a row with runs), agreed, differed, undecided (a claim
    is agreed/differed when all its decided rows say so), and why the rest are undecided."""
    out = []
    for paper in PAPERS:
        part = table[table["paper"] == paper]
        ids = list(dict.fromkeys(part["claim_id"]))
        per = {i: part[part["claim_id"] == i] for i in ids}
        decided = {i: set(p.loc[p["verdict"].isin(DECIDED), "verdict"]) for i, p in per.items()}
        why = (part.loc[~part["verdict"].isin(DECIDED), "reason"].astype(str)
               .str.extract(r"^([^:(]+(?::\s*\d+ runs)?)")[0].str.strip().value_counts())
        out.append({"paper": paper, "found": len(ids),
                    "tested": sum(int((p["runs"] > 0).any()) for p in per.values()),
                    "agreed": sum(d == {AGREES} for d in decided.values()),
                    "differed": sum(d == {DIFFERS} for d in decided.values()),
                    "mixed": sum(d == set(DECIDED) for d in decided.values()),
                    "undecided": sum(not d for d in decided.values()),
                    "why undecided (rows)": "; ".join(f"{k} x{n}" for k, n in why.items())})
    return pd.DataFrame(out)


# ----------------------------------------------------------------------------- calibration
SPREAD_KEYS = ["model", "strategy", "workers", "network", "network_scale", "time_dilation",
               "batch_size", "compute_mode", "replay_source", "steps"]


def _repeated_cells(root: Path | None) -> tuple[dict, list[str], str]:
    """{cell key: images/sec of each run} for the reference's cells measured more than once,
    the folders they are in, and where that is (or why there is none: empty dict)."""
    from ddlstudy.records import reference

    base = root or reference.reference_dir()
    frames = []
    for path in sorted(base.glob("*/summary.csv")):
        df = pd.read_csv(path)
        if "images_per_sec" in df:
            frames.append(df.assign(folder=path.parent.name))
    if not frames:
        return {}, [], f"no summary.csv under {base}"
    df = pd.concat(frames, ignore_index=True)
    keys = [k for k in SPREAD_KEYS if k in df]
    df = df[df["images_per_sec"] > 0].copy()
    df[keys] = df[keys].astype(str)
    groups = [(k, g) for k, g in df.groupby(keys) if len(g) > 1]
    if not groups:
        return {}, [], f"no cell of {base} was measured twice"
    cells = {k: g["images_per_sec"].to_numpy(float) for k, g in groups}
    return cells, sorted({f for _, g in groups for f in g["folder"]}), str(base)


def reference_spread(root: Path | None = None) -> tuple[float | None, str]:
    """Run-to-run CV pooled over the cells the committed reference measured more than once
    (the same configuration in two chapters' folders, or repeats), and a sentence saying so."""
    cells, folders, where = _repeated_cells(root)
    if not cells:
        return None, where
    cv = calibration.run_spread(cells)
    n = sum(len(v) for v in cells.values())
    return cv, (f"run-to-run spread from {where}: {len(cells)} cells measured more than once "
                f"({n} runs, in {', '.join(folders)}), pooled log-sd -> cv {cv:.3f}")


def cell_spreads(root: Path | None = None) -> pd.DataFrame:
    """One row per reference cell measured more than once: its key (joined), runs and CV (from
    its own log-sd): what a claim reading that cell has to decide against."""
    cells, _, _ = _repeated_cells(root)
    rows = [{"cell": " / ".join((k if isinstance(k, tuple) else (k,))[:4]), "runs": len(v),
             "cv": calibration.run_spread({0: v})} for k, v in cells.items()]
    return pd.DataFrame(rows, columns=["cell", "runs", "cv"]).sort_values("cv",
                                                                           ignore_index=True)


def calibrate_main(args: object) -> int:
    """Print the calibration with the reference spread (or --cv), ending with the two lines.

    With the reference: the table at the pooled spread, which a few noisy cells dominate (a
    host-bound one-worker cell, real compute on shared cores), then the median cell's spread:
    a claim's interval uses its own cells' spread, so the closing power line is at the median
    cell's (the pooled power printed just above it), and the closing false-decision line is the
    larger of the two."""
    if getattr(args, "cv", None) is not None:
        print(f"run-to-run spread given: cv {args.cv}")  # type: ignore[attr-defined]
        return calibration.run_calibrate(args)  # type: ignore[arg-type]
    cv, why = reference_spread()
    if cv is None:
        args.cv = calibration.DEFAULT_CV  # type: ignore[attr-defined]
        print(why + f"; used the default cv {args.cv}")  # type: ignore[attr-defined]
        return calibration.run_calibrate(args)  # type: ignore[arg-type]
    print(why)
    spreads = cell_spreads()
    kw = dict(effect=args.effect, margin=args.margin, method=args.method,  # type: ignore
              design=args.design, min_runs=args.min_runs)  # type: ignore[attr-defined]
    pooled = calibration.calibrate(cv, args.runs, args.trials, args.seed,  # type: ignore
                                   **kw)
    lines = calibration.report_lines(pooled)
    print("\n".join(lines[:-2]))
    median = float(spreads["cv"].median())
    typical = calibration.calibrate(median, args.runs, args.trials, args.seed,  # type: ignore
                                    **kw)
    worst = spreads.tail(3)
    print(f"per cell: median cv {median:.3f}, 90th percentile "
          f"{float(spreads['cv'].quantile(0.9)):.3f}; the noisiest: " + "; ".join(
              f"{r.cell} cv {r.cv:.2f} ({r.runs} runs)" for r in worst.itertuples()))
    print(f"at the pooled spread (cv {cv:.3f}): false decisions {pooled.false_decisions:.3f}, "
          f"power {pooled.power:.2f}; at the median cell's (cv {median:.3f}): false "
          f"decisions {typical.false_decisions:.3f}, power {typical.power:.2f}")
    print(f"false decisions under no effect: "
          f"{max(pooled.false_decisions, typical.false_decisions):.3f}")
    print(f"power at the stated margins: {typical.power:.2f}")
    return 0


# ----------------------------------------------------------------------------- compare
def _claims_csv(path: str | Path) -> pd.DataFrame:
    """A run's claims: RUN/99_conclusions/claims.csv, or a claims.csv named directly."""
    p = Path(path)
    csv = p / "99_conclusions" / "claims.csv" if p.is_dir() else p
    if not csv.exists():
        raise FileNotFoundError(f"{csv} not found: give a run folder that ran 99_conclusions "
                                "(ddlstudy report ... --out DIR) or a claims.csv")
    df = pd.read_csv(csv)
    missing = {"paper", "quantity", "verdict"} - set(df)
    if missing:
        raise ValueError(f"{csv} lacks column(s) {', '.join(sorted(missing))}: not a claims.csv "
                         "written by ddlstudy.claims.engine")
    return df


def _keyed(df: pd.DataFrame) -> pd.DataFrame:
    """Claims keyed by paper, claim id (or chapter and source in older tables) and quantity,
    numbers masked (a label may carry measured figures), plus the occurrence within the key."""
    cols = [c for c in ("paper", "claim_id", "chapter", "source", "quantity") if c in df]
    if "claim_id" in df:
        cols = ["paper", "claim_id", "quantity"]
    key = df[cols].astype(str).apply(lambda col: col.map(
        lambda s: re.sub(r"\d+(\.\d+)?", "#", s)))
    key["k"] = key.groupby(cols).cumcount()
    return df.assign(key=key.apply(lambda r: " | ".join(map(str, r)), axis=1))


def compare(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per claim both runs' verdicts and `status`: same, CONFLICT (both agrees/differs and not
    equal), undecided in one, or only in one run."""
    ka, kb = _keyed(a), _keyed(b)
    cols = ["key", "paper", "quantity", "verdict"]
    both = ka[cols].merge(kb[cols], on="key", how="outer", suffixes=("_a", "_b"))
    for col in ("paper", "quantity"):
        both[col] = both[f"{col}_a"].fillna(both[f"{col}_b"])

    def status(r: pd.Series) -> str:
        va, vb = r["verdict_a"], r["verdict_b"]
        if pd.isna(va) or pd.isna(vb):
            return "only in run " + ("B" if pd.isna(va) else "A")
        if va in DECIDED and vb in DECIDED:
            return "same" if va == vb else "CONFLICT"
        return "same" if va == vb else "undecided in one"
    both["status"] = both.apply(status, axis=1)
    return both[["paper", "quantity", "verdict_a", "verdict_b", "status"]]


def _print_compare(table: pd.DataFrame, a: str, b: str) -> int:
    """Print the comparison; 1 when a decided verdict of one run contradicts the other's."""
    width = 70
    for r in table.itertuples():
        q = r.quantity if len(r.quantity) <= width else r.quantity[:width - 3] + "..."
        print(f"{r.paper:<12} {q:<{width}}  {r.verdict_a!s:<13} {r.verdict_b!s:<13} {r.status}")
    bad = table[table["status"] == "CONFLICT"]
    decided = int((table["verdict_a"].isin(DECIDED) & table["verdict_b"].isin(DECIDED)).sum())
    print(f"A = {a}, B = {b}: {len(table)} claims, {decided} decided in both, "
          f"{len(bad)} conflicting" + (": " + "; ".join(f"{r.paper}: {r.quantity}"
                                                          for r in bad.itertuples())
                                       if len(bad) else ""))
    return 1 if len(bad) else 0


def main(argv: list[str] | None = None) -> int:
    """`table RUN` | `compare RUN_A RUN_B` | `calibrate [--cv X ...]`."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m ddlstudy.conclusions",
                                     description="Chapter 99's claims from a run's records, "
                                     "two runs' verdicts side by side, or the calibration of "
                                     "the verdict rules.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table", help="every claim's verdict from a run folder's records")
    t.add_argument("run", help="a run folder (ddlstudy report ... --out DIR)")
    t.add_argument("--out", help="also write the full table to this csv")
    t.add_argument("--reference", help="a reference folder (results/reference) whose rows "
                   "stand in, labelled, where this run's are undecided, as chapter 99 does; "
                   "default: this run's rows only")
    c = sub.add_parser("compare", help="both runs' verdicts per claim; exit 1 when a decided "
                       "(agrees/differs) verdict of one run contradicts the other's")
    c.add_argument("run_a")
    c.add_argument("run_b")
    k = sub.add_parser("calibrate", help="false decisions under no effect and power at the "
                       "stated margins, on the reference records' run-to-run spread")
    calibration.add_calibrate_arguments(k)
    k.set_defaults(cv=None)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "calibrate":
            return calibrate_main(args)
        if args.cmd == "table":
            run = Path(args.run)
            if not (run / "meta.json").exists():
                raise FileNotFoundError(f"{run}/meta.json not found: give a run folder "
                                        "written by ddlstudy report")
            if args.reference and not (Path(args.reference) / "meta.json").exists():
                raise FileNotFoundError(f"{args.reference}/meta.json not found: give a "
                                        "reference folder (results/reference) to --reference")
            table = claims_table(run, reference=args.reference)
            if args.out:
                table.to_csv(args.out, index=False)
            with pd.option_context("display.width", 220, "display.max_colwidth", 70):
                print(table[["paper", "claim_id", "value", "ci_low", "ci_high", "runs",
                             "verdict", "reason"]].to_string(index=False))
            return 0
        return _print_compare(compare(_claims_csv(args.run_a), _claims_csv(args.run_b)),
                              args.run_a, args.run_b)
    except (FileNotFoundError, ValueError, pd.errors.ParserError,
            pd.errors.EmptyDataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
