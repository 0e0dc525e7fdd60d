"""analysis.units: timed chunks carry each cell's identity, server count included, so a cell
that names its servers never pools a PS with S = 3 server nodes with the same PS at S = 1."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ddlstudy.analysis import units


def write_run(root: Path, name: str, servers: int, rates: list[float]) -> dict:
    run = root / name
    run.mkdir(parents=True)
    row = {"strategy": "ps_overlap", "model": "resnet50", "workers": 6, "servers": servers,
           "network": "shi2019", "images_per_sec": sum(rates) / len(rates), "repeat": 0,
           "cpu_bound": False, "time_dilation": 1.0, "error": ""}
    pd.DataFrame([row]).to_csv(run / "summary.csv", index=False)
    pd.DataFrame({"chunk": range(len(rates)), "images_per_sec": rates}).to_csv(
        run / "chunks.csv", index=False)
    return row


def test_chunks_keep_server_counts_apart(tmp_path):
    one = write_run(tmp_path, "s1", 1, [100.0, 101.0, 102.0])
    three = write_run(tmp_path, "s3", 3, [300.0, 301.0, 302.0])
    chunks = units.chunk_rates(tmp_path)
    assert sorted(chunks["servers"].unique()) == [1, 3]
    summary = pd.DataFrame([one, three])  # one repeat each: the chunks are the unit
    cell = {"strategy": "ps_overlap", "workers": 6}
    (s1, s3), unit = units.cell_values(summary, chunks, [{**cell, "servers": 1},
                                                          {**cell, "servers": 3}])
    assert unit == units.CHUNKS
    assert sorted(s1) == [100.0, 101.0, 102.0]
    assert sorted(s3) == [300.0, 301.0, 302.0]
