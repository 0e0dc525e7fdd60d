"""The README states the answer the committed records give: its generated blocks match
`results/reference`, it stays short, and a changed record makes the check fail."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from ddlstudy.report import readme

REPO = Path(__file__).resolve().parents[1]
REF = REPO / "results" / "reference"


def test_readme_and_results_page_match_the_reference_records():
    for page in readme.PAGES:
        text = (REPO / page).read_text()
        assert "<!-- generated:answer -->" in text
        assert readme.render(text, REF) == text, (
            f"{page} is out of date with results/reference: run python -m ddlstudy.report.readme")


def test_readme_is_short_and_has_its_figure():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200
    assert (REPO / readme.FIGURE).exists()


def test_the_answer_is_a_paragraph_and_every_decided_row_is_on_the_results_page():
    """The README's answer counts each claim's rows (a clause per claim, not per row), so it
    stays readable as rows are added; the rows themselves are docs/results.md's table, one line
    per decided row."""
    answer = readme.answer(REF)
    rows = readme._decided_rows(REF)
    assert len(rows) > 0
    assert len(answer) <= 8000, f"the answer is {len(answer)} characters: keep it a paragraph"
    assert f"Chapter 99 decides {len(rows)} rows" in answer
    assert answer.count("'s \"") == len(rows.groupby(["paper", "claim"]))
    table = readme.decided_rows(REF)
    lines = [x for x in table.splitlines() if x.startswith("| ")]
    assert len(lines) == len(rows) + 1  # the header, then one line per row
    assert all(x.count("|") == lines[0].count("|") for x in lines)  # no cell broke a row


def test_a_changed_record_changes_the_answer(tmp_path):
    ref = tmp_path / "reference"
    for folder in REF.glob(f"{readme.EMULATED_03}*"):
        shutil.copytree(folder, ref / folder.name, ignore=shutil.ignore_patterns("runs"))
    before = readme.answer(ref)
    summary = ref / f"{readme.EMULATED_03}resnet50" / "summary.csv"
    df = pd.read_csv(summary)
    ring = (df["strategy"] == "allreduce") & (df["workers"] == 6)
    df.loc[ring, "images_per_sec_cluster"] *= 3
    df.to_csv(summary, index=False)
    after = readme.answer(ref)
    assert before != after
    text = (REPO / "README.md").read_text()
    assert readme.render(text, ref, only=["answer"]) != text


def test_provenance_reads_each_runs_code_version_once(tmp_path, monkeypatch):
    """Each run's code version is worked out once: two runs, one certified +dirty and one of
    uncommitted code, give two calls, one run counted and one left out."""
    import json

    from ddlstudy.records.reference import code_version

    calls = []

    def counted(meta):  # the real code_version, counted
        calls.append(meta)
        return code_version(meta)

    host = {"hostname": "vm", "cpu_count": 2, "load_avg": [1.0, 1.0, 1.0]}
    for name, extra in (("c1", {"code_commit": "a" * 40}), ("c2", {})):
        run = tmp_path / f"{readme.EMULATED_03}vgg16" / "runs" / name
        run.mkdir(parents=True)
        (run / "meta.json").write_text(json.dumps({
            "status": "ok", "created": "2026-11-26T01:00", "host": host,
            "git_sha": "b" * 40 + "+dirty", **extra}))
    monkeypatch.setattr(readme, "code_version", counted)
    text = readme.provenance(tmp_path)
    assert len(calls) == 2
    assert "1 runs measured 2026-11-26" in text and "code aaaaaaa;" in text
    assert "1 runs of uncommitted code left out" in text


def test_chapter_table_lists_every_registered_chapter():
    from ddlstudy.chapters.registry import CHAPTER_NAMES

    table = readme.BLOCKS["chapters"](REF)
    assert all(f"`{name}`" in table for name in CHAPTER_NAMES)


def test_the_papers_own_testbed_has_its_sentence_from_its_cells(tmp_path):
    """The answer states the comparison on Shi 2019's own testbed from that testbed's cells: a
    changed cell changes the sentence; without such cells there is no sentence."""
    assert readme.testbed_answer(tmp_path) == ""
    ref = tmp_path / "reference"
    for folder in REF.glob(f"{readme.TESTBED_03}shi2019-*"):
        shutil.copytree(folder, ref / folder.name, ignore=shutil.ignore_patterns("runs"))
    before = readme.testbed_answer(ref)
    assert before.startswith("On Shi 2019's own testbed (emulated testbed shi2019")
    assert "that at 3" in before and "of 6 x one worker" in before
    # the inputs as the runs recorded them: Shi's AlexNet cells replayed a batch-512 row
    assert "3x224x224 (imagenet), batch 32 per worker (alexnet: 512)" in before
    summary = ref / f"{readme.TESTBED_03}shi2019-alexnet" / "summary.csv"
    df = pd.read_csv(summary)
    ps6 = (df["strategy"] == "ps_sync") & (df["workers"] == 6)
    df.loc[ps6, "images_per_sec_cluster"] *= 3
    df.to_csv(summary, index=False)
    assert readme.testbed_answer(ref) != before


def test_a_ps_of_more_servers_is_its_own_cell_in_the_answer(tmp_path):
    """Shi 2019's ResNet-50 testbed folder holds ps_overlap with S = 1 and with S = 3 at 6
    workers (5 runs each): the answer's run counts see two cells of 5, never one of 10."""
    ref = tmp_path / "reference"
    folder = ref / f"{readme.TESTBED_03}shi2019-resnet50"
    shutil.copytree(REF / folder.name, folder, ignore=shutil.ignore_patterns("runs"))
    df = pd.read_csv(folder / "summary.csv")
    overlap6 = df[(df["strategy"] == "ps_overlap") & (df["workers"] == 6)]
    assert sorted(overlap6["servers"].unique()) == [1, 3]
    counts = df.groupby(["strategy", "workers", "servers"]).size()
    assert "independent runs per cell" in readme.testbed_answer(ref)
    assert f"medians of {counts.min()}-{counts.max()} " in readme.testbed_answer(ref) or (
        counts.min() == counts.max()
        and f"medians of {counts.min()} independent" in readme.testbed_answer(ref))


def test_fair_ps_block_lists_each_arm_from_its_cells(tmp_path):
    """docs/results.md's fair-PS table: one row per arm and worker count, S = 3 apart from
    S = 1, each arm's median over the ring's; a changed cell changes it; no folder, one line."""
    assert readme.fair_ps(tmp_path).startswith("No `03_ps_vs_ring-testbed-shi2019-resnet50`")
    name = f"{readme.TESTBED_03}shi2019-resnet50"
    folder = tmp_path / name
    shutil.copytree(REF / name, folder, ignore=shutil.ignore_patterns("runs"))
    block = readme.fair_ps(tmp_path)
    assert "| 6 | ps_overlap (S = 3) |" in block and "| 6 | ps_overlap |" in block
    assert "| 6 | allreduce |" in block and "| 1.00 |" in block
    df = pd.read_csv(folder / "summary.csv")
    three = (df["strategy"] == "ps_overlap") & (df["servers"] == 3)
    said = readme.fair_ps_answer(tmp_path)
    assert said.startswith("With the parameter servers users would deploy today")
    assert "the best of them (ps_colocated;" in said and "independent runs" in said
    df.loc[three, ["images_per_sec", "images_per_sec_cluster"]] *= 2
    df.to_csv(folder / "summary.csv", index=False)
    assert readme.fair_ps(tmp_path) != block
    assert "the best of them (ps_overlap (S = 3);" in readme.fair_ps_answer(tmp_path)


def test_the_answer_states_the_regime_its_runs_recorded():
    """The regime in the answer and the figure title comes from the runs' records (links, their
    scale, whose compute was replayed, GPUs per node, latency), not from a sentence typed in."""
    runs = readme.emulated_runs(REF)
    said = readme.regime(runs)
    assert said.startswith(f"emulated {runs['network'].iloc[0]}-like links (rate scaled x")
    assert "NVIDIA H100" in said and "one GPU per node" in said and "no latency added" in said
    other = runs.assign(network_scale=0.05, gpus_per_node=8, latency_emulated_s=0.00072,
                        compute_mode="real")
    changed = readme.regime(other)
    assert "x0.05" in changed and "8 GPUs per node" in changed
    assert "720 us per message" in changed and "compute run on this host" in changed


def test_one_regeneration_computes_the_claims_table_once_per_records_folder(monkeypatch):
    """`main` fills the answer, verdicts and decided-rows blocks of both pages from one claims
    table; each later render reads the records again (an edit between renders is seen)."""
    from ddlstudy.claims import engine

    calls = []

    def counted(ref):  # the real claims_table, counted
        calls.append(Path(ref))
        return real(ref)

    real = engine.claims_table
    monkeypatch.setattr(engine, "claims_table", counted)
    assert readme.main(["--check"]) == 0
    assert calls == [REF]
    text = "<!-- generated:verdicts -->\n<!-- end:verdicts -->\n"
    readme.render(text, REF)
    readme.render(text, REF)
    assert calls == [REF, REF, REF]  # each later render reads the records again
