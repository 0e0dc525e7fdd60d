"""Chapter 99's framework claims (Malik 2018: Horovod scales almost linearly; Wang (NCHC):
Horovod ~17 % faster than Distributed TensorFlow) drawn from chapter 07's records: every
verdict branch on synthetic records (no engines), plus the wire-bytes bookkeeping."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.analysis import stats
from ddlstudy.claims import engine as conclusions
from ddlstudy.experiments import frameworks as compare

CH = "07_frameworks"
FOLDERS = {CH: [CH]}


def _write(run: Path, rows: list[dict]) -> None:
    folder = run / CH
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).assign(model="resnet50", error="", cpu_bound=False).to_csv(
        folder / "summary.csv", index=False)


def _cells(strategy: str, workers: int, rates: list[float], profile: str = "10GbE"
           ) -> list[dict]:
    return [{"strategy": strategy, "workers": workers, "repeat": r, "images_per_sec": v,
             "profile": profile, "network": profile} for r, v in enumerate(rates)]


def _verdicts(fn, run: Path) -> list[str]:
    return [row["verdict"] for row in fn(run, FOLDERS)]


@pytest.mark.parametrize(("two_workers", "verdict"), [
    ([196, 197, 195, 198], stats.AGREES),       # efficiency ~0.98, interval above 0.9
    ([120, 118, 122, 121], stats.DIFFERS),      # ~0.6, interval below 0.9
    ([130, 230, 150, 210, 180, 175], stats.INCONCLUSIVE),  # spread across 0.9
])
def test_malik_horovod_branches(tmp_path: Path, two_workers: list[float], verdict: str) -> None:
    ones = [100.0] * len(two_workers)
    _write(tmp_path, _cells("horovod", 1, ones) + _cells("horovod", 2, two_workers))
    rows = conclusions.malik_horovod(tmp_path, FOLDERS)
    assert [r["verdict"] for r in rows] == [verdict], rows
    assert rows[0]["chapter"] == CH and "emulated" in rows[0]["source"]
    assert rows[0]["no_effect"] == compare.NEAR_LINEAR


@pytest.mark.parametrize(("horovod", "tf", "verdict"), [
    ([200, 205, 198, 202], [150, 152, 149, 151], stats.AGREES),
    ([100, 101, 99, 100], [150, 152, 149, 151], stats.DIFFERS),
    ([100, 160, 120, 140], [150, 110, 130, 125], stats.INCONCLUSIVE),
])
def test_wang_horovod_vs_tf_branches(tmp_path: Path, horovod: list[float], tf: list[float],
                                     verdict: str) -> None:
    _write(tmp_path, _cells("horovod", 2, horovod) + _cells("tf_ps_sync", 2, tf)
           + _cells("tf_ps_sync", 1, [90.0] * len(tf)))
    rows = conclusions.wang_horovod_vs_tf(tmp_path, FOLDERS)
    assert [r["verdict"] for r in rows] == [verdict], rows
    assert "tf_ps_sync" in rows[0]["quantity"] and "2 workers" in rows[0]["quantity"]


@pytest.fixture
def ref_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty results/reference/ stand-in, so the committed reference cells stay out."""
    from ddlstudy.records import reference

    root = tmp_path / "reference"
    monkeypatch.setattr(reference, "reference_dir", lambda: root)
    return root


def _reference_cells(root: Path, rates: dict[tuple[str, int], float]) -> None:
    """Cells as `make reference` writes them: runs/<profile>/<cell>/ summary, chunks, meta."""
    from ddlstudy.records import store as records

    for (strategy, workers), rate in rates.items():
        cell = root / CH / "runs" / "10GbE" / f"{strategy}-x{workers}"
        row = {"strategy": strategy, "model": "resnet50", "workers": workers,
               "network": "10GbE", "images_per_sec": rate, "time_dilation": 1.0,
               "cpu_bound": False, "error": ""}
        records.write_table(pd.DataFrame([row]), cell, "summary")
        records.write_table(pd.DataFrame({"chunk": range(4), "images_per_sec": [
            rate * f for f in (0.99, 1.0, 1.01, 1.0)]}), cell, "chunks")
        records.write_meta(cell, row, status="ok")


@pytest.mark.parametrize(("horovod", "verdict"), [(120.0, stats.AGREES),
                                                  (80.0, stats.DIFFERS)])
def test_claims_fall_back_to_the_reference_run(tmp_path: Path, ref_root: Path, horovod: float,
                                               verdict: str) -> None:
    """A run without chapter 07 reads the committed reference cells, labelled as such; a run
    that has the chapter reads its own records only."""
    _reference_cells(ref_root, {("horovod", 1): 50.0, ("horovod", 2): horovod,
                                ("tf_ps_sync", 2): 100.0})
    (row,) = conclusions.wang_horovod_vs_tf(tmp_path, {})
    assert row["verdict"] == verdict and row["source"].startswith("reference run: ")
    assert "emulated (10GbE" in row["source"] and "timed chunks" in row["interval"]
    (row,) = conclusions.malik_horovod(tmp_path, {})  # efficiency horovod/2/50: 1.2 or 0.8
    assert row["verdict"] == verdict and row["source"].startswith("reference run: ")
    assert _verdicts(conclusions.wang_horovod_vs_tf, tmp_path) == [stats.NOT_MEASURED]


def test_claims_not_measured_without_chapter_07(tmp_path: Path, ref_root: Path) -> None:
    assert _verdicts(conclusions.malik_horovod, tmp_path) == [stats.NOT_MEASURED]
    assert _verdicts(conclusions.wang_horovod_vs_tf, tmp_path) == [stats.NOT_MEASURED]
    rows = conclusions.wang_horovod_vs_tf(tmp_path, {})
    assert "not in this run's report.chapters" in rows[0]["reason"]
    # horovod at one worker count only, and no TF: both still not measured, reasons say why
    _write(tmp_path, _cells("horovod", 2, [100, 101]))
    assert _verdicts(conclusions.malik_horovod, tmp_path) == [stats.NOT_MEASURED]
    assert "tf_ps_sync" in conclusions.wang_horovod_vs_tf(tmp_path, FOLDERS)[0]["reason"]


def test_single_runs_use_timed_chunks(tmp_path: Path) -> None:
    """One run per cell (repeats: 1): the interval comes from each run's timed chunks and says
    so; a loopback profile is labelled as measured on one host."""
    rows = _cells("horovod", 1, [100.0], "none") + _cells("horovod", 2, [190.0], "none")
    _write(tmp_path, rows)
    for row in rows:
        cell = tmp_path / CH / "runs" / "none" / f"horovod-x{row['workers']}"
        cell.mkdir(parents=True)
        pd.DataFrame([{**row, "time_dilation": 1.0, "error": ""}]).to_csv(
            cell / "summary.csv", index=False)
        rate = row["images_per_sec"]
        pd.DataFrame({"chunk": range(6), "images_per_sec": [rate * f for f in
                                                            (0.99, 1.0, 1.01, 1.0, 0.995,
                                                             1.005)]}).to_csv(
            cell / "chunks.csv", index=False)
    (row,) = conclusions.malik_horovod(tmp_path, FOLDERS)
    assert row["verdict"] == stats.AGREES and "timed chunks" in row["interval"]
    assert "loopback" in row["source"]


def test_wire_bytes_apply(tmp_path: Path) -> None:
    """Counted per-node bytes replace an analytic figure and are labelled; nothing changes
    where nothing was counted (loopback)."""
    from ddlstudy.network.emulated.wire import WireBytes

    class Net:
        def __init__(self) -> None:
            self.reads = 0

        def counters(self, nodes: list[int]) -> list[dict]:
            self.reads += 1
            k = self.reads
            return [{"bytes_sent": 1000 * k * (n + 1), "bytes_recv": 500 * k} for n in nodes]

    class Cluster:
        emulated_network = Net()
        network_info = {"rank_nodes": [0, 1, 2]}

    wire = WireBytes(Cluster(), 3)
    for _ in range(2):  # two timed chunks
        wire.mark()
        wire.add()
    summary = pd.DataFrame([{"bytes_sent_per_step": 7.0, "bytes_source": "analytic"}])
    wire.apply(summary, ["worker", "worker", "server"], steps=4, replace=True)
    row = summary.iloc[0]
    # each chunk: node n sent 1000 (n + 1) more; 2 chunks / 4 steps; workers 0, 1 -> mean 750
    assert row["bytes_sent_per_step"] == pytest.approx(750.0)
    assert row["wire_server_bytes_sent_per_step"] == pytest.approx(1500.0)
    assert row["bytes_source"] == "counted" and "veth" in row["bytes_counter"]

    class Plain:
        emulated_network = None
        network_info = None

    plain = WireBytes(Plain(), 2)
    plain.mark()
    plain.add()
    untouched = pd.DataFrame([{"bytes_sent_per_step": 7.0, "bytes_source": "analytic"}])
    plain.apply(untouched, ["worker", "worker"], steps=4, replace=True)
    assert untouched.iloc[0].to_dict() == {"bytes_sent_per_step": 7.0, "bytes_source": "analytic"}


def test_tuning_text_states_the_recorded_horovod_settings() -> None:
    """Chapter 07's sentence on Horovod's tuning comes from the records: values, which came
    from the environment, and runs that predate the columns."""
    from ddlstudy.frameworks.horovod import tuning

    rows = [dict(strategy="horovod", **tuning({})),
            dict(strategy="horovod", **tuning({"HOROVOD_FUSION_THRESHOLD": str(64 << 20)})),
            dict(strategy="horovod"), dict(strategy="ddp")]
    text = compare.tuning_text(pd.DataFrame(rows))
    assert "threshold 128 MiB, cycle time 1 ms, response cache 1024 entries" in text
    assert "all Horovod defaults; 1 run" in text
    assert "threshold 64 MiB" in text and "environment: HOROVOD_FUSION_THRESHOLD" in text
    assert "not on record for 1 run" in text
    assert compare.tuning_text(pd.DataFrame([{"strategy": "ddp"}])) == ""
    # every Horovod cell predates the columns (make reference's resumed chapter 07)
    old = pd.DataFrame([{"strategy": "horovod", "workers": n} for n in (1, 2)])
    assert compare.tuning_text(old) == ("Horovod's tuning is not on record for 2 runs (measured "
                                        "before the records carried it).")


def test_a_resumed_profile_starts_no_engines(tmp_path: Path, monkeypatch) -> None:
    """Chapter 07 resumes cell by cell: shared cells all on record are read back without a
    cluster (make reference accumulates over sittings); one missing cell needs the cluster."""
    from ddlstudy.experiments import grid
    from ddlstudy.records import store as records
    from ddlstudy.train.trainer import TrainConfig

    configs = [TrainConfig(strategy=s, model="mlp", workers=w, dataset="synthetic")
               for s in ("horovod", "allreduce") for w in (1, 2)]
    for c in configs:
        folder = grid.repeat_dir(tmp_path, c, 0, 1)
        records.write_table(pd.DataFrame([{"strategy": c.strategy, "workers": c.workers,
                                           "images_per_sec": 10.0 * c.workers}]),
                            folder, "summary")
        records.write_meta(folder, c.to_dict(), status="ok")

    def no_cluster(*a, **k):
        raise AssertionError("a cluster was started for cells already on record")

    monkeypatch.setattr(grid, "emulated_cluster", no_cluster)
    got = compare.run_profile(configs, "none", tmp_path)
    assert sorted(zip(got["strategy"], got["workers"], strict=True)) == sorted(
        (c.strategy, c.workers) for c in configs)
    assert got["reused"].all() and (got["engines"] == "shared").all()
    more = [*configs, TrainConfig(strategy="allreduce", model="mlp", workers=3,
                                  dataset="synthetic")]
    with pytest.raises(AssertionError, match="already on record"):
        compare.run_profile(more, "none", tmp_path)
