"""The regime map (issue 21, item 8): analytic grid, testbeds as points, measured cells as
markers, the papers' words at the claims' margins."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd

from ddlstudy.analysis import costmodel as M
from ddlstudy.analysis import plots

MIB = 2**20
SIZES = (40 * MIB, 40 * MIB, 20 * MIB)


def _map() -> M.RegimeMap:
    return M.regime_map("resnet50", sizes=SIZES, compute_s=np.geomspace(1e-3, 10, 8),
                        bandwidth_bps=np.geomspace(1e8, 1e12, 8))


def test_regime_map_grid_is_monotone_in_bandwidth_and_compute():
    rm = _map()
    grid = rm.grid.pivot_table(index="bandwidth_bps", columns="compute_s",
                               values="ring_efficiency").to_numpy()
    assert ((grid > 0) & (grid <= 1 + 1e-9)).all()
    assert (np.diff(grid, axis=0) >= -1e-9).all() and (np.diff(grid, axis=1) >= -1e-9).all()
    assert grid.min() < 0.8 < grid.max()  # the words' lines cross this grid
    assert set(rm.points["kind"]) == {"testbed"} and len(rm.points) >= 3
    assert {"kind", "name", "compute_s", "bandwidth_bps"} <= set(rm.table().columns)


def test_regime_map_figure_has_labelled_axes_and_a_legend():
    rm = _map()
    cells = pd.DataFrame([{"kind": "cell", "name": "measured 10GbE", "compute_s": 0.03,
                           "bandwidth_bps": 1e10, "efficiency": 0.2, "note": "emulated"}])
    fig = plots.regime_map(rm.grid, pd.concat([rm.points, cells], ignore_index=True), rm.words)
    ax = fig.axes[0]
    assert "compute" in ax.get_xlabel() and "bandwidth" in ax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("roughly proportional" in t for t in labels)
    assert any("almost linear" in t for t in labels)
    assert any("PS" in t for t in labels) and any("measured" in t for t in labels)
    matplotlib.pyplot.close(fig)


def test_words_are_the_claims_margins():
    from ddlstudy.claims import malik2018, shi2019

    shi = {c.id: c for c in shi2019.CLAIMS}["shi_ring_proportional"]
    malik = [c for c in malik2018.CLAIMS if c.id.startswith("malik_horovod_linear")]
    assert M.WORDS["roughly proportional (Shi 2019)"] == shi.margin_low
    assert malik and all(M.WORDS["almost linear (Malik 2018)"] == c.margin_low for c in malik)


def test_regime_map_cli_writes_figure_and_csv(tmp_path, monkeypatch):
    from ddlstudy.analysis.costmodel import step

    monkeypatch.setattr(step, "gradient_bytes", lambda model, shape="cifar": SIZES)
    assert M.main(["regime-map", "--model", "resnet50", "--out", str(tmp_path),
                   "--reference", str(tmp_path / "none")]) == 0
    assert (tmp_path / "regime_map_resnet50.png").exists()
    table = pd.read_csv(tmp_path / "regime_map_resnet50.csv")
    assert {"grid", "testbed"} <= set(table["kind"])


def test_regime_map_shows_every_testbed_labelled_analytic():
    """Every testbed of the registry is a point, each labelled projected (analytic); one with no
    step time for the model (Fourie 2019, Pani) is drawn at the edge at its rate, and the
    one-node testbed (Pani) at its intra-node rate."""
    from ddlstudy.testbeds import catalog

    rm = _map()
    pts = rm.points.set_index("name")
    assert set(pts.index) == set(catalog.names())
    assert (pts["label"] == M.TESTBED_LABEL).all() and "analytic" in M.TESTBED_LABEL
    assert pts["bandwidth_bps"].notna().all()
    assert np.isnan(pts.loc["fourie2019", "compute_s"]) and "rate only" in pts.loc[
        "fourie2019", "note"]
    assert "one node" in pts.loc["pani", "note"]
    assert pts.loc["shi2019", "compute_s"] == catalog.testbed("shi2019").compute[0].step_s
    table = rm.table()
    assert set(table.loc[table["kind"] != "cell", "label"]) == {M.TESTBED_LABEL}
    fig = plots.regime_map(rm.grid, rm.points, rm.words)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert all(any(t.startswith(n) for t in texts) for n in catalog.names())
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sum("analytic" in t for t in labels) >= 2
    matplotlib.pyplot.close(fig)


def test_measured_markers_keep_testbeds_and_multi_gpu_nodes_apart():
    """A testbed's ring cells on the same profile (another replayed device, 8 engines per node)
    neither join the study's own marker nor make one: the map is drawn at 1 GPU per node."""
    from pathlib import Path

    from ddlstudy.analysis.costmodel.regime import _cell_points

    ref = Path(__file__).resolve().parents[1] / "results" / "reference"
    cells = M.read_cells([ref])
    own = _cell_points(cells, "resnet50", 6)
    ring = cells[(cells["network"] == "10GbE") & (cells["strategy"] == "allreduce")
                 & (cells["model"] == "resnet50")]
    extra = ring[ring["workers"].isin([1, 6])].copy()
    extra["replay_source"], extra["gpus_per_node"] = "testbed-wang_nchc_10gbe", 8
    extra["wall_s"] = extra["wall_s"] * 50  # a very different step: would move a mixed median
    more = _cell_points(pd.concat([cells, extra], ignore_index=True), "resnet50", 6)
    pd.testing.assert_frame_equal(own, more)
    assert (own["label"] == "measured (emulated)").all() and len(own) >= 2
