"""Testbeds as data (lib/ddlstudy/testbeds): every testbed loads, every number carries a source,
conversions agree, each paper has a testbed, and the published points are enough to validate a
step model against (>= 8 points from >= 3 sources). Fast and torch-free."""

from __future__ import annotations

import ast
import csv
from pathlib import Path

import pytest

from ddlstudy.testbeds import catalog as tb
from ddlstudy.testbeds import emulation

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "lib" / "ddlstudy"
# The five papers, named as the claim engine names them (claims/engine.py).
PAPERS = {"Shi 2019", "Fourie 2019", "Malik 2018", "Pani", "Wang (NCHC)"}


def _catalog_file() -> Path:
    """The model/shape registry, before or after the move to workload/catalog.py."""
    for rel in ("workload/catalog.py", "workloads.py"):
        if (PKG / rel).exists():
            return PKG / rel
    pytest.fail("no model registry (workload/catalog.py or workloads.py) under lib/ddlstudy")


def _first_str_args(path: Path, callees: set[str]) -> set[str]:
    """First string argument of every call to one of `callees` (a name or an attribute)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            f = node.func
            name = getattr(f, "id", None) or getattr(f, "attr", "")
            if name in callees and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


@pytest.fixture(scope="module")
def study_models() -> set[str]:
    models = _first_str_args(_catalog_file(), {"_model", "ModelSpec"})
    assert {"resnet50", "vgg16"} <= models, f"could not read the model names: {models}"
    return models


@pytest.fixture(scope="module")
def study_shapes() -> set[str]:
    shapes = _first_str_args(_catalog_file(), {"ShapeSpec"})
    assert "imagenet" in shapes, f"could not read the shape names: {shapes}"
    return shapes


def test_every_testbed_loads():
    assert len(tb.names()) >= 8
    for name in tb.names():
        t = tb.testbed(name)
        assert t.name == name and t.paper and t.device.value and t.device.source
        assert isinstance(t.gpus_per_node.value, int) and t.gpus_per_node.value >= 1
        if t.intra_node.kind != "none" and t.intra_node.rate_Bps is None:
            assert t.intra_node.note, f"{name}: an intra-node link without a rate says why"
        elif t.intra_node.kind != "none":
            assert t.intra_node.rate_Bps > 1e9, name  # bytes/s
        if t.inter_node.kind != "none":
            assert t.inter_node.rate_bps and t.inter_node.rate_bps >= 1e9, name  # bits/s
            assert t.inter_node.latency_s and 1e-7 < t.inter_node.latency_s < 1e-3, name
        assert t.compute or t.compute_table_file or t.paper in {"Fourie 2019", "Pani"}, name


def _walk(node, where: str):
    if isinstance(node, dict):
        yield where, node
        for k, v in node.items():
            yield from _walk(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{where}[{i}]")


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def test_every_number_has_a_source():
    missing, unexplained = [], []
    for t in tb.testbeds():
        for where, d in _walk(t.raw, t.name):
            if any(_is_number(v) for v in d.values()) and not str(d.get("source", "")).strip():
                missing.append(where)
            if d.get("assumed") and not str(d.get("why", "")).strip():
                unexplained.append(where)
    assert not missing, f"numbers without a source: {missing}"
    assert not unexplained, f"'assumed' without a 'why': {unexplained}"


def test_conversions_are_consistent():
    for t in tb.testbeds():
        for r in t.compute:
            assert r.images_per_sec, f"{t.name}/{r.model}: a published row needs images_per_sec"
            assert abs(r.step_s * r.images_per_sec - r.batch_size) < 1e-9, (t.name, r)
            assert "step_s = batch_size / images_per_sec" in r.conversion, (t.name, r.model)
        for row in tb.compute_table(t.name):
            assert abs(row["compute_s_p50"] * row["images_per_sec"] - row["batch_size"]) < 1e-9


def test_link_units_are_plausible():
    """Intra-node rates are bytes/s (PCIe 3.0 x16 ~15.75e9 .. NVLink 4 450e9); inter-node bits/s."""
    pcie3 = 8e9 * 16 * 128 / 130 / 8
    for t in tb.testbeds():
        if t.intra_node.kind.startswith("PCIe 3.0 x16"):
            assert t.intra_node.rate_Bps == pytest.approx(pcie3)
        if t.intra_node.rate_Bps:
            assert 1e10 <= t.intra_node.rate_Bps <= 1e12, t.name
        if t.inter_node.rate_bps:
            assert 1e9 <= t.inter_node.rate_bps <= 1e12, t.name


def test_profiles_agree_with_the_study_network_profiles():
    """A link naming one of the study's network profiles carries that profile's rate and latency
    (read from network/profiles.py by parsing, not importing)."""
    path = PKG / "network" / "profiles.py"
    if not path.exists():
        pytest.skip("no network/profiles.py in this layout")
    profiles = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Profile"
                and len(node.args) >= 3):
            name, rate, lat = (ast.literal_eval(a) for a in node.args[:3])
            profiles[name] = (rate, lat)
    if not profiles:
        pytest.skip("network/profiles.py no longer lists Profile(name, rate, latency, ...) calls")
    used = [t for t in tb.testbeds() if t.inter_node.profile]
    assert used
    for t in used:
        assert t.inter_node.profile in profiles, (t.name, t.inter_node.profile)
        rate, lat = profiles[t.inter_node.profile]
        assert t.inter_node.rate_bps == pytest.approx(rate), t.name
        assert t.inter_node.latency_s == pytest.approx(lat), t.name


def test_every_paper_has_a_testbed():
    papers = {t.paper for t in tb.testbeds()}
    assert PAPERS <= papers, f"papers without a testbed: {PAPERS - papers}"
    assert "today" in papers
    assert all(t.paper in PAPERS | {"today", "what-if"} for t in tb.testbeds())


def test_a_what_if_is_its_base_with_the_settings_it_names_changed():
    """shi2019_10g: Shi's testbed with 10 Gb/s links. It takes every other setting from
    shi2019 (compute rows, GPUs per node, framework), replays shi2019's table (no table of its
    own) and registers its own link profile; a what-if names its base, what changed and why."""
    from ddlstudy.network.profiles import PROFILES

    base, what_if = tb.testbed("shi2019"), tb.testbed("shi2019_10g")
    assert what_if.base == "shi2019" and what_if.inherits_compute
    assert what_if.compute == base.compute and what_if.framework == base.framework
    assert what_if.gpus_per_node == base.gpus_per_node
    assert what_if.inter_node.rate_bps == 5 * float(base.inter_node.rate_bps or 0)
    assert what_if.inter_node.latency_s == base.inter_node.latency_s
    assert emulation.table_name("shi2019_10g") == emulation.table_name("shi2019")
    assert PROFILES[emulation.profile_for("shi2019_10g")].rate_bps == 1e10
    for t in tb.testbeds("what-if"):
        spec = t.raw["what_if"]
        assert t.base in tb.names() and spec["changes"] and spec["why"].strip(), t.name
        assert set(spec["changes"]) <= set(t.raw), f"{t.name}: names a change it does not make"



def test_a_what_if_naming_no_testbed_says_which_to_name(tmp_path):
    """A what-if whose base is no testbed beside it fails at load with the known names, not a
    FileNotFoundError from reading the missing file."""
    import shutil

    shutil.copy(Path(tb.__file__).parent / "shi2019.yaml", tmp_path / "shi2019.yaml")
    (tmp_path / "shi2019_typo.yaml").write_text(
        "name: shi2019_typo\npaper: what-if\nwhat_if: {base: shi2091, changes: [inter_node], "
        "why: x}\ninter_node: {rate: {value: 1.0e+10}}\n")
    with pytest.raises(ValueError, match=r"what_if.base 'shi2091' is no testbed.*shi2019$"):
        tb._load(tmp_path / "shi2019_typo.yaml")

def test_paper_testbeds_say_what_the_papers_say():
    shi = tb.testbed("shi2019")
    assert shi.gpus_per_node.value == 1 and shi.framework["batch_per_worker"] == 32
    for name, rate in [("wang_nchc_ib", 1e11), ("wang_nchc_10gbe", 1e10)]:
        w = tb.testbed(name)
        assert w.gpus_per_node.value == 8 and w.nodes.value * w.gpus_per_node.value == 64
        assert w.inter_node.rate_bps == rate
    assert tb.testbed("wang_nchc_ib").inter_node.node_rate_bps == 4e11
    assert {t.device.value for t in tb.testbeds("Malik 2018")} == {"NVIDIA Tesla K80",
                                                                   "NVIDIA Tesla P100"}
    assert tb.testbed("today_h100x8_400g").inter_node.node_rate_bps == 8 * 400e9


def test_compute_tables_read_like_replay_tables(tmp_path, study_models, study_shapes):
    for t in tb.testbeds():
        rows = tb.compute_table(t.name)
        for row in rows:
            assert set(tb.REPLAY_COLUMNS) <= set(row), t.name
            assert row["model"] in study_models, (t.name, row["model"])
            assert row["shape"] in study_shapes, (t.name, row["shape"])
            assert row["compute_s_p50"] > 0 and row["source"], (t.name, row["model"])
    out = tb.write_compute_table("shi2019", tmp_path / "shi2019.csv")
    with out.open(newline="") as f:
        back = list(csv.DictReader(f))
    assert {"model", "shape", "batch_size", "compute_s_p50"} <= set(back[0])
    assert len(back) == len(tb.testbed("shi2019").compute)
    h100 = tb.compute_table("today_h100x8_400g")
    assert h100 and all(r["device_name"].startswith("NVIDIA H100") for r in h100)


def test_unknown_testbed_names_the_known_ones():
    with pytest.raises(ValueError) as e:
        tb.testbed("wang_nchc")
    msg = str(e.value)
    assert "\n" not in msg and "wang_nchc_ib" in msg and "shi2019" in msg


def test_published_points_are_enough_and_sourced(study_models):
    points = tb.published_points()
    usable = tb.published_points(study_models_only=True)
    assert len(usable) >= 8, len(usable)
    assert len({p.source_key for p in usable}) >= 3, {p.source_key for p in usable}
    assert len({p.point_id for p in points}) == len(points), "duplicate point_id"
    for p in points:
        assert p.citation and p.locator, p.point_id
        assert p.metric in tb.METRICS and p.value > 0, p.point_id
        assert p.strategy in {"ps", "allreduce"}, p.point_id
        assert p.gpus >= 1 and p.gpus_per_node >= 1 and p.batch_per_gpu >= 1, p.point_id
        assert not p.study_model or p.study_model in study_models, p.point_id
        eff = p.scaling_efficiency
        assert eff is None or 0 < eff <= 1.05, (p.point_id, eff)
    wang = {p.point_id: p.value for p in tb.published_points("wang_nchc")}
    assert wang == {"wang_nchc_resnet50_64gpu_ib": 0.89, "wang_nchc_resnet50_64gpu_10gbe": 0.65}
    assert any(p.gpus > p.gpus_per_node and p.network_bps for p in usable), "no multi-node point"


# ----------------------------------------------------------------------------- emulating one
@pytest.fixture
def own_profiles():
    """Testbed links register profiles in the process-wide PROFILES: put it back after."""
    from ddlstudy.network.profiles import PROFILES

    saved = dict(PROFILES)
    yield
    PROFILES.clear()
    PROFILES.update(saved)


def test_committed_testbed_tables_are_the_yaml_rows(tmp_path):
    """workload/tables/testbed-<name>.csv are what the YAML gives (a changed row is rewritten
    with emulation.write_tables, not edited by hand)."""
    from ddlstudy.testbeds import emulation

    written = emulation.write_tables(tmp_path)
    assert {p.name for p in written} >= {"testbed-shi2019.csv"}
    for p in written:
        assert (emulation.tables_dir() / p.name).read_text() == p.read_text(), p.name


def test_a_testbed_link_without_a_study_profile_becomes_one(own_profiles):
    """Shi 2019's 2 Gb/s Compute Engine link is emulated as profile 'shi2019' with the YAML's
    rate and latency; a testbed naming a study profile keeps it."""
    from ddlstudy.network.emulated import netem
    from ddlstudy.testbeds import emulation

    assert emulation.profile_for("shi2019") == "shi2019"
    info = netem.profile_info("shi2019", 0.05)
    assert info["real_rate_bps"] == 2e9 and info["real_latency_s"] == 3.6e-5
    assert info["emulated_rate_bps"] == pytest.approx(1e8)
    assert emulation.profile_for("wang_nchc_10gbe") == "10GbE"
    with pytest.raises(ValueError, match="no inter-node link rate"):
        emulation.profile_for("pani")


def test_chapter03_runs_its_grid_on_a_named_testbed(own_profiles):
    """network.chapter03_testbed sets the grid's link, GPUs per node, latency, replay table,
    shape and batch from the YAML; a model without a compute row is one line naming the ones
    it has."""
    from ddlstudy.chapters import ch03_ps_vs_ring as ch03
    from ddlstudy.config.params import StudyParams

    P = StudyParams.model_validate({"network": {"chapter03_testbed": "shi2019",
                                                "chapter03_models": ["resnet50"],
                                                "workers": [1, 6]},
                                    "training": {"models": []}, "cluster": {"workers": 7}})
    p = ch03.plan(P, "resnet50", emulated=True)
    c = p.configs[0]
    assert (c.shape, c.batch_size, c.replay_source, c.compute) == (
        "imagenet", 32, "testbed-shi2019", "replay")
    assert p.T.network == "shi2019" and p.gpus_per_node == 1 and p.latency
    assert p.reference_name == "03_ps_vs_ring-testbed-shi2019-resnet50"
    assert p.name == "03_ps_vs_ring-emulated-resnet50"  # the report runner's folder
    assert p.meta()["testbed"] == "shi2019"
    plain = ch03.plan(StudyParams.model_validate({"training": {"models": ["resnet50"]}}),
                      "resnet50", emulated=True)
    assert plain.testbed is None and plain.reference_name == plain.name
    with pytest.raises(ValueError, match="no compute row for model 'googlenet'"):
        StudyParams.model_validate({"network": {"chapter03_testbed": "shi2019",
                                                "chapter03_models": ["googlenet"]}})


def test_claim_rows_name_the_rate_the_emulator_shaped():
    """Wang (NCHC)'s IB nodes have 4 x 100 Gb/s HCAs, but the testbed names the IB-EDR profile
    (one 100 Gb/s port), which is what its cells were shaped to: the label says 100 Gb/s and
    that one port was emulated, never the 400 Gb/s node total."""
    from ddlstudy import claims

    ib = claims.emulated_testbed_label("wang_nchc_ib")
    assert "100 Gb/s links (IB-EDR: one of its 4 x 100 Gb/s ports per node)" in ib
    assert "400" not in ib
    assert "2 Gb/s links, 1 GPU(s) per node" in claims.emulated_testbed_label("shi2019")


def test_a_converted_compute_row_is_named_in_the_claims_testbed_label():
    """Shi 2019's VGG19 K80 step is converted from VGG16's (no published measurement): rows
    drawn on that testbed say so; a testbed without converted rows does not."""
    from ddlstudy import claims

    row = next(r for r in tb.testbed("shi2019").compute if r.model == "vgg19")
    assert row.source.startswith("Converted")
    assert abs(row.step_s / next(r.step_s for r in tb.testbed("shi2019").compute
                                 if r.model == "vgg16") - 1129.65 / 920.21) < 1e-9
    assert "(vgg19: step converted from another model's row, not measured)" in \
        claims.emulated_testbed_label("shi2019")
    assert "converted" not in claims.emulated_testbed_label("wang_nchc_ib")
    # a row drawn from one model's cells names only its own row's conversion
    assert "converted" in claims.emulated_testbed_label("shi2019", ["vgg19"])
    assert "converted" not in claims.emulated_testbed_label("shi2019", ["vgg16"])


def test_only_the_converted_models_claim_rows_say_so():
    """Shi 2019's claim rows on its K80 testbed: the VGG19 rows carry the converted note, the
    VGG16 rows drawn from the same testbed's cells do not."""
    import pandas as pd

    from ddlstudy.claims import shi2019

    def cells(model: str) -> pd.DataFrame:
        return pd.DataFrame({"testbed": "shi2019", "model": model, "strategy": "allreduce",
                             "workers": [1, 6], "images_per_sec": [10.0, 30.0]})

    part = pd.concat([cells("vgg16"), cells("vgg19")], ignore_index=True)
    groups = shi2019._by_label("shi2019", part)
    assert len(groups) == 2
    by_model = {tuple(sorted(rows["model"].unique())): bed for bed, _, rows in groups}
    assert "converted" in by_model[("vgg19",)]
    assert "converted" not in by_model[("vgg16",)]
    assert all(col for _, col, _ in groups)  # both stand for the paper's testbed


def test_pani_cross_model_row_names_a_conversion_only_of_the_models_it_compares():
    """Pani's ratio compares two models of one testbed: its label names a converted compute row
    only when one of the two is that model; the host and today's labels pass through."""
    from ddlstudy import claims
    from ddlstudy.claims import pani

    assert "vgg19: step converted" in pani._bed_label("shi2019", ["alexnet", "vgg19"])
    assert "converted" not in pani._bed_label("shi2019", ["alexnet", "resnet152"])
    assert pani._bed_label(claims.TESTBED_HOST, ["a", "b"]) == claims.TESTBED_HOST
    assert pani._bed_label("elsewhere", ["a"]) == "emulated testbed elsewhere"


def test_chapter_03_shows_a_ps_of_more_servers_as_an_arm_of_its_own():
    """The fair PS's S = 1 and S = 3 (params/reference-fairps-servers.yaml) share a strategy
    name and a testbed folder: the chapter's view keeps them apart (medians and speed-ups per
    arm), S = N co-located and the default single server keep their names."""
    import pandas as pd

    from ddlstudy.analysis import plots
    from ddlstudy.chapters.ch03_ps_vs_ring import arms

    s = pd.DataFrame({"strategy": ["ps_overlap", "ps_overlap", "ps_overlap", "ps_colocated",
                                   "ps_sync", "allreduce"],
                      "servers": [1, 1, 3, 0, 1, 0], "workers": [1, 6, 6, 6, 6, 6],
                      "model": "resnet50", "images_per_sec": [10.0, 30.0, 50.0, 55.0, 9.0,
                                                                60.0]})
    shown = arms(s)
    assert shown["strategy"].tolist() == ["ps_overlap", "ps_overlap", "ps_overlap (S = 3)",
                                          "ps_colocated", "ps_sync", "allreduce"]
    med = shown[shown["workers"] == 6].groupby("strategy")["images_per_sec"].median()
    assert med["ps_overlap"] == 30.0 and med["ps_overlap (S = 3)"] == 50.0
    sp = plots.add_speedup(shown).set_index("strategy")
    assert sp.loc["ps_overlap"].query("workers == 6")["speedup"].item() == 3.0
    assert pd.isna(sp.loc["ps_overlap (S = 3)", "speedup"])  # no 1-worker cell of its own
    assert s["strategy"].tolist()[2] == "ps_overlap"  # the records keep the registry's name


def test_chapter_03_compares_best_ps_with_best_allreduce(tmp_path):
    """Issue 21 item 5: beside the thesis's pair, chapter 03 names the fastest PS design (S = 3
    on server nodes, S = N co-located included) and the fastest all-reduce at the most workers
    where more than the thesis's pair ran, with an interval over the repeats; with only the
    thesis's pair it adds nothing."""
    import pandas as pd

    from ddlstudy.chapters.ch03_ps_vs_ring import _best_vs_best, arms

    rates = {("ps_sync", 1): 30.0, ("ps_overlap", 1): 45.0, ("ps_overlap", 3): 117.0,
             ("ps_colocated", 0): 150.0, ("allreduce", 0): 170.0}
    rows = [{"strategy": s, "servers": k, "workers": 6, "repeat": rep, "cpu_bound": False,
             "images_per_sec": v * (1 + 0.01 * rep)}
            for (s, k), v in rates.items() for rep in range(5)]
    line, = _best_vs_best(arms(pd.DataFrame(rows)), tmp_path)
    assert "best parameter server (ps_colocated, of ps_colocated, ps_overlap, " \
           "ps_overlap (S = 3), ps_sync)" in line
    assert "Best all-reduce (allreduce, of allreduce)" in line and "at 6 workers" in line
    assert "allreduce / ps_colocated images/sec = 1.13" in line
    assert "interleaved repeats" in line
    thesis = [r for r in rows if r["strategy"] in {"ps_sync", "allreduce"}]
    assert _best_vs_best(arms(pd.DataFrame(thesis)), tmp_path) == []
