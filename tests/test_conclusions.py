"""Chapter 99's verdicts follow the records: agree when the numbers agree, differ when not."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ddlstudy.conclusions import claims_table


def _summary(ps_top: float, ring_top: float) -> pd.DataFrame:
    rows = []
    for strategy, top in (("ps_sync", ps_top), ("allreduce", ring_top)):
        for workers, ips in ((1, 10.0), (4, top)):
            rows.append({"strategy": strategy, "model": "resnet18", "workers": workers,
                         "images_per_sec": ips, "params": 1000, "comm_s": 0.1 * workers,
                         "compute_s": 1.0})
    return pd.DataFrame(rows)


def _write(run: Path, chapter: str, name: str, df: pd.DataFrame) -> None:
    (run / chapter).mkdir(parents=True, exist_ok=True)
    df.to_csv(run / chapter / f"{name}.csv", index=False)


def test_verdicts_follow_the_numbers(tmp_path: Path) -> None:
    runs = {"good": (15.0, 35.0), "bad": (35.0, 15.0), "tie": (30.0, 31.0)}
    for name, (ps_top, ring_top) in runs.items():
        _write(tmp_path / name, "03_ps_vs_ring-resnet18", "summary", _summary(ps_top, ring_top))
    verdict = {name: claims_table(tmp_path / name).set_index("claim")["verdict"] for name in runs}
    key = "Ring all-reduce scales with workers; the PS levels off"
    assert verdict["good"][key] == "agrees" and verdict["bad"][key] == "differs"
    assert verdict["tie"][key] == "inconclusive"  # within one host's noise


def test_missing_records_say_not_measured(tmp_path: Path) -> None:
    table = claims_table(tmp_path)
    assert (table["verdict"] == "not measured").all()
    assert table["this run"].str.contains("no records").all()


def test_traffic_claim_reads_counted_bytes(tmp_path: Path) -> None:
    model_bytes = 4000
    rows = [{"strategy": "ps_sync", "workers": n, "params": 1000,
             "server_bytes_recv_per_step": n * model_bytes, "bytes_sent_per_step": model_bytes}
            for n in (2, 4)]
    rows += [{"strategy": "allreduce", "workers": n, "params": 1000,
              "server_bytes_recv_per_step": float("nan"),
              "bytes_sent_per_step": 2 * (n - 1) / n * model_bytes} for n in (2, 4)]
    _write(tmp_path, "04_utilization_traffic", "summary", pd.DataFrame(rows))
    row = claims_table(tmp_path).set_index("seed").loc["000"].iloc[1]
    assert row["verdict"] == "agrees" and "2.00x, 4.00x" in row["this run"]
