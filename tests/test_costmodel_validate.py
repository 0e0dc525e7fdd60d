"""`python -m ddlstudy.costmodel validate results/reference` ends with the three median lines
(held out by configuration, published points, settings alone) of issue 21, item 7."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ddlstudy.analysis import costmodel as M

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"
LINES = [r"median relative error \(held out by configuration\): (\d+\.\d\d|nan)",
         r"median relative error \(published, (\d+) points, (\d+) sources\): (\d+\.\d\d|nan)",
         r"median relative error \(settings alone, no fit\): (\d+\.\d\d|nan)"]


def test_validate_ends_with_the_three_lines_on_the_reference(capsys):
    assert M.main(["validate", str(REFERENCE)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    for line, pattern in zip(out[-3:], LINES, strict=True):
        assert re.fullmatch(pattern, line), line
    n, s = map(int, re.fullmatch(LINES[1], out[-2]).groups()[:2])
    assert n >= 8 and s >= 3
    # each published point printed with its source above the lines
    assert any("wang_nchc_resnet50_64gpu_10gbe" in line and "Wang (NCHC)" in line for line in out)
    assert any(line.startswith("#   held out: other network") for line in out)


def test_held_out_fit_uses_only_the_fit_configuration():
    cells = M.read_cells([REFERENCE])
    table, _, what = M.held_out_by_configuration(cells)
    fit = table[table["role"] == "fit"]
    assert "10GbE" in what and set(fit["network"]) == {"10GbE"}
    assert set(fit["strategy"]) == {"allreduce"}
    assert set(fit["model"].str.replace(r"\d+", "", regex=True)) == {"resnet"}
    assert {"other network", "other strategy", "other family"} <= set(table["role"])


def test_published_points_each_name_their_source_and_settings():
    table = M.predict_published()
    done = table[table["predicted"].notna()]
    assert len(done) >= 8 and done["source"].nunique() >= 3
    assert (done["settings"].str.len() > 0).all()
    skipped = table[table["predicted"].isna()]
    assert (skipped["skipped"].str.len() > 0).all()
    assert isinstance(table, pd.DataFrame)


def test_cells_of_several_engines_per_node_are_held_out_and_predicted_with_tiers():
    """A hierarchical cell of 8 engines per node is predicted with its two tiers (loopback
    inside the node: no wire time; the node's shaped link across nodes), and is held out
    ('other gpus_per_node'), never in the fit, even on the fit's network and strategy."""
    cells = M.read_cells([REFERENCE])
    ring = cells[(cells["network"] == "10GbE") & (cells["strategy"] == "allreduce")
                 & (cells["model"] == "resnet50")].iloc[0]
    wang = ring.copy()
    wang["workers"], wang["gpus_per_node"], wang["algorithm"] = 16, 8, "hierarchical"
    wang["wall_s"] = 123.0
    both = pd.concat([cells, wang.to_frame().T], ignore_index=True)
    both = both.astype({c: cells[c].dtype for c in cells.columns if c in ("workers", "wall_s")})
    table, _, _ = M.held_out_by_configuration(both)
    row = table[(table["workers"] == 16)].iloc[0]
    assert row["role"] == "other gpus_per_node"
    # two nodes: the NIC carries 2(m-1)/m = 1 model each way; a flat 16-node ring would carry
    # 2 x 15/16 of it, and one node none
    hier = M._cell_step(both.iloc[-1], M.SETTINGS_ALONE)
    one_per_node = both.iloc[-1].copy()
    one_per_node["gpus_per_node"] = 1
    flat = M._cell_step(one_per_node, M.SETTINGS_ALONE)
    assert 0 < hier.wire_s < flat.wire_s


def test_validate_reports_the_fair_ps_cells_it_finds(tmp_path, capsys):
    """Cells of ps_overlap / ps_colocated are validated by name: count, settings-alone and
    held-out errors per strategy (here a ring cell's record relabelled, two workers, S = 1)."""
    shi = REFERENCE / "03_ps_vs_ring-testbed-shi2019-resnet50" / "summary.csv"
    rows = pd.read_csv(shi)
    rows = rows[rows["strategy"].isin(["allreduce", "ps_sync"])]  # the measured fair PS out
    fake = rows[(rows["strategy"] == "allreduce") & (rows["workers"] == 3)].copy()
    fake["strategy"], fake["servers"] = "ps_overlap", 1
    rows = pd.concat([rows, fake], ignore_index=True)
    (tmp_path / "cells").mkdir()
    rows.to_csv(tmp_path / "cells" / "summary.csv", index=False)
    assert M.main(["validate", str(tmp_path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("# fair PS"))
    assert re.search(r"validated on 1 emulated cells, .*held out \d\.\d\d; ps_overlap 1 cells "
                     r"\d\.\d{3} \(held out \d\.\d\d\)", line), line
