"""Chapter 99 on synthetic records written as the chapters write them: the claims read only
the folders the params name, test each strategy's own scaling, compare Horovod with TF
mirrored (not TF parameter servers) at 2 workers, and `compare` flags only real conflicts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddlstudy.claims import engine as C

RUNS = 6


def _write(run: Path, folder: str, rows: list[dict], name: str = "summary") -> None:
    (run / folder).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(run / folder / f"{name}.csv", index=False)


def _cells(rates: dict[tuple[str, int], float], model: str = "resnet50", spread: float = 0.01,
           runs: int = RUNS, **extra: object) -> list[dict]:
    """One row per (strategy, workers) cell and independent run, +-spread run to run."""
    out = []
    rng = np.random.default_rng(len(out) + len(rates) + runs)
    for (strategy, workers), rate in rates.items():
        for r in range(runs):
            f = 1 + spread * rng.uniform(-1, 1)
            out.append({"strategy": strategy, "workers": workers, "model": model, "repeat": r,
                        "images_per_sec": rate * f, "batch_size": 32, "error": "",
                        "cpu_bound": False, **extra})
    return out


def _rows(table: pd.DataFrame, claim_id: str) -> pd.DataFrame:
    return table[table["claim_id"] == claim_id]


def _emulated(run: Path, ps: dict[int, float], ring: dict[int, float], runs: int = RUNS) -> dict:
    folder = f"{C.EMULATED_03}-resnet50"
    rates = {**{("ps_sync", n): v for n, v in ps.items()},
             **{("allreduce", n): v for n, v in ring.items()}}
    _write(run, folder, _cells(rates, runs=runs))
    return {C.EMULATED_03: [folder]}


@pytest.mark.parametrize(("ps6", "ring6", "levels", "proportional", "better"), [
    (105.0, 590.0, "agrees", "agrees", "agrees"),       # Shi's picture
    (200.0, 300.0, "differs", "differs", "differs"),    # PS doubles, ring flat
])
def test_shi_scaling_on_each_strategys_own_scaling(tmp_path: Path, ps6, ring6, levels,
                                                   proportional, better) -> None:
    folders = _emulated(tmp_path, {1: 80.0, 3: 100.0, 6: ps6}, {1: 100.0, 3: 300.0, 6: ring6})
    t = C.claims_table(tmp_path, folders)
    for cid, want in (("shi_ps_levels_off", levels), ("shi_ring_proportional", proportional),
                      ("shi_ring_scales_better", better)):
        rows = _rows(t, cid)
        (row,) = rows[rows["chapter"] == C.EMULATED_03].to_dict("records")
        assert row["verdict"] == want, (cid, row["reason"])
        assert row["runs"] == RUNS and row["testbed"].startswith("emulated")


def test_one_run_per_cell_is_inconclusive_never_decided(tmp_path: Path, no_reference) -> None:
    folders = _emulated(tmp_path, {1: 80.0, 3: 100.0, 6: 105.0}, {1: 100.0, 3: 300.0, 6: 590.0},
                        runs=1)
    t = C.claims_table(tmp_path, folders)
    tested = t[t["runs"] > 0]
    assert len(tested) and set(tested["verdict"]) == {"inconclusive"}
    assert tested["reason"].str.startswith("inconclusive: 1 runs (needs 5)").all()


def test_only_folders_the_params_name_are_read(tmp_path: Path) -> None:
    _emulated(tmp_path, {1: 80.0, 3: 100.0, 6: 105.0}, {1: 100.0, 3: 300.0, 6: 590.0})
    t = C.claims_table(tmp_path, {})
    # only the chapters the committed reference stands in for (claims.base.Records.fallback)
    fallback = {"07_frameworks", "08_convergence", "09_batch_size", "10_faults", "11_beyond"}
    assert set(t.loc[t["runs"] > 0, "chapter"]) <= fallback
    assert _rows(t, "shi_ps_levels_off")["verdict"].eq("not measured").all()



@pytest.mark.parametrize(("horovod", "tf", "want"), [
    (117.0, 100.0, "agrees"), (100.0, 100.0, "differs"), (300.0, 100.0, "differs")])
def test_wang_compares_horovod_with_tf_mirrored_at_2_workers(tmp_path: Path, no_reference,
                                                             horovod, tf, want) -> None:
    rows = _cells({("horovod", 2): horovod, ("tf_allreduce", 2): tf, ("tf_ps_sync", 2): 1.0,
                   ("horovod", 6): 999.0}, profile="IB-EDR")
    _write(tmp_path, "07_frameworks", rows)
    (row,) = _rows(C.claims_table(tmp_path, {"07_frameworks": ["07_frameworks"]}),
                   "wang_horovod_17pct").to_dict("records")
    assert row["verdict"] == want and "at 2 workers" in row["quantity"]
    assert "tf_ps_sync" not in row["quantity"]


def test_wang_without_tf_mirrored_is_not_measured_and_says_so(tmp_path: Path,
                                                              no_reference) -> None:
    _write(tmp_path, "07_frameworks", _cells({("horovod", 2): 117.0, ("tf_ps_sync", 2): 100.0},
                                             profile="IB-EDR"))
    (row,) = _rows(C.claims_table(tmp_path, {"07_frameworks": ["07_frameworks"]}),
                   "wang_horovod_17pct").to_dict("records")
    assert row["verdict"] == "not measured" and "tf_allreduce" in row["reason"]


@pytest.mark.parametrize(("eff6", "ib", "ge"), [(0.88, "agrees", "differs"),
                                                (0.17, "differs", "differs"),
                                                (0.65, "differs", "agrees")])
def test_wang_efficiencies_are_magnitudes(tmp_path: Path, eff6, ib, ge) -> None:
    rows = (_cells({("allreduce", 1): 100.0, ("allreduce", 6): 600 * eff6}, profile="IB-EDR")
            + _cells({("allreduce", 1): 100.0, ("allreduce", 6): 600 * eff6}, profile="10GbE"))
    _write(tmp_path, "05_network_profiles", rows)
    t = C.claims_table(tmp_path, {"05_network_profiles": ["05_network_profiles"]})
    ch05 = t[t["chapter"] == "05_network_profiles"]  # chapter 03's testbed rows: not run here
    assert _rows(ch05, "wang_ib_89pct")["verdict"].tolist() == [ib]
    assert _rows(ch05, "wang_10gbe_65pct")["verdict"].tolist() == [ge]


def test_malik_linear_reads_the_papers_network_only(tmp_path: Path, no_reference) -> None:
    rows = (_cells({("horovod", 1): 100.0, ("horovod", 4): 390.0}, profile="IB-EDR")
            + _cells({("horovod", 1): 100.0, ("horovod", 4): 100.0}, profile="10GbE"))
    _write(tmp_path, "07_frameworks", rows)
    t = C.claims_table(tmp_path, {"07_frameworks": ["07_frameworks"]})
    (row,) = _rows(t, "malik_horovod_linear_resnet50").to_dict("records")
    assert row["verdict"] == "agrees" and "IB-EDR" in row["quantity"]
    assert _rows(t, "malik_horovod_linear_alexnet")["verdict"].tolist() == ["not measured"]


def test_claims_fall_back_to_the_reference_run_labelled(tmp_path: Path, no_reference) -> None:
    from ddlstudy.records import store as records

    for (strategy, workers), rate in {("horovod", 1): 100.0, ("horovod", 2): 198.0}.items():
        for r in range(RUNS):
            cell = no_reference / "07_frameworks" / "runs" / "IB-EDR" / f"{strategy}-x{workers}-{r}"
            row = {"strategy": strategy, "model": "resnet50", "workers": workers, "repeat": r,
                   "network": "IB-EDR", "images_per_sec": rate * (1 + 0.01 * ((r + workers) % 3)),
                   "error": ""}
            records.write_table(pd.DataFrame([row]), cell, "summary")
            records.write_meta(cell, row, status="ok", git_sha="c0ffee1")  # committed code
    (row,) = _rows(C.claims_table(tmp_path, {}), "malik_horovod_linear_resnet50").to_dict(
        "records")
    assert row["verdict"] == "agrees" and row["source"].startswith("reference run: ")


def test_claims_csv_columns_and_paper_counts(tmp_path: Path) -> None:
    t = C.claims_table(tmp_path, {})
    assert list(t.columns[:19]) == ["paper", "claim_id", "claim", "quote", "location",
                                    "conditions", "quantity", "value", "ci_low", "ci_high",
                                    "no_effect", "margin_low", "margin_high", "runs", "method",
                                    "testbed", "source", "verdict", "reason"]
    counts = C.paper_counts(t)
    assert list(counts["paper"]) == C.PAPERS
    assert (counts["found"] == counts["agreed"] + counts["differed"] + counts["mixed"]
            + counts["undecided"]).all()


def _claims(verdicts: list[str], quantity: str = "ring / PS at 4 workers: {i}") -> pd.DataFrame:
    return pd.DataFrame([{"paper": "Shi 2019", "chapter": "03_ps_vs_ring", "source": "measured",
                          "quantity": quantity.format(i=i), "verdict": v}
                         for i, v in enumerate(verdicts)])


def test_compare_names_only_decided_verdicts_that_disagree(tmp_path: Path, capsys) -> None:
    a = _claims(["agrees", "differs", "inconclusive", "agrees", "not measured"])
    b = _claims(["agrees", "agrees", "differs", "inconclusive", "agrees"])
    table = C.compare(a, b)
    assert list(table["status"]) == ["same", "CONFLICT", "undecided in one", "undecided in one",
                                     "undecided in one"]
    for name, df in (("a", a), ("b", b)):
        (tmp_path / name / "99_conclusions").mkdir(parents=True)
        df.to_csv(tmp_path / name / "99_conclusions" / "claims.csv", index=False)
    assert C.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert "1 conflicting: Shi 2019: ring / PS at 4 workers: 1" in out
    assert C.main(["compare", str(tmp_path / "a"), str(tmp_path / "a")]) == 0


def test_compare_masks_measured_numbers_in_the_key_and_rejects_bad_input(tmp_path: Path,
                                                                          capsys) -> None:
    a = _claims(["agrees"], quantity="projected: IB 98%, 10GbE 36%")
    b = _claims(["differs"], quantity="projected: IB 91%, 10GbE 70%")
    assert list(C.compare(a, b)["status"]) == ["CONFLICT"]
    assert C.main(["compare", str(tmp_path / "nope"), str(tmp_path)]) == 2
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    assert C.main(["compare", str(tmp_path / "x.csv"), str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 2 and "Traceback" not in err
