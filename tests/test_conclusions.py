"""Chapter 99's verdicts follow the records: synthetic records drive every branch of every claim
(agrees, differs, inconclusive, not measured, NaN), and no verdict outruns its interval."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.claims import engine as C
from ddlstudy.config.params import CHAPTERS

MODELS = ["small", "big"]
FOLDERS = C.chapter_folders([*CHAPTERS, "06_projection"], MODELS)


def _write(run: Path, folder: str, name: str, rows: list[dict]) -> None:
    (run / folder).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(run / folder / f"{name}.csv", index=False)


def _grid(ips: dict[tuple[str, int], list[float]], model: str = "small", params: int = 1000,
          comm: float = 0.1, compute: float = 1.0) -> list[dict]:
    """Chapter 03 summary rows: one per (strategy, workers, repeat)."""
    return [{"strategy": s, "model": model, "workers": n, "repeat": r, "images_per_sec": v,
             "params": params, "comm_s": comm * n, "compute_s": compute, "error": ""}
            for (s, n), vals in ips.items() for r, v in enumerate(vals)]


def _table(run: Path) -> pd.DataFrame:
    table = C.claims_table(run, FOLDERS)
    _check_intervals(table)
    return table


def _check_intervals(table: pd.DataFrame) -> None:
    """Every agrees/differs row has an interval that excludes its no-effect value."""
    decided = table[table["verdict"].isin(["agrees", "differs"])]
    for r in decided.itertuples():
        assert math.isfinite(r.ci_low) and math.isfinite(r.ci_high), r
        assert not (r.ci_low <= r.no_effect <= r.ci_high), r
    assert set(table["verdict"]) <= {"agrees", "differs", "inconclusive", "not measured"}
    assert table["reason"].astype(str).str.len().gt(0).all()


def _verdict(table: pd.DataFrame, paper: str, contains: str = "") -> str:
    rows = table[(table["paper"] == paper) & table["quantity"].str.contains(contains,
                                                                            regex=False)]
    assert len(rows) == 1, rows
    return rows["verdict"].iloc[0]


SCALING = {  # ring speed-up / PS speed-up at 4 workers
    "agrees": {("ps_sync", 1): [10, 10.5, 9.5], ("ps_sync", 4): [12, 12.5, 11.5],
               ("allreduce", 1): [10, 10.5, 9.5], ("allreduce", 4): [30, 31, 29]},
    "differs": {("ps_sync", 1): [10, 10.5, 9.5], ("ps_sync", 4): [30, 31, 29],
                ("allreduce", 1): [10, 10.5, 9.5], ("allreduce", 4): [12, 12.5, 11.5]},
    "inconclusive": {("ps_sync", 1): [10, 10, 10], ("ps_sync", 4): [20, 35, 25],
                     ("allreduce", 1): [10, 10, 10], ("allreduce", 4): [30, 18, 26]},
    "not measured": {("ps_sync", 1): [math.nan] * 3, ("ps_sync", 4): [math.nan] * 3,
                     ("allreduce", 1): [math.nan] * 3, ("allreduce", 4): [math.nan] * 3},
}


@pytest.mark.parametrize("expected", list(SCALING))
def test_shi_scaling_follows_the_repeats(tmp_path: Path, expected: str) -> None:
    _write(tmp_path, "03_ps_vs_ring-small", "summary", _grid(SCALING[expected]))
    table = _table(tmp_path)
    assert _verdict(table, "Shi 2019", "ring speed-up / PS speed-up") == expected
    # Pani: one worker fastest? Speed-up 3 (agrees case) is above 1: the paper's claim differs.
    pani = _verdict(table, "Pani", "small: ring speed-up")
    assert pani == {"agrees": "differs", "differs": "differs", "inconclusive": "differs",
                    "not measured": "not measured"}[expected]


def test_single_repeat_is_not_measured(tmp_path: Path) -> None:
    one = {k: v[:1] for k, v in SCALING["agrees"].items()}
    _write(tmp_path, "03_ps_vs_ring-small", "summary", _grid(one))
    row = _table(tmp_path).query("paper == 'Shi 2019'").iloc[0]
    assert row["verdict"] == "not measured" and "1 repeat" in row["reason"]


def test_missing_records_say_not_measured_and_name_the_chapter(tmp_path: Path) -> None:
    table = _table(tmp_path)
    assert (table["verdict"] == "not measured").all()
    measured_by = table[table["chapter"] != "not measured yet"]
    for r in measured_by.itertuples():
        assert r.chapter in r.reason or "06_projection" in r.reason, r


def test_only_folders_the_params_name_are_read(tmp_path: Path) -> None:
    _write(tmp_path, "03_ps_vs_ring-old", "summary", _grid(SCALING["agrees"], model="old"))
    table = _table(tmp_path)
    assert _verdict(table, "Shi 2019", "ring speed-up / PS") == "not measured"


def _traffic(ring_growth: float, ps_growth: float, noise: float = 0.0) -> list[dict]:
    rows = []
    for r in range(3):
        jitter = 1 + noise * (r - 1)
        for n, k in ((2, 1.0), (4, 1.0)):
            ps_bytes = 4000 * (ps_growth if n == 4 else 1.0) * (jitter if n == 4 else 1)
            ring_bytes = 4000 * (ring_growth if n == 4 else 1.0) * (1 / jitter if n == 4 else 1)
            rows.append({"strategy": "ps_sync", "workers": n, "repeat": r, "params": 1000,
                         "server_bytes_recv_per_step": ps_bytes * k,
                         "bytes_sent_per_step": 4000.0})
            rows.append({"strategy": "allreduce", "workers": n, "repeat": r, "params": 1000,
                         "server_bytes_recv_per_step": math.nan,
                         "bytes_sent_per_step": ring_bytes})
    return rows


@pytest.mark.parametrize(("ring", "ps", "noise", "expected"), [
    (1.5, 2.0, 0.0, "agrees"),        # ring 2(N-1)/N: 1.0x -> 1.5x the model; PS 2x
    (1.9, 2.0, 0.0, "agrees"),        # still grows slower than the PS ... the number is shown
    (3.0, 1.5, 0.0, "differs"),       # ring per-node traffic grows faster than the server's
    (1.8, 2.0, 0.3, "inconclusive"),  # spread across repeats covers 1
])
def test_shi_traffic_compares_growths(tmp_path: Path, ring: float, ps: float, noise: float,
                                      expected: str) -> None:
    _write(tmp_path, "04_utilization_traffic", "summary", _traffic(ring, ps, noise))
    table = _table(tmp_path)
    assert _verdict(table, "Shi 2019", "growth of each ring worker") == expected
    assert _verdict(table, "Shi 2019", "slope of PS server") == (
        "agrees" if noise == 0 else _verdict(table, "Shi 2019", "slope of PS server"))
    reason = table[table["quantity"].str.contains("growth of each ring")]["reason"].iloc[0]
    assert f"{ring / ps:.3g}" in reason  # the reason carries this run's number


def test_shi_traffic_one_worker_count_is_not_measured(tmp_path: Path) -> None:
    rows = [r for r in _traffic(1.5, 2.0) if r["workers"] == 2]
    _write(tmp_path, "04_utilization_traffic", "summary", rows)
    assert _verdict(_table(tmp_path), "Shi 2019", "slope") == "not measured"


def _bench(ring: list[float], tree: list[float]) -> list[dict]:
    return [{"algorithm": a, "ranks": 4, "size_bytes": 1 << 20, "repeat": r, "time_p50_s": t,
             "error": ""} for a, ts in (("ring", ring), ("tree", tree)) for r, t in enumerate(ts)]


@pytest.mark.parametrize(("ring", "tree", "expected"), [
    ([1.0, 1.1, 0.9], [2.0, 2.1, 1.9], "agrees"),
    ([2.0, 2.1, 1.9], [1.0, 1.1, 0.9], "differs"),
    ([1.0, 2.0, 1.5], [1.5, 1.0, 2.0], "inconclusive"),
    ([math.nan] * 3, [1.0, 1.1, 0.9], "not measured"),
])
def test_fourie_ring_vs_tree(tmp_path: Path, ring, tree, expected: str) -> None:
    _write(tmp_path, "02_collectives", "collectives", _bench(ring, tree))
    assert _verdict(_table(tmp_path), "Fourie 2019", "ranks") == expected


@pytest.mark.parametrize(("err", "identical", "expected"), [
    (1e-7, True, "differs"), (0.2, False, "agrees"), (math.nan, True, "not measured")])
def test_fourie_bracketing_reason_follows_the_records(tmp_path: Path, err: float,
                                                      identical: bool, expected: str) -> None:
    rows = [{"algorithm": a, "trial": t, "max_rel_err": err * (1 + 0.1 * t),
             "ranks_identical": identical} for a in ("ring", "tree") for t in range(3)]
    _write(tmp_path, "00_background", "bracketing_drift", rows)
    row = _table(tmp_path).query("paper == 'Fourie 2019' and chapter == '00_background'").iloc[0]
    assert row["verdict"] == expected
    if expected != "not measured":
        assert f"bit-identical in every trial: {identical}" in row["reason"]


@pytest.mark.parametrize(("top", "expected"), [(3.9, "agrees"), (1.2, "differs"),
                                               (None, "not measured")])
def test_malik_horovod_scaling_reads_the_horovod_strategy(tmp_path: Path, top, expected) -> None:
    ips = {("allreduce", 1): [10, 10, 10], ("allreduce", 4): [30, 30, 30]}
    if top is not None:  # chapter 07's records; "almost linear": efficiency above 0.9
        ips |= {("horovod", 1): [10, 10.2, 9.8], ("horovod", 4): [top * 10, top * 10.2,
                                                                   top * 9.8]}
    _write(tmp_path, "07_frameworks", "summary", _grid(ips))
    assert _verdict(_table(tmp_path), "Malik 2018", "Horovod scaling") == expected


@pytest.mark.parametrize(("light_top", "heavy_top", "expected"), [
    (30, 12, "agrees"), (12, 30, "differs"), (20, 20, "inconclusive")])
def test_malik_ps_bottleneck_and_pani_ratio(tmp_path: Path, light_top, heavy_top,
                                            expected) -> None:
    noise = [1.0, 1.02, 0.98] if expected != "inconclusive" else [1.0, 1.3, 0.7]
    for model, params, top, compute in (("small", 1000, light_top, 0.5),
                                        ("big", 9000, heavy_top, 2.0)):
        ips = {("ps_sync", 1): [10.0] * 3, ("ps_sync", 4): [top * k for k in noise],
               ("allreduce", 1): [10.0] * 3, ("allreduce", 4): [20.0 * k for k in noise]}
        _write(tmp_path, f"03_ps_vs_ring-{model}", "summary",
               _grid(ips, model=model, params=params, compute=compute))
    table = _table(tmp_path)
    assert _verdict(table, "Malik 2018", "PS speed-up") == expected
    # comm_s is equal, compute_s 4x smaller for "small": its comm/compute ratio is higher
    assert _verdict(table, "Pani", "comm/compute") == "agrees"


@pytest.mark.parametrize(("hv", "tf", "expected"), [
    (12.0, 10.0, "agrees"), (8.0, 10.0, "differs"), (None, 10.0, "not measured")])
def test_wang_horovod_vs_distributed_tf(tmp_path: Path, hv, tf, expected) -> None:
    ips = {("tf_ps_sync", 2): [tf, tf * 1.01, tf * 0.99]}
    if hv is not None:
        ips[("horovod", 2)] = [hv, hv * 1.01, hv * 0.99]
    _write(tmp_path, "07_frameworks", "summary", _grid(ips))  # chapter 07's records
    assert _verdict(_table(tmp_path), "Wang (NCHC)", "images/sec") == expected


def test_wang_netpipe_rises_with_size(tmp_path: Path) -> None:
    rows = [{"peer": p, "repeat": r, "size_bytes": s, "bandwidth_gbps": bw * (1 + 0.01 * r)}
            for p in (1, 2) for r in range(2) for s, bw in ((8, 0.01), (1 << 20, 2.0))]
    _write(tmp_path, "01_cluster_setup", "p2p", rows)
    assert _verdict(_table(tmp_path), "Wang (NCHC)", "point-to-point") == "agrees"
    flat = [dict(r, bandwidth_gbps=1.0 + 0.2 * r["repeat"] * (r["peer"] - 1.5)) for r in rows]
    _write(tmp_path, "01_cluster_setup", "p2p", flat)
    assert _verdict(_table(tmp_path), "Wang (NCHC)", "point-to-point") == "inconclusive"


@pytest.mark.parametrize(("ib", "ge", "expected"), [(0.9, 0.6, "agrees"), (0.6, 0.9, "differs"),
                                                    (0.8, 0.78, "inconclusive")])
def test_wang_emulated_profiles(tmp_path: Path, ib, ge, expected) -> None:
    noise = 0.1 if expected == "inconclusive" else 0.01  # opposite drift in the two arms
    rows = [{"profile": prof, "workers": n, "repeat": r, "error": "",
             "images_per_sec": 10.0 if n == 1 else 10.0 * 4 * eff * (1 + sign * noise * (r - 1))}
            for prof, eff, sign in (("IB-EDR", ib, 1), ("10GbE", ge, -1)) for n in (1, 4)
            for r in range(3)]
    _write(tmp_path, "05_network_profiles", "summary", rows)
    row = _table(tmp_path).query("chapter == '05_network_profiles'").iloc[0]
    assert row["verdict"] == expected and row["source"].startswith("emulated")


@pytest.mark.parametrize(("err", "expected"), [(0.05, "agrees"), (0.3, "inconclusive")])
def test_wang_projection_contract(tmp_path: Path, err: float, expected: str) -> None:
    rows = [{"profile": p, "workers": 64, "efficiency": e, "source": "model",
             "validation_error": err, "n_cells": 12} for p, e in (("IB-EDR", 0.89),
                                                                  ("10GbE", 0.65))]
    _write(tmp_path, "06_projection", "scaling_efficiency", rows)
    row = _table(tmp_path).query("chapter == '06_projection'").iloc[0]
    assert row["verdict"] == expected
    assert row["source"] == f"projected (model validated to {err:.0%} on 12 cells)"


def test_claims_cover_the_five_papers_and_write_every_column(tmp_path: Path) -> None:
    table = _table(tmp_path)
    assert set(table["paper"]) == {"Shi 2019", "Fourie 2019", "Malik 2018", "Pani",
                                   "Wang (NCHC)"}
    assert list(table.columns) == C.COLUMNS
    assert not table["claim"].str.contains("grows with workers").any()
    assert table["claim"].str.contains("17%").any() and table["claim"].str.contains("7-10%").any()


def _shi_rows(table: pd.DataFrame) -> pd.DataFrame:
    return table[(table["paper"] == "Shi 2019")
                 & table["quantity"].str.contains("ring speed-up / PS", regex=False)]


def test_shi_scaling_reads_the_emulated_section_with_its_label(tmp_path: Path) -> None:
    folders = C.chapter_folders(["03_ps_vs_ring", "99_conclusions"], ["small"], ["small"])
    _write(tmp_path, "03_ps_vs_ring-small", "summary", _grid(SCALING["inconclusive"]))
    _write(tmp_path, f"{C.EMULATED_03}-small", "summary", _grid(SCALING["agrees"]))
    rows = _shi_rows(C.claims_table(tmp_path, folders)).set_index("chapter")
    assert rows.loc["03_ps_vs_ring", "verdict"] == "inconclusive"
    assert rows.loc["03_ps_vs_ring", "source"].startswith("measured on one host")
    assert rows.loc[C.EMULATED_03, "verdict"] == "agrees"
    assert rows.loc[C.EMULATED_03, "source"].startswith("emulated")


def test_cpu_bound_cells_draw_no_verdict(tmp_path: Path) -> None:
    folders = C.chapter_folders(["03_ps_vs_ring"], ["small"], ["small"])
    cells = _grid(SCALING["agrees"])
    for c in cells:  # the host, not the shaped link, paced every 4-worker cell
        c["cpu_bound"] = c["workers"] == 4
    _write(tmp_path, f"{C.EMULATED_03}-small", "summary", cells)
    rows = _shi_rows(C.claims_table(tmp_path, folders)).set_index("chapter")
    assert rows.loc[C.EMULATED_03, "verdict"] == "not measured"


CHUNKED = {  # emulated cells run once: per cell, the images/sec of its timed chunks
    "agrees": {("ps_sync", 1): [10, 10.2], ("ps_sync", 4): [12, 12.3],
               ("allreduce", 1): [10, 10.1], ("allreduce", 4): [30, 31]},
    "differs": {("ps_sync", 1): [10, 10.2], ("ps_sync", 4): [30, 31],
                ("allreduce", 1): [10, 10.1], ("allreduce", 4): [12, 12.3]},
    "inconclusive": {("ps_sync", 1): [10, 10], ("ps_sync", 4): [15, 35],
                     ("allreduce", 1): [10, 10], ("allreduce", 4): [18, 30]},
}


def _chunked(run: Path, folder: str, cells: dict[tuple[str, int], list[float]],
             model: str = "small", params: int = 1000, network: str = "10GbE",
             cpu_bound: bool = False, sub: str = "") -> list[dict]:
    """One run per cell: runs/<sub>/<cell>/summary.csv + chunks.csv; the chapter summary rows."""
    rows = []
    for (strategy, n), rates in cells.items():
        cell = run / folder / "runs" / sub / f"{strategy}_{model}_x{n}"
        row = {"strategy": strategy, "model": model, "workers": n, "network": network,
               "images_per_sec": float(pd.Series(rates).median()), "params": params,
               "time_dilation": 1.0, "cpu_bound": cpu_bound, "error": "", "repeat": 0}
        _write(cell.parent, cell.name, "summary", [row])
        _write(cell.parent, cell.name, "chunks", [
            {"chunk": k, "steps": 1, "wall_s": 1.0, "images": v, "images_per_sec": v}
            for k, v in enumerate(rates)])
        rows.append(row)
    return rows


@pytest.mark.parametrize("expected", list(CHUNKED))
def test_emulated_cells_run_once_use_their_timed_chunks(tmp_path: Path, expected: str) -> None:
    folders = C.chapter_folders(["03_ps_vs_ring"], ["small"], ["small"])
    folder = f"{C.EMULATED_03}-small"
    _write(tmp_path, folder, "summary", _chunked(tmp_path, folder, CHUNKED[expected]))
    table = C.claims_table(tmp_path, folders)
    _check_intervals(table)
    row = _shi_rows(table).set_index("chapter").loc[C.EMULATED_03]
    assert row["verdict"] == expected
    assert row["repeats"] == 2 and row["interval"].endswith("over timed chunks")
    assert "not independent runs" in row["reason"]


def test_chunks_of_cpu_bound_cells_draw_no_verdict(tmp_path: Path) -> None:
    folders = C.chapter_folders(["03_ps_vs_ring"], ["small"], ["small"])
    folder = f"{C.EMULATED_03}-small"
    rows = _chunked(tmp_path, folder, CHUNKED["agrees"], cpu_bound=True)
    _write(tmp_path, folder, "summary", rows)
    row = _shi_rows(C.claims_table(tmp_path, folders)).set_index("chapter").loc[C.EMULATED_03]
    assert row["verdict"] == "not measured"


@pytest.mark.parametrize("light_top, expected", [(30, "agrees"), (12, "differs")])
def test_malik_ps_bottleneck_from_emulated_chunks(tmp_path: Path, light_top: float,
                                                  expected: str) -> None:
    folders = C.chapter_folders(["03_ps_vs_ring"], [], ["light", "heavy"])
    heavy_cells = {("ps_sync", 1): [10, 10.2], ("ps_sync", 4): [20, 20.5]}
    light_cells = {("ps_sync", 1): [10, 10.1], ("ps_sync", 4): [light_top, light_top + 0.5]}
    for model, cells, params in (("light", light_cells, 10), ("heavy", heavy_cells, 100)):
        folder = f"{C.EMULATED_03}-{model}"
        _write(tmp_path, folder, "summary",
               _chunked(tmp_path, folder, cells, model=model, params=params))
    table = C.claims_table(tmp_path, folders)
    _check_intervals(table)
    row = table[(table["paper"] == "Malik 2018") & (table["chapter"] == C.EMULATED_03)].iloc[0]
    assert row["verdict"] == expected and row["source"].startswith("emulated")
    assert "light" in row["quantity"] and row["interval"].endswith("over timed chunks")


@pytest.mark.parametrize("ib_top, expected", [(38, "agrees"), (20, "differs")])
def test_wang_emulated_profiles_from_chunks(tmp_path: Path, ib_top: float, expected: str) -> None:
    folders = C.chapter_folders(["05_network_profiles"], [])
    ch = "05_network_profiles"
    rows = []
    for prof, top in (("IB-EDR", ib_top), ("10GbE", 30)):
        cells = {("allreduce", 1): [10, 10.1], ("allreduce", 4): [top, top + 0.4]}
        rows += [dict(r, profile=prof) for r in
                 _chunked(tmp_path, ch, cells, network=prof, sub=prof)]
    _write(tmp_path, ch, "summary", rows)
    table = C.claims_table(tmp_path, folders)
    _check_intervals(table)
    row = table[(table["paper"] == "Wang (NCHC)") & (table["chapter"] == ch)].iloc[0]
    assert row["verdict"] == expected and row["interval"].endswith("over timed chunks")


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
