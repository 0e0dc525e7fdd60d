"""Chapter 11 (beyond the papers): registered with its tables and params, bytes ratios formed
run by run, and on real engines ZeRO-1 sends the ring's bytes per step and ZeRO-3 1.5x them."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.chapters import ch11_beyond as ch
from ddlstudy.chapters.registry import get_chapter
from ddlstudy.config.params import ParamsError, load_params

REPO = Path(__file__).resolve().parents[1]
FILES = [str(REPO / "params/default.yaml"), str(REPO / "params/ci.yaml")]


def test_registered_with_notebook_params_and_tables() -> None:
    c = get_chapter(ch.NAME)
    assert (REPO / "notebooks" / c.notebook).exists() and c.params_section == "beyond"
    assert {"comparison", "bytes_ratio", "stragglers", "straggler_slowdown"} <= set(c.tables)
    assert c.quick  # make report runs it at short settings, report-full at full ones
    quick = load_params(str(REPO / "params/default.yaml"))
    full = load_params(str(REPO / "params/default.yaml"), str(REPO / "params/full.yaml"))
    assert ch.NAME in quick.report.chapters and ch.NAME in full.report.chapters
    assert len(quick.beyond.strategies) < len(full.beyond.strategies)
    assert quick.beyond.repeats < full.beyond.repeats == 5


@pytest.mark.parametrize(("beyond", "match"), [
    ({"straggler_rank": 4}, "straggler_rank 4 must be a worker rank 0..3"),
    ({"strategies": ["zero1"]}, "name allreduce among the strategies"),
    ({"straggler_factors": [1.0]}, "slows nothing"),
    ({"straggler_factors": [500.0]}, r"in \[1, 100\]"),
    ({"network": "carrier-pigeon"}, "unknown network"),
])
def test_bad_params_are_one_line(tmp_path: Path, beyond: dict, match: str) -> None:
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"beyond": beyond}))
    with pytest.raises(ParamsError, match=match) as err:
        load_params(str(REPO / "params/default.yaml"), str(path))
    assert "\n" not in str(err.value)


def _comparison(zero3_mode: str = "real") -> pd.DataFrame:
    rows = []
    for rep in range(3):
        rows += [{"strategy": "allreduce", "repeat": rep, "workers": 4, "compute_mode": "replay",
                  "bytes_sent_per_step": 100.0, "bytes_source": "counted",
                  "images_per_sec": 200.0 + rep, "images_per_sec_cluster": 200.0 + rep,
                  "error": ""},
                 {"strategy": "zero1", "repeat": rep, "workers": 4, "compute_mode": "replay",
                  "bytes_sent_per_step": 100.0, "bytes_source": "counted",
                  "images_per_sec": 100.0 + rep, "images_per_sec_cluster": 100.0 + rep,
                  "error": ""},
                 {"strategy": "zero3", "repeat": rep, "workers": 4, "compute_mode": zero3_mode,
                  "bytes_sent_per_step": 150.0, "bytes_source": "counted",
                  "images_per_sec": 10.0, "images_per_sec_cluster": 10.0, "error": ""}]
    return pd.DataFrame(rows)


def test_bytes_ratios_pair_runs_and_compare_rates_only_in_one_compute_mode(tmp_path: Path
                                                                         ) -> None:
    r = ch.bytes_ratios(_comparison()).set_index("strategy")
    assert r.loc["zero1", "bytes_ratio"] == 1.0 and r.loc["zero3", "bytes_ratio"] == 1.5
    assert r.loc["zero1", "rate_ratio"] == pytest.approx(0.5, rel=0.02)
    assert pd.isna(r.loc["zero3", "rate_ratio"])  # real compute vs replayed: not compared
    text = ch.summary_lines(r.reset_index(), pd.DataFrame(
        columns=["arm", "workers", "factor", "delay_s", "ratio", "ci_low", "ci_high", "runs"]))
    assert "zero3: 1.5x the ring's bytes" in text and "not compared" in text
    r.reset_index().to_csv(tmp_path / "bytes_ratio.csv", index=False)
    assert "zero3 sent 1.5x the ring's bytes per step per rank" in ch.summary(tmp_path)
    assert "was not written" in ch.summary(tmp_path / "nothing")


def test_veth_counted_bytes_are_divided_by_the_rings_veth_count() -> None:
    """Under emulation an analytic strategy (ddp, fsdp) carries the veth count, TCP/IP framing
    included: it is compared with the ring's veth count, never with the ring's own count (the
    2026-11-26 reference set 1.06x for ddp, which sends what the ring sends)."""
    rows = []
    for rep in range(5):
        rows += [{"strategy": "allreduce", "repeat": rep, "workers": 4, "compute_mode": "replay",
                  "bytes_sent_per_step": 100.0, "wire_bytes_sent_per_step": 106.0 + rep,
                  "bytes_source": "counted", "images_per_sec": 20.0,
                  "images_per_sec_cluster": 20.0, "error": ""},
                 {"strategy": "ddp", "repeat": rep, "workers": 4, "compute_mode": "replay",
                  "bytes_sent_per_step": 106.0 + rep, "wire_bytes_sent_per_step": 106.0 + rep,
                  "bytes_source": "counted", "images_per_sec": 20.0,
                  "images_per_sec_cluster": 20.0, "error": ""},
                 {"strategy": "zero3", "repeat": rep, "workers": 4, "compute_mode": "real",
                  "bytes_sent_per_step": 150.0, "wire_bytes_sent_per_step": 159.0 + rep,
                  "bytes_source": "counted", "images_per_sec": 10.0,
                  "images_per_sec_cluster": 10.0, "error": ""}]
    r = ch.bytes_ratios(pd.DataFrame(rows)).set_index("strategy")
    assert r.loc["ddp", "bytes_source"] == "wire" and r.loc["ddp", "bytes_ratio"] == 1.0
    assert r.loc["zero3", "bytes_source"] == "counted" and r.loc["zero3", "bytes_ratio"] == 1.5
    assert r.loc["zero3", "bytes_ratio_wire"] == pytest.approx(161 / 108)
    text = ch.summary_lines(r.reset_index(), pd.DataFrame(columns=["arm"]))
    assert "ddp: 1x the ring's bytes per step per rank (veth counts" in text


def test_real_run_zero1_sends_the_rings_bytes_and_zero3_one_and_a_half(tmp_path: Path) -> None:
    """CI settings (mlp, local engines, real compute), one repeat, no straggler cells."""
    P = load_params(*FILES)
    S = ch.setup(P, tmp_path, strategies=["allreduce", "zero1", "zero3"], repeats=1,
                 network="none", straggler_arms=[])
    ch.run(S)
    r = ch.ratios(S).set_index("strategy")
    assert 0.98 <= r.loc["zero1", "bytes_ratio"] <= 1.02, r
    assert 1.35 <= r.loc["zero3", "bytes_ratio"] <= 1.65, r
    assert (r["bytes_source"] == "counted").all()
    slow = ch.stragglers(S)
    assert slow.empty and (tmp_path / ch.NAME / "stragglers.csv").exists()
    assert "zero3" in ch.summary(tmp_path / ch.NAME)


def test_accuracy_costs_pair_by_seed() -> None:
    runs = pd.DataFrame([{"strategy": s, "seed": seed, "test_accuracy": acc + 0.001 * seed,
                          "bytes_sent_per_step": b, "error": ""}
                         for seed in range(5)
                         for s, acc, b in (("ddp", 0.90, 1000.0), ("ddp_powersgd1", 0.85, 50.0))])
    cost = ch.accuracy_costs(runs, "ddp").set_index("strategy")
    assert cost.loc["ddp", "accuracy_diff"] == 0.0
    assert cost.loc["ddp_powersgd1", "accuracy_diff"] == pytest.approx(-0.05)
    assert cost.loc["ddp_powersgd1", "bytes_ratio"] == pytest.approx(0.05)
    assert cost.loc["ddp_powersgd1", "runs"] == 5
    assert "-0.050" in ch.summary_lines(pd.DataFrame(columns=["strategy"]), pd.DataFrame(
        columns=["arm"]), acc=cost.reset_index())


def test_real_powersgd_sends_fewer_bytes_and_is_scored_on_the_same_seeds(tmp_path: Path
                                                                         ) -> None:
    """CI settings: ddp vs ddp_powersgd1, mlp on digits, 1 epoch, seeds 0 and 1."""
    P = load_params(*FILES)
    S = ch.setup(P, tmp_path, straggler_arms=[])
    cost = ch.accuracy(S).set_index("strategy")
    runs = pd.read_csv(tmp_path / ch.NAME / "accuracy.csv")
    assert sorted(runs["seed"].unique()) == [0, 1] and runs["error"].isna().all()
    assert cost.loc["ddp", "accuracy_diff"] == 0.0 and cost.loc["ddp_powersgd1", "runs"] == 2
    assert cost.loc["ddp_powersgd1", "bytes_ratio"] < 0.5  # rank 1: far fewer bytes
    assert cost.loc["ddp", "test_accuracy"] > 0.3  # learned: well above chance (0.1)
    assert 0.0 < cost.loc["ddp_powersgd1", "test_accuracy"] <= 1.0


def test_accuracy_settings_are_stated_and_an_absent_data_set_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The accuracy line names what the runs trained; MNIST missing from data.root skips the
    accuracy runs with one line (and the chapter's text says so) instead of failing 20 runs."""
    runs = pd.DataFrame([{"strategy": s, "seed": 0, "test_accuracy": 0.97, "error": "",
                          "bytes_sent_per_step": b, "model": "shallow_cnn", "dataset": "mnist",
                          "workers": 2, "batch_size": 64, "steps": 398, "lr": 0.05}
                         for s, b in (("ddp", 1000.0), ("ddp_powersgd2", 12.5))])
    text = ch.summary_lines(pd.DataFrame(columns=["strategy"]), pd.DataFrame(columns=["arm"]),
                            acc=ch.accuracy_costs(runs, "ddp"))
    assert ("Accuracy runs: shallow_cnn on mnist, 2 workers x batch 64, 400 steps (51,200 "
            "images, 2 of the steps warm-up)") in text and "0.0125x its bytes" in text
    P = load_params(*FILES)
    P = P.model_copy(update={"data": P.data.model_copy(update={"root": str(tmp_path / "none")})})
    S = ch.setup(P, tmp_path, straggler_arms=[], accuracy_model="shallow_cnn",
                 accuracy_dataset="mnist", accuracy_steps=10)
    assert ch.accuracy(S).empty and not (tmp_path / ch.NAME / "accuracy.csv").exists()
    assert capsys.readouterr().out.count("Accuracy runs skipped: mnist not available") == 1
    assert "run `make data`" in ch.text(S)


def test_powersgd_cells_keep_its_plain_all_reduce_steps_in_the_warm_up(tmp_path: Path) -> None:
    """torch's PowerSGD sends plain gradients for its first 2 steps: a comparison cell with one
    warm-up step would count uncompressed bytes, so the chapter raises its warm-up to 2 (and
    only its: the other arms keep the section's)."""
    P = load_params(Path(__file__).parents[1] / "params/default.yaml", check_data=False)
    S = ch.setup(P, tmp_path, strategies=["allreduce", "ddp_powersgd1", "ddp_powersgd4"],
                 warmup_steps=1)
    warm = {c.strategy: c.warmup_steps for c in S.configs}
    assert warm == {"allreduce": 1, "ddp_powersgd1": 2, "ddp_powersgd4": 2}


def test_straggler_time_to_accuracy_at_ci_settings(tmp_path: Path) -> None:
    """CI settings: ps_sync and ps_async, mlp on digits, 3 epochs, seed 0, without and with
    worker 1 waiting 20 ms a step; tables written, the text says what the runs trained, and a
    synchronous run with the straggler needs at least its steps x the wait to reach the target."""
    P = load_params(*FILES)
    S = ch.setup(P, tmp_path, straggler_arms=[])
    ratio = ch.straggler_accuracy(S)
    runs = pd.read_csv(tmp_path / ch.NAME / "straggler_tta.csv")
    assert len(runs) == 4 and runs["error"].isna().all()
    assert set(ratio["versus"]) == {"no straggler", "ps_sync"}
    sync = runs[(runs["arm"] == "ps_sync") & runs["straggler_rank"].notna()].iloc[0]
    if math.isfinite(sync["time_to_target_s"]):
        assert sync["time_to_target_s"] >= S.B.tta_delay_s * sync["steps_to_target"]
    text = ch.text(S)
    assert "Time-to-accuracy runs: mlp on digits, 3 workers x batch 16, 3 epochs" in text
    assert "ps_async with the straggler: test accuracy 0.9 reached in" in text
    assert "took x" in ch.summary(tmp_path / ch.NAME)


def test_where_each_wins_is_analytic_and_places_every_testbed(tmp_path: Path) -> None:
    """The map's winner follows the model: with compute far longer than any transfer every arm
    ties (no winner by 2 %); on the slowest links fp16 buckets beat the plain ring; each
    testbed with a step time for the model gets a row; the table says it is projected."""
    from ddlstudy.analysis import costmodel

    grid, tb = costmodel.winners_map("resnet50", workers=4, shape="imagenet",
                                     compute_s=[0.001, 100.0], bandwidth_bps=[1e8, 4e12])
    slow_net = grid[(grid["compute_s"] == 0.001) & (grid["bandwidth_bps"] == 1e8)].iloc[0]
    long_compute = grid[(grid["compute_s"] == 100.0) & (grid["bandwidth_bps"] == 4e12)].iloc[0]
    assert long_compute["winner"] == costmodel.NO_WINNER
    assert slow_net["step_s: ring, fp16 buckets"] < slow_net["step_s: ring all-reduce"]
    assert slow_net["winner"] != costmodel.NO_WINNER
    assert {"shi2019", "wang_nchc_10gbe"} <= set(tb["name"])
    P = load_params(*FILES)
    S = ch.setup(P, tmp_path, straggler_arms=[])
    placed = ch.where_each_wins(S)
    table = pd.read_csv(tmp_path / ch.NAME / "regime_winners.csv")
    assert (table["source"] == "analytic (projected)").all() and len(placed) == len(tb)
    assert (tmp_path / ch.NAME / "regime_winners.png").exists()
    assert any("Projected (analytic, resnet50 at" in x
               for x in ch.winners_sentences(placed, "resnet50", 4))
