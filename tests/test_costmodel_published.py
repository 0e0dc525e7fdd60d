"""The step model against published measurements (issue 21, item 7b): TensorFlow's parameter
servers hold whole variables, distributed_replicated sums inside the node before one push, and
the headline error counts the multi-node points only."""

from __future__ import annotations

import math

import pytest

from ddlstudy.analysis import costmodel as M
from ddlstudy.testbeds import catalog

MB = 2**20
C0 = M.SETTINGS_ALONE


def test_variable_placement_is_greedy_least_loaded_by_bytes():
    assert M.variable_placement([6, 1, 1, 3], 2) == (0, 1, 1, 1)
    assert M.variable_placement([1, 1, 1], 3) == (0, 1, 2)
    assert M.server_shares([6, 1, 1, 3], 2, "variable") == [6.0, 5.0]
    assert M.server_shares([6, 1, 1, 3], 2, "even") == [5.5, 5.5]
    assert M.server_shares([6, 1, 1, 3], 2, "variable", members=[1, 3]) == [0.0, 4.0]
    with pytest.raises(ValueError, match="placement"):
        M.server_shares([1], 1, "random")


def test_vgg16s_first_fc_layer_makes_one_server_the_busiest():
    sizes = M.gradient_bytes("vgg16", "imagenet")
    for s in (4, 16):
        share = max(M.server_shares(sizes, s, "variable")) / sum(sizes)
        assert share > 0.74 > 1 / s


def test_a_whole_variable_loads_its_server_in_the_naive_ps():
    """Sizes 6, 1, 1 MiB on 2 separate servers, 4 workers: server 0 holds the 6 MiB variable,
    so its link carries 4 x 6 MiB each way, not 4 x 4 MiB (even)."""
    link = M.Link(1e9, 0.0, goodput=1.0)
    sizes = [6 * MB, MB, MB]
    even = M.ps_step(sizes, 4, 2, link, 0.0, C0)
    whole = M.ps_step(sizes, 4, 2, link, 0.0, C0, placement="variable")
    assert even.wire_s == pytest.approx(2 * 4 * 4 * MB * link.beta)
    assert whole.wire_s == pytest.approx(2 * 4 * 6 * MB * link.beta)
    # one server: placement changes nothing
    assert M.ps_step(sizes, 4, 1, link, 0.0, C0, placement="variable") == \
        M.ps_step(sizes, 4, 1, link, 0.0, C0)


def test_overlapped_ps_charges_each_bucket_to_its_variables_servers():
    link = M.Link(1e9, 0.0, goodput=1.0)
    sizes = [6 * MB, MB, MB]  # 1 MiB buckets: one variable per bucket
    even = M.ps_step(sizes, 4, 2, link, 0.0, C0, overlap=True, bucket_mb=1.0)
    whole = M.ps_step(sizes, 4, 2, link, 0.0, C0, overlap=True, bucket_mb=1.0,
                      placement="variable")
    assert whole.total(C0) > even.total(C0)
    balanced = [MB] * 4  # equal variables spread evenly: the same step either way
    assert M.ps_step(balanced, 4, 2, link, 0.0, C0, overlap=True, bucket_mb=2.0,
                     placement="variable").total(C0) == pytest.approx(
        M.ps_step(balanced, 4, 2, link, 0.0, C0, overlap=True, bucket_mb=2.0).total(C0))


def test_published_tensorflow_ps_points_use_whole_variable_placement():
    points = {p.point_id: p for p in catalog.published_points(study_models_only=True)}
    dtf = points["horovod2017_vgg16_16gpu_dtf_ps"]
    assert M.placement_of(dtf) == "variable"
    row = M.predict_point(dtf)
    assert "whole variables" in row["settings"]
    even = M.predict_step("ps_sync", "vgg16", 16, M.Link(25e9, 1e-5), 64 / 130.9, C0,
                          servers=4, ps_overlap=True, colocated=True,
                          tiers=M.Tiers(4, M.Link(128e9, 0.0, goodput=1.0)),
                          shape="imagenet")
    assert row["step_s"] > 2 * even.total(C0)


def test_ec2_distributed_points_are_predicted_with_their_stated_assumptions():
    table = M.predict_published()
    ec2 = table[table["point_id"].str.startswith("tfbench_ec2_k80_")
                & (table["gpus"] > 8)]
    assert len(ec2) == 6 and ec2["predicted"].notna().all()
    assert ec2["assumed"].str.contains("network").all()
    points = {p.point_id: p for p in catalog.published_points(study_models_only=True)}
    from ddlstudy.analysis.costmodel.checks import _ps_servers
    assert _ps_servers(points["tfbench_ec2_k80_resnet152_64gpu"]) == 4
    assert _ps_servers(points["tfbench_ec2_k80_resnet50_64gpu"]) == 8


def test_headline_counts_multi_node_points_only():
    table = M.predict_published()
    med, n, s = M.published_summary(table)
    done = table[table["predicted"].notna()]
    multi = done[done["gpus"] > done["gpus_per_node"]]
    assert n == len(multi) and n < len(done)
    assert med == pytest.approx(multi["rel_error"].abs().median())
    assert s == multi["source"].nunique()
    _, n_all, _ = M.published_summary(table, multi_node_only=False)
    assert n_all == len(done)


def test_projection_label_states_the_published_error():
    v = M.Validation(table=__import__("pandas").DataFrame(), constants=M.Constants(),
                     median_error=0.02, n_cells=10, scale=1.0, note="")
    assert "published" not in v.label
    w = M.with_published(v)
    assert w.published_points >= 8 and not math.isnan(w.published_error)
    assert f"{w.published_error:.0%} against {w.published_points} published multi-node" in w.label


def test_testbeds_readme_states_the_headline_the_model_gives():
    """The figure lib/ddlstudy/testbeds/README.md quotes is the one the model prints now."""
    import re
    from pathlib import Path

    text = (Path(catalog.__file__).parent / "README.md").read_text()
    m = re.search(r"(\d+)\s+points\s+from\s+(\d+)\s+sources,\s+median\s+relative\s+error\s+"
                  r"(\d\.\d\d)", text)
    assert m, "README no longer states the headline"
    med, n, s = M.published_summary(M.predict_published())
    assert (int(m.group(1)), int(m.group(2)), m.group(3)) == (n, s, f"{med:.2f}")


def test_every_published_point_is_on_a_study_model_and_predicted():
    """ResNet-101 and Inception V3 are registered for the Horovod rows: no row is skipped, and
    each multi-node row names the data path its gradients took."""
    table = M.predict_published()
    assert len(table) == len(catalog.published_points())
    assert (table["skipped"] == "").all(), table[table["skipped"] != ""]["point_id"].tolist()
    multi = table[M.multi_node(table)]
    by_path = multi.groupby("path").size().to_dict()
    assert by_path == {"all-reduce on CPU": 9, "all-reduce on GPU": 17, "parameter servers": 18}


def test_data_path_reads_the_framework_text():
    pts = {p.point_id: p for p in catalog.published_points()}
    assert M.data_path(pts["horovod2017_vgg16_16gpu_hvd_tcp_cpu"]) == "all-reduce on CPU"
    assert M.data_path(pts["horovod2017_vgg16_16gpu_hvd_rdma_nccl"]) == "all-reduce on GPU"
    assert M.data_path(pts["horovod2017_vgg16_16gpu_dtf_ps_varcpu"]) == "parameter servers"
