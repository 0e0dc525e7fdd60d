"""Chapter 99's claims as data: every claim, table-driven, on synthetic runs (agrees, differs,
inconclusive, too few runs, missing input); every claim's words, margins and declared tables;
the calibration command on a small synthetic spread."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ddlstudy.claims import engine
from ddlstudy.claims.base import Claim, Measurement

MEASURED = [c for c in engine.CLAIMS if c.measure is not None]
IDS = [c.id for c in engine.CLAIMS]


def _values(claim: Claim, case: str) -> tuple[float, ...]:
    """Per-run values (7 runs; 3 for 'few') that put the claim's verdict where `case` says."""
    lo, hi, ne = claim.margin_low, claim.margin_high, claim.no_effect
    if claim.kind == "direction":
        up = claim.direction == "greater"
        inside, outside, edge = (ne * 1.5, ne / 1.5, ne) if up else (ne / 1.5, ne * 1.5, ne)
    else:
        inside, outside, edge = math.sqrt(lo * hi), hi * 1.5, hi
    noise = np.array([0.995, 1.005, 1.0, 0.998, 1.002, 1.001, 0.999])
    wide = np.array([0.6, 1.6, 0.8, 1.3, 1.0, 0.7, 1.45])
    centre = {"agrees": inside, "differs": outside, "inconclusive": edge, "few": inside}[case]
    spread = wide if case == "inconclusive" else noise
    vals = centre * spread
    return tuple(vals[:3] if case == "few" else vals)


@pytest.mark.parametrize("claim", engine.CLAIMS, ids=IDS)
@pytest.mark.parametrize(("case", "verdict"), [
    ("agrees", engine.AGREES), ("differs", engine.DIFFERS),
    ("inconclusive", engine.INCONCLUSIVE), ("few", engine.INCONCLUSIVE),
    ("missing", engine.NOT_MEASURED)])
def test_every_claims_verdict_follows_the_runs(claim: Claim, case: str, verdict: str) -> None:
    m = (Measurement("x", missing="not measured: synthetic") if case == "missing"
         else Measurement("x", _values(claim, case)))
    row = engine._row(claim, m)
    assert row["verdict"] == verdict, row["reason"]
    if case == "few":
        assert row["reason"].startswith("inconclusive: 3 runs (needs 5)")
    if verdict in (engine.AGREES, engine.DIFFERS):
        assert row["runs"] >= 5 and row["ci_low"] <= row["value"] <= row["ci_high"]
        if claim.kind == "direction":
            assert not row["ci_low"] <= claim.no_effect <= row["ci_high"]
        elif verdict == engine.AGREES:
            assert claim.margin_low < row["ci_low"] and row["ci_high"] < claim.margin_high


@pytest.mark.parametrize("claim", [c for c in engine.CLAIMS if c.kind != "direction"],
                         ids=lambda c: c.id)
def test_a_2x_change_never_agrees_with_an_equivalence_or_magnitude(claim: Claim) -> None:
    centre = math.sqrt(claim.margin_low * claim.margin_high)
    vals = tuple(centre * 2 * f for f in (0.99, 1.01, 1.0, 0.995, 1.005, 1.0))
    assert engine._row(claim, Measurement("x", vals))["verdict"] == engine.DIFFERS


def test_two_group_ratio_and_fixed_values() -> None:
    claim = next(c for c in engine.CLAIMS if c.id == "wang_horovod_17pct")
    a = tuple(117 * f for f in (0.99, 1.01, 1.0, 0.995, 1.005, 1.0))
    b = tuple(100 * f for f in (1.0, 0.99, 1.01, 1.005, 0.995, 1.0))
    assert engine._row(claim, Measurement("x", a, b))["verdict"] == engine.AGREES
    assert engine._row(claim, Measurement("x", b, b))["verdict"] == engine.DIFFERS
    row = engine._row(claim, Measurement("x", fixed="set by configuration: synthetic"))
    assert row["verdict"] == engine.SET_BY_CONFIG and math.isnan(row["value"])


@pytest.mark.parametrize("claim", engine.CLAIMS, ids=IDS)
def test_every_claim_has_its_words_margins_and_reasoning(claim: Claim) -> None:
    for field in ("quote", "location", "conditions", "quantity", "reasoning", "claim"):
        assert len(getattr(claim, field)) > 10, field
    assert "..." not in claim.quote.replace("[...]", "")  # elisions marked [...]
    assert 0 <= claim.margin_low < claim.margin_high and math.isfinite(claim.no_effect)
    if claim.kind == "equivalence":
        assert claim.margin_low <= claim.no_effect <= claim.margin_high
    assert claim.measure is not None or claim.needs.startswith("not measured: ")
    assert claim.paper in engine.PAPERS


def test_every_claim_reads_only_tables_its_chapter_declares() -> None:
    assert engine.undeclared_reads() == []
    bad = Claim("Shi 2019", "x", "c" * 11, "q" * 11, "l" * 11, "c" * 11, "q" * 11, "direction",
                1.0, 1.0, math.inf, "r" * 11, (("03_ps_vs_ring", "nope"),), lambda r: [])
    assert engine.undeclared_reads([bad]) == ["x: 03_ps_vs_ring/nope"]


def test_ids_unique_and_every_paper_has_claims() -> None:
    assert len(set(IDS)) == len(IDS)
    assert {c.paper for c in engine.CLAIMS} == set(engine.PAPERS)


@pytest.mark.parametrize("claim", MEASURED, ids=lambda c: c.id)
def test_every_measured_claim_without_records_says_what_is_missing(tmp_path, claim) -> None:
    rows = engine.evaluate(claim, tmp_path, {})
    # chapter 07 falls back to the committed reference run, labelled so: those rows may decide
    own = [r for r in rows if not str(r["source"]).startswith("reference run:")]
    assert rows and all(r["verdict"] in (engine.NOT_MEASURED, engine.SET_BY_CONFIG)
                        or r["reason"].startswith("inconclusive") for r in own)
    for r in rows:
        if r["verdict"] == engine.NOT_MEASURED:
            assert r["reason"].startswith("not measured: ")


def test_calibrate_prints_the_two_lines(capsys) -> None:
    assert engine.main(["calibrate", "--cv", "0.03", "--trials", "400"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("run-to-run spread given: cv 0.03")
    assert lines[-2].startswith("false decisions under no effect: 0.")
    assert lines[-1].startswith("power at the stated margins: ")
    assert float(lines[-2].split(": ")[1]) <= 0.1


def test_calibrate_on_the_reference_reports_pooled_and_median_cell_spreads(capsys) -> None:
    """Without --cv: the pooled spread's table, the per-cell spread (median, the noisiest named)
    and both calibrations, then the two closing lines (false = the larger, power = the median
    cell's)."""
    assert engine.main(["calibrate", "--trials", "400"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    both = next(line for line in lines if line.startswith("at the pooled spread (cv "))
    pooled_false = float(both.split("false decisions ")[1].split(",")[0])
    median_false = float(both.split("false decisions ")[2].split(",")[0])
    median_power = float(both.rsplit("power ", 1)[1])
    assert any(line.startswith("per cell: median cv ") for line in lines)
    assert lines[-2] == (f"false decisions under no effect: "
                         f"{max(pooled_false, median_false):.3f}")
    assert lines[-1] == f"power at the stated margins: {median_power:.2f}"


def test_cell_spreads_are_each_cells_own(tmp_path) -> None:
    import pandas as pd

    (tmp_path / "a").mkdir()
    pd.DataFrame({"model": "m", "strategy": "allreduce", "workers": [1, 1, 2, 2],
                  "images_per_sec": [100.0, 100.0, 100.0, 200.0]}).to_csv(
        tmp_path / "a" / "summary.csv", index=False)
    spreads = engine.cell_spreads(tmp_path)
    assert list(spreads["runs"]) == [2, 2]
    assert spreads["cv"].iloc[0] == 0.0 and spreads["cv"].iloc[1] > 0.4


def test_calibrate_measures_the_spread_from_repeated_cells(tmp_path) -> None:
    import pandas as pd

    for folder, rate in (("a", [100.0, 200.0]), ("b", [104.0, 190.0])):
        (tmp_path / folder).mkdir()
        pd.DataFrame({"model": "m", "strategy": "allreduce", "workers": [1, 2],
                      "images_per_sec": rate}).to_csv(tmp_path / folder / "summary.csv",
                                                      index=False)
    cv, why = engine.reference_spread(tmp_path)
    assert cv is not None and 0.01 < cv < 0.06 and "2 cells measured more than once" in why


# ----------------------------------------------------------------------------- two columns
def _grid(testbed: str, r1: float, r6: float, compute: float, comm: float) -> list[dict]:
    """Chapter 03 emulated rows of one testbed: ring and PS at 1 / 3 / 6 workers, 6 runs."""
    rows = []
    for rep, k in enumerate([0.99, 1.01, 1.0, 0.995, 1.005, 1.002]):
        for strategy, rates in (("allreduce", {1: r1, 3: r1 * 3 * r6 / (6 * r1) ** 0.5 / 2,
                                               6: r6}),
                                ("ps_sync", {1: r1 / 2, 3: r1, 6: r1})):
            for n, rate in rates.items():
                rows.append({"model": "resnet50", "strategy": strategy, "workers": n,
                             "repeat": rep, "images_per_sec": rate * k, "compute_s": compute,
                             "comm_s": comm, "testbed": testbed})
    return rows


def test_a_claim_is_decided_in_two_columns_and_names_the_ratio_that_flipped_it(tmp_path):
    """Shi 2019's 'ring roughly proportional' on the paper's testbed (shi2019: compute-bound,
    efficiency ~0.97: agrees, the reproduction) and on today's (the H100 replay: efficiency
    ~0.17: differs, the update); both rows name compute / communication on each testbed."""
    import pandas as pd

    from ddlstudy.claims.base import EMULATED_03, REPRODUCTION, UPDATE

    folders = engine.chapter_folders(["03_ps_vs_ring"], [], ["resnet50"])
    assert "03_ps_vs_ring-testbed-shi2019-resnet50" in folders[EMULATED_03]
    for name, rows in ((f"{EMULATED_03}-resnet50", _grid("none", 1000, 1000, 2.8, 13.0)),
                       ("03_ps_vs_ring-testbed-shi2019-resnet50",
                        _grid("shi2019", 50, 291, 13, 1.0))):
        (tmp_path / name).mkdir()
        pd.DataFrame(rows).to_csv(tmp_path / name / "summary.csv", index=False)
    claim = next(c for c in engine.CLAIMS if c.id == "shi_ring_proportional")
    table = engine.claims_table(tmp_path, folders, [claim])
    emu = table[table["chapter"] == EMULATED_03].set_index("column")
    assert set(emu.index) == {REPRODUCTION, UPDATE}
    assert emu.loc[REPRODUCTION, "verdict"] == engine.AGREES
    assert emu.loc[UPDATE, "verdict"] == engine.DIFFERS
    assert "shi2019" in emu.loc[REPRODUCTION, "testbed"]
    for col in (REPRODUCTION, UPDATE):
        why = emu.loc[col, "flipped_by"]
        assert "compute / communication per step at 6 workers: 13 on the paper's" in why
        assert "vs 0.215 on today's" in why
    # the same verdict on both testbeds names no flip
    same = engine.flips([{**r, "verdict": engine.AGREES, "flipped_by": ""}
                         for r in table.to_dict("records")])
    assert len(same) == len(table) and not any(r["flipped_by"] for r in same)


def test_claim_order_does_not_depend_on_import_order() -> None:
    """A process that imports one paper's claims first (a test, a notebook) lists the claims in
    the same order as one that does not: chapter 99 and the README's sentences follow it (a
    fresh-clone CI failed test_readme after test_costmodel_regime imported two papers first)."""
    import subprocess
    import sys

    code = ("{imports}from ddlstudy.claims.registry import all_claims; "
            "print(' '.join(c.id for c in all_claims()))")
    plain = subprocess.run([sys.executable, "-c", code.format(imports="")], check=True,
                           capture_output=True, text=True).stdout.split()
    first = subprocess.run([sys.executable, "-c", code.format(
        imports="import ddlstudy.claims.beyond, ddlstudy.claims.malik2018, "
                "ddlstudy.claims.shi2019; ")], check=True, capture_output=True, text=True
    ).stdout.split()
    assert plain and first == plain
    import importlib

    from ddlstudy.claims.registry import PAPER_FILES

    last = importlib.import_module(PAPER_FILES[-1]).CLAIMS[-1].id  # the last paper file's last
    assert plain[0].startswith("shi_") and plain[-1] == last


# ----------------------------------------------------------------------------- reference rows
def _emulated(root, model: str, runs: int, r6: float) -> None:
    """An emulated chapter 03 folder of `model` on today's testbed: `runs` runs per cell."""
    import pandas as pd

    from ddlstudy.claims.base import EMULATED_03

    jitter = np.random.default_rng(len(model)).uniform(0.98, 1.02, 100)  # per cell and run
    rows = [{**r, "model": model, "images_per_sec": r["images_per_sec"] * jitter[i]}
            for i, r in enumerate(_grid("none", 1000, r6, 2.8, 13.0)) if r["repeat"] < runs]
    (root / f"{EMULATED_03}-{model}").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(root / f"{EMULATED_03}-{model}" / "summary.csv", index=False)


def test_a_short_run_takes_the_references_decided_rows_labelled(tmp_path) -> None:
    """make report's chapter 99: where this run has too few runs (resnet50: 1) the committed
    reference's row (6 runs: differs) stands in, labelled, saying what this run had; a subject
    only the reference measured (vgg19) is added; this run's decided row (vgg16: agrees) is
    kept although the reference says otherwise; a reference that is the run changes nothing."""
    import json

    from ddlstudy.claims.base import EMULATED_03

    run, ref = tmp_path / "run", tmp_path / "ref"
    _emulated(run, "resnet50", 1, 1000)
    _emulated(run, "vgg16", 6, 5800)           # efficiency ~0.97: agrees
    for model in ("resnet50", "vgg16", "vgg19"):
        _emulated(ref, model, 6, 1000)         # efficiency ~0.17: differs
    (ref / "meta.json").write_text(json.dumps({"params": {
        "report": {"chapters": ["03_ps_vs_ring"]},
        "network": {"chapter03_models": ["resnet50", "vgg16", "vgg19"]}}}))
    claim = next(c for c in engine.CLAIMS if c.id == "shi_ring_proportional")
    folders = engine.chapter_folders(["03_ps_vs_ring"], [], ["resnet50", "vgg16"])

    alone = engine.claims_table(run, folders, [claim])
    alone = alone[alone["chapter"] == EMULATED_03]
    assert sorted(alone["verdict"]) == [engine.AGREES, engine.INCONCLUSIVE]

    table = engine.claims_table(run, folders, [claim], reference=ref)
    emu = {str(q).rsplit(" [", 1)[1].split(":")[0]: r
           for q, r in zip(table["quantity"], table.to_dict("records"), strict=True)
           if r["chapter"] == EMULATED_03}
    assert set(emu) == {"resnet50", "vgg16", "vgg19"}
    assert emu["resnet50"]["verdict"] == engine.DIFFERS and emu["resnet50"]["runs"] == 6
    assert emu["resnet50"]["source"].startswith("committed reference records")
    assert "this run: inconclusive, 1 run(s)" in emu["resnet50"]["reason"]
    assert emu["vgg16"]["verdict"] == engine.AGREES and "reference" not in emu["vgg16"]["source"]
    assert emu["vgg19"]["verdict"] == engine.DIFFERS
    assert "this run has no row for it" in emu["vgg19"]["reason"]
    same = engine.claims_table(run, folders, [claim], reference=run)
    assert same.drop(columns="reason").equals(
        engine.claims_table(run, folders, [claim]).drop(columns="reason"))


def test_table_command_scores_a_run_with_the_reference_as_chapter_99_does(tmp_path, capsys
                                                                         ) -> None:
    """`conclusions table RUN --reference REF` writes chapter 99's rows (the reference standing
    in where the run is short); without it the run's own rows; a folder that is not a
    reference is one line and exit 2."""
    import json

    import pandas as pd

    run, ref = tmp_path / "run", tmp_path / "ref"
    _emulated(run, "resnet50", 1, 1000)
    _emulated(ref, "resnet50", 6, 1000)        # efficiency ~0.17 over 6 runs: differs
    for d in (run, ref):
        (d / "meta.json").write_text(json.dumps({"params": {
            "report": {"chapters": ["03_ps_vs_ring"]},
            "network": {"chapter03_models": ["resnet50"]}}}))
    verdicts = {}
    for name, extra in (("own", []), ("ref", ["--reference", str(ref)])):
        out = tmp_path / f"{name}.csv"
        assert engine.main(["table", str(run), "--out", str(out), *extra]) == 0
        got = pd.read_csv(out)
        verdicts[name] = set(got.loc[got["claim_id"] == "shi_ring_proportional", "verdict"])
    assert engine.DIFFERS not in verdicts["own"] and engine.DIFFERS in verdicts["ref"], verdicts
    capsys.readouterr()
    assert engine.main(["table", str(run), "--reference", str(tmp_path / "nope")]) == 2
    assert "give a reference folder" in capsys.readouterr().err


def test_a_chapter_the_run_did_not_measure_gives_way_to_the_references_rows() -> None:
    """A run whose chapter 11 has no accuracy runs says 'not measured [PowerSGD / DDP]'; the
    reference's per-rank rows (decided) replace it; a not-measured row in a chapter where the
    run measured something else stays (it names what that run lacks)."""
    def row(q: str, chapter: str, verdict: str, runs: int) -> dict:
        return {"quantity": f"acc [{q}]", "chapter": chapter, "testbed": "t", "verdict": verdict,
                "runs": runs, "source": "", "reason": verdict, "column": "", "ratio_what": "",
                "ratio": math.nan, "flipped_by": ""}

    own = [row("PowerSGD / DDP", "11_beyond", engine.NOT_MEASURED, 0),
           row("vgg19", "03", engine.NOT_MEASURED, 0), row("resnet50: x", "03", "inconclusive", 2)]
    ref = [row("ddp_powersgd1 / ddp", "11_beyond", engine.AGREES, 5),
           row("alexnet: x", "03", engine.AGREES, 5)]
    out = engine.with_reference(own, ref, "acc")
    got = sorted((r["quantity"], r["verdict"]) for r in out)
    assert got == [("acc [alexnet: x]", engine.AGREES),
                   ("acc [ddp_powersgd1 / ddp]", engine.AGREES),
                   ("acc [resnet50: x]", "inconclusive"), ("acc [vgg19]", engine.NOT_MEASURED)]


def test_pani_ratio_takes_each_testbed_at_its_own_top_worker_count(tmp_path) -> None:
    """Another testbed's larger grid (Wang's 16 GPUs, one model) in the emulated section must
    not set the top worker count of today's models: the H100 row stays measured at 6 workers
    (it read 'not measured' once Wang's cells joined the reference)."""
    import pandas as pd

    from ddlstudy.claims.base import EMULATED_03

    for model, compute, comm in (("alexnet", 1.0, 10.0), ("resnet152", 10.0, 10.0)):
        rows = [{**r, "model": model, "compute_s": compute * (1 + 0.01 * r["repeat"]),
                 "comm_s": comm * (1 + 0.02 * (r["repeat"] % 3))}
                for r in _grid("none", 1000, 1000, 1.0, 1.0)]
        (tmp_path / f"{EMULATED_03}-{model}").mkdir()
        pd.DataFrame(rows).to_csv(tmp_path / f"{EMULATED_03}-{model}" / "summary.csv",
                                  index=False)
    wang = tmp_path / "03_ps_vs_ring-testbed-wang_nchc_10gbe-resnet50"
    wang.mkdir()
    pd.DataFrame([{"model": "resnet50", "strategy": "allreduce", "workers": 16, "repeat": r,
                   "images_per_sec": 6000.0, "compute_s": 30.0, "comm_s": 1.0,
                   "testbed": "wang_nchc_10gbe"} for r in range(2)]).to_csv(
        wang / "summary.csv", index=False)
    folders = engine.chapter_folders(["03_ps_vs_ring"], [], ["alexnet", "resnet152", "resnet50"])
    claim = next(c for c in engine.CLAIMS if c.id == "pani_small_model_high_ratio")
    table = engine.claims_table(tmp_path, folders, [claim])
    emu = table[table["chapter"] == EMULATED_03]
    assert len(emu) == 1 and "at 6 workers: alexnet (least compute) / resnet152" in \
        emu["quantity"].iloc[0]
    assert emu["verdict"].iloc[0] == engine.AGREES and emu["runs"].iloc[0] >= 5


def test_malik_comm_share_reads_todays_testbed_only(tmp_path) -> None:
    """An AlexNet PS grid on a paper's testbed (more workers, K80 compute) must not set the
    H100 row's top worker count or mix its runs in."""
    import pandas as pd

    from ddlstudy.claims.base import EMULATED_03

    rows = [{"model": "alexnet", "strategy": "ps_sync", "workers": 6, "repeat": r,
             "comm_s": 99.0 + r * 0.1, "compute_s": 1.0, "testbed": "none"} for r in range(5)]
    rows += [{"model": "alexnet", "strategy": "ps_sync", "workers": 8, "repeat": r,
              "comm_s": 1.0, "compute_s": 99.0, "testbed": "shi2019"} for r in range(5)]
    (tmp_path / f"{EMULATED_03}-alexnet").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / f"{EMULATED_03}-alexnet" / "summary.csv", index=False)
    folders = engine.chapter_folders(["03_ps_vs_ring"], [], ["alexnet"])
    claim = next(c for c in engine.CLAIMS if c.id == "malik_alexnet_comm_bottleneck")
    (row,) = engine.claims_table(tmp_path, folders, [claim]).to_dict("records")
    assert "at 6 workers" in row["quantity"] and row["value"] > 0.98
    assert row["verdict"] == engine.AGREES
