"""Chapter 07's bookkeeping behind the framework claims: wire bytes, the recorded Horovod
settings, resumed profiles. The claims themselves (Malik 2018, Wang (NCHC)) are tested on
synthetic records in tests/test_conclusions.py and tests/test_claims_engine.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

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
