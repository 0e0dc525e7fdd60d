"""`records.reference add-chapter`: a chapter measured whole in another sitting joins the
reference (tables and meta.json, named in the reference's report.chapters so chapter 99 reads
it); bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ddlstudy.records import reference


def _run(tmp: Path) -> tuple[Path, Path]:
    src = tmp / "run" / "02_collectives"
    src.mkdir(parents=True)
    pd.DataFrame({"algorithm": ["ring"], "time_p50_s": [1.0]}).to_csv(src / "collectives.csv",
                                                                        index=False)
    (src / "meta.json").write_text(json.dumps({"git_sha": "abc", "params": {}}))
    (src / "02_collectives.ipynb").write_text("{}")
    (src / "time_vs_size.png").write_bytes(b"png")
    root = tmp / "reference"
    root.mkdir()
    (root / "meta.json").write_text(json.dumps({"params": {"report": {"chapters":
                                                                      ["03_ps_vs_ring"]}}}))
    return src, root


def test_add_chapter_copies_tables_and_names_the_chapter(tmp_path: Path) -> None:
    src, root = _run(tmp_path)
    copied = reference.add_chapter(src, root)
    assert sorted(copied) == ["collectives.csv", "meta.json"]
    assert sorted(p.name for p in (root / "02_collectives").iterdir()) == sorted(copied)
    meta = json.loads((root / "meta.json").read_text())
    assert meta["params"]["report"]["chapters"] == ["03_ps_vs_ring", "02_collectives"]


def test_add_chapter_refuses_bad_input_in_one_line(tmp_path: Path, capsys) -> None:
    src, root = _run(tmp_path)
    assert reference.main(["add-chapter", str(src), str(root)]) == 0
    assert reference.main(["add-chapter", str(src), str(root)]) == 2  # already there
    assert "exists: pool another sitting's runs" in capsys.readouterr().err
    assert reference.main(["add-chapter", str(tmp_path / "nope"), str(root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "no meta.json" in err[0]
