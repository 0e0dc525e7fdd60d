"""One registry per concept: nothing lists registered names by hand; params, the CLI and the cost
model derive from the registries; the docs' worked examples (docs/extending.md) really run."""

from __future__ import annotations

import argparse
import ast
import math
import re
import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from ddlstudy import collectives
from ddlstudy.analysis import costmodel
from ddlstudy.cluster.engines import Cluster
from ddlstudy.collectives import ALGORITHMS, unregister_algorithm
from ddlstudy.config import params
from ddlstudy.network.emulated import netem
from ddlstudy.strategies import STRATEGIES, get_strategy, unregister_strategy
from ddlstudy.train.trainer import TrainConfig, train
from ddlstudy.workload import catalog as workloads

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib" / "ddlstudy"
DOC = ROOT / "docs" / "extending.md"
# The registries themselves (their built-in entries are the one place names are typed).
REGISTRY_FILES = {"collectives/registry.py", "strategies/registry.py", "workloads.py"}
# Deliberate selections, not copies of a registry: the names a paper's claim is about.
SELECTIONS = {
    ("bench/train.py", "VS_DDP"): "the bench variants compared with ddp",
    ("experiments/frameworks.py", "TF_PS_ORDER"):
        "Wang's 'Distributed TF' parameter servers, in order",
    ("chapters/ch00_background.py", "DEMO_ALGORITHMS"): "the algorithms chapter 00 steps through",
    ("chapters/ch00_background.py", "WORKED_ALGORITHMS"): "chapter 00's worked cost examples",
    ("chapters/ch02_collectives.py", "LOG_DEPTH"): "Fourie 2019's tree/butterfly family",
    ("chapters/ch02_collectives.py", "BANDWIDTH_OPTIMAL"): "the 2(p-1)/p n family chapter 02 "
                                                           "contrasts with it",
    ("chapters/ch04_utilization_traffic.py", "STRATEGIES"): "Shi 2019's pair: PS vs ring",
    ("chapters/ch08_convergence.py", "RING_BASED"): "Fourie 2019's ring-based side",
    ("chapters/ch08_convergence.py", "TREE_BASED"): "Fourie 2019's tree/butterfly side",
    ("report/book.py", "LEAD_MODELS"): "the order the landing page tries chapter 03's models",
}


def _concepts() -> dict[str, set[str]]:
    return {"strategy": set(STRATEGIES), "algorithm": set(ALGORITHMS),
            "model": set(workloads.MODELS), "dataset": set(workloads.DATASETS),
            "shape": set(workloads.SHAPES), "profile": set(netem.PROFILES)}


def _literal_names(node: ast.AST | None) -> list[str]:
    if not isinstance(node, ast.Tuple | ast.List | ast.Set):
        return []
    return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _candidates(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """(literal, the name it is assigned to or '') where a hand list would stand in for a
    registry: assignments, `in (...)` tests, choices=, Literal[...], parameter defaults."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            name = next((t.id for t in targets if isinstance(t, ast.Name)), "")
            yield node.value, name
        elif isinstance(node, ast.Compare):
            for op, comp in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, ast.In | ast.NotIn):
                    yield comp, ""
        elif isinstance(node, ast.keyword) and node.arg == "choices":
            yield node.value, ""
        elif isinstance(node, ast.Subscript) and (
                getattr(node.value, "id", None) == "Literal"
                or getattr(node.value, "attr", None) == "Literal"):
            yield node.slice, ""
        elif isinstance(node, ast.arguments):
            yield from ((d, "") for d in [*node.defaults, *node.kw_defaults] if d is not None)


def hand_lists(source: str, rel: str, concepts: dict[str, set[str]]) -> list[str]:
    """Every literal of >= 2 names of one registered concept in `source`, as 'file:line: ...'."""
    found = []
    for node, name in _candidates(ast.parse(source)):
        if (rel, name) in SELECTIONS:
            continue
        names = _literal_names(node)
        for concept, registered in concepts.items():
            hits = [n for n in names if n in registered]
            if len(hits) >= 2:
                found.append(f"{rel}:{node.lineno}: {concept} names {hits} typed by hand")
    return found


def test_no_module_lists_registered_names_by_hand() -> None:
    concepts = _concepts()
    found = []
    for path in sorted(LIB.rglob("*.py")):
        rel = path.relative_to(LIB).as_posix()
        if rel not in REGISTRY_FILES:
            found += hand_lists(path.read_text(), rel, concepts)
    assert not found, "derive these from the registry (docs/extending.md):\n" + "\n".join(found)


def test_the_scan_catches_each_kind_of_hand_list() -> None:
    concepts = _concepts()
    bad = {
        "X = ('ps_sync', 'ps_async')": "strategy",
        "if s in ('allreduce', 'ddp'):\n    pass": "strategy",
        "p.add_argument('--m', choices=['resnet18', 'mlp'])": "model",
        "shape: Literal['cifar', 'mnist'] = 'cifar'": "shape",
        "def f(which=('mnist', 'fashion_mnist')):\n    pass": "dataset",
        "NETS = {'10GbE', 'IB-EDR'}": "profile",
    }
    for source, concept in bad.items():
        found = hand_lists(source, "x.py", concepts)
        assert len(found) == 1 and concept in found[0], (source, found)
    fine = ["X = ('ps_sync',)", "if s == 'ps_async':\n    pass", "X = ['ring', 'not-a-name']",
            "X = strategy_names(family='ps')", "RING_BASED = ('ring', 'ring_pipelined')"]
    assert [f for s in fine for f in hand_lists(s, "chapters/ch08_convergence.py", concepts)] == []


# ----------------------------------------------------------------------------- derived views
def test_params_accept_exactly_the_registries() -> None:
    assert list(params.STRATEGY_NAMES) == list(STRATEGIES)
    assert list(params.ALGORITHM_NAMES) == list(ALGORITHMS)
    assert list(params.MODEL_NAMES) == list(workloads.MODELS)
    assert list(params.DATASETS) == list(workloads.DATASETS)
    assert list(params.NETWORKS) == ["none", *netem.PROFILES]
    assert list(params.LOCAL_STRATEGY_NAMES) == [s for s in STRATEGIES
                                                 if not get_strategy(s).framework]
    assert params.TrainingParams(strategies=list(STRATEGIES)).strategies == list(STRATEGIES)
    assert params.CollectivesParams(algorithms=list(ALGORITHMS)).algorithms == list(ALGORITHMS)
    for bad in ({"strategies": ["gossip"]}, {"models": ["resnet9000"]}, {"dataset": "imagenet"},
                {"shape": "svhn"}, {"network": "100GbE"}):
        with pytest.raises(ValueError, match="unknown"):
            params.TrainingParams(**bad)


def test_params_servers_follow_the_specs() -> None:
    t = params.TrainingParams(servers=3)
    for name, spec in STRATEGIES.items():
        own = (3 if spec.servers_configurable else spec.default_servers) if spec.needs_servers \
            else 0
        assert t.servers_for(name) == own + spec.extra_engines, name
        cfg = TrainConfig(strategy=name, workers=2, servers=3 if spec.servers_configurable
                          else None)
        assert cfg.world_size == 2 + t.servers_for(name), name


def _train_parser() -> argparse.ArgumentParser:
    from ddlstudy.cli.train import _parser

    return _parser()


def test_cli_choices_are_the_registries() -> None:
    actions = {a.dest: a for a in _train_parser()._actions}
    assert list(actions["strategy"].choices) == list(STRATEGIES)
    assert list(actions["algorithm"].choices) == list(ALGORITHMS)
    assert list(actions["model"].choices) == list(workloads.MODELS)
    assert list(actions["dataset"].choices) == list(workloads.DATASETS)
    assert list(actions["shape"].choices) == list(workloads.SHAPES)
    from ddlstudy.bench import collectives as bench

    bench_parser = argparse.ArgumentParser()
    bench.add_arguments(bench_parser)
    assert bench_parser.parse_args([]).algorithms == list(ALGORITHMS)


def test_costmodel_covers_every_strategy_or_says_why_not() -> None:
    link = costmodel.profile_link("10GbE")
    gaps = costmodel.unmodelled()
    for name in STRATEGIES:
        if name in gaps:
            assert name not in costmodel.STEP_STRATEGIES and gaps[name]
            continue
        step = costmodel.predict_step(name, "resnet18", 4, link, 0.1, sizes=[1 << 20] * 4)
        assert math.isfinite(step.total(costmodel.Constants())), name
    assert set(gaps) | set(costmodel.STEP_STRATEGIES) == set(STRATEGIES)
    for alg in ALGORITHMS:
        a, b, g = costmodel.terms(alg, 1 << 20, 6)
        assert a > 0 and b > 0 and g >= 0, alg


def test_every_algorithm_moves_its_analytic_traffic_in_process() -> None:
    """The registered traffic of every hand-written algorithm equals what `Comm` counted."""
    for alg in collectives.hand_written():
        for p in (2, 3, 5, 6):
            xs = [torch.randn(240, dtype=torch.float64) for _ in range(p)]
            outs, traffic = collectives.run_local(alg, xs)
            assert torch.allclose(outs[0], sum(xs)), (alg, p)
            for r, t in enumerate(traffic):
                assert (t.sent_bytes, t.recv_bytes) == collectives.analytic_traffic(
                    alg, 240 * 8, p, r), (alg, p, r)


def test_registries_import_no_torch() -> None:
    """params and its CLI read the registries; torch alone would cost ~220 MB and seconds."""
    code = ("import sys, ddlstudy.config.params, ddlstudy.strategies, ddlstudy.collectives; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_a_bad_registration_is_one_line() -> None:
    from ddlstudy.strategies import StrategySpec, register_strategy

    with pytest.raises(ValueError, match="already registered"):
        register_strategy(StrategySpec("ddp", "x:y", family="allreduce"))
    with pytest.raises(ValueError, match="needs default_servers"):
        StrategySpec("toy_ps", "x:y", family="ps")
    with pytest.raises(ValueError, match="unknown strategy 'gossip'; valid: single"):
        get_strategy("gossip")


@pytest.mark.parametrize("name", ["strategies", "algorithms"])
def test_docs_tables_are_the_registries(name: str) -> None:
    """docs/extending.md's tables of built-ins are generated from the registries, not typed."""
    from ddlstudy.collectives.registry import algorithm_table
    from ddlstudy.registry import markdown_table
    from ddlstudy.strategies.registry import spec_table

    rows = spec_table() if name == "strategies" else algorithm_table()
    want = markdown_table(rows)
    got = re.search(rf"<!-- registry: {name} -->\n(.*?)<!-- /registry -->", DOC.read_text(),
                    re.S).group(1)
    assert got == want, f"docs/extending.md: replace the {name} table with\n{want}"


# ----------------------------------------------------------------------------- docs' examples
def _doc_block(heading: str) -> str:
    """The first python block under `heading` in docs/extending.md."""
    text = DOC.read_text()
    section = text[text.index(f"## {heading}"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_docs_algorithm_example_registers_and_runs(tmp_path: Path) -> None:
    path = tmp_path / "direct.py"
    path.write_text(_doc_block("An all-reduce algorithm"))
    runpy.run_path(str(path))
    try:
        assert "direct" in params.ALGORITHM_NAMES and "direct" in costmodel.ALGORITHMS
        xs = [torch.randn(50, dtype=torch.float64) for _ in range(3)]
        outs, traffic = collectives.run_local("direct", xs)
        assert all(torch.equal(outs[0], o) for o in outs) and torch.allclose(outs[0], sum(xs))
        assert (traffic[1].sent_bytes, traffic[1].recv_bytes) == \
            collectives.analytic_traffic("direct", 50 * 8, 3, 1)
        assert costmodel.terms("direct", 800, 3) == (2, 1600, 1600)
        assert _train_parser().parse_args(["--algorithm", "direct"]).algorithm == "direct"
    finally:
        unregister_algorithm("direct")
    assert "direct" not in params.ALGORITHM_NAMES


EXACT = dict(model="mlp", dataset="digits", dtype="float64", lr=0.5, steps=2, warmup_steps=0,
             seed=3, eval=False)


def test_docs_strategy_example_trains_and_is_seen_everywhere(cluster: Cluster) -> None:
    """The worked example: registered here and on the engines, trained 2 steps on 2 workers
    (weights equal single with batch 2b), visible to params, CLI and cost model; then gone."""
    code = _doc_block("A strategy")
    exec(code, {"__name__": "weight_average_example"})
    try:
        cluster.run(exec, code, {"__name__": "weight_average_example"}, world_size=cluster.size)
        assert params.TrainingParams(strategies=["weight_average"]).strategies
        assert _train_parser().parse_args(["--strategy", "weight_average"]).strategy == \
            "weight_average"
        assert "weight_average" in costmodel.STEP_STRATEGIES
        config = TrainConfig(strategy="weight_average", algorithm="tree", workers=2,
                             batch_size=8, **EXACT)
        assert config.label.startswith("weight_average/tree")
        res = train(cluster, config, progress=False, return_weights=True)
        single = train(cluster, TrainConfig(strategy="single", workers=1, batch_size=16,
                                            **EXACT), progress=False, return_weights=True)
        assert torch.allclose(res.weights, single.weights, rtol=1e-9, atol=1e-12)
        assert res.row["bytes_source"] == "counted" and res.row["bytes_sent_per_step"] > 0
        assert res.row["algorithm"] == "tree"
    finally:
        unregister_strategy("weight_average")
        cluster.run(unregister_strategy, "weight_average", world_size=cluster.size)
    assert "weight_average" not in params.STRATEGY_NAMES
    with pytest.raises(ValueError, match="unknown strategy"):
        TrainConfig(strategy="weight_average").validate()


def test_docs_chapter_example_registers_everywhere(tmp_path: Path) -> None:
    """The worked chapter example: registered, it validates in params, shows in the README's
    chapter table and summarises a folder from its table; unregistered, it is gone."""
    import sys
    import types

    from ddlstudy.chapters.registry import CHAPTERS, get_chapter, table_known
    from ddlstudy.report import readme

    module = types.ModuleType("latency_example")
    sys.modules["latency_example"] = module
    exec(_doc_block("A chapter"), module.__dict__)
    try:
        assert params.ReportParams(chapters=["11_latency"]).chapters == ["11_latency"]
        assert "`11_latency`" in readme.BLOCKS["chapters"](tmp_path)
        assert table_known("11_latency", "latency") and not table_known("11_latency", "other")
        (tmp_path / "latency.csv").write_text("bytes,p50_us\n8,30.5\n1024,41.0\n")
        assert get_chapter("11_latency").summarize(tmp_path) == \
            "Lowest median latency: 30.5 us at 8 bytes."
    finally:
        CHAPTERS.unregister("11_latency")
        sys.modules.pop("latency_example", None)
    with pytest.raises(ValueError, match="chapter"):
        params.ReportParams(chapters=["11_latency"])


def test_docs_claim_example_is_judged_like_the_built_ins(tmp_path: Path) -> None:
    """The worked claim example: registered (its table declared by the example chapter), it is
    judged from independent runs (5 runs: a decision; 3 runs: inconclusive); a claim reading an
    undeclared table is refused at registration; unregistered, it is gone."""
    import sys
    import types

    import pandas as pd

    from ddlstudy.chapters.registry import CHAPTERS
    from ddlstudy.claims import engine
    from ddlstudy.claims.registry import CLAIMS

    module = types.ModuleType("latency_example")
    sys.modules["latency_example"] = module
    exec(_doc_block("A chapter"), module.__dict__)
    claim_code = _doc_block("A claim")
    try:
        exec(claim_code, {"__name__": "claim_example"})
        assert "example_latency_under_50us" in CLAIMS
        folder = tmp_path / "11_latency"
        folder.mkdir()

        def judged(p50s: list[float]) -> dict:
            pd.DataFrame([{"bytes": 8, "repeat": k, "p50_us": v} for k, v in enumerate(p50s)]
                         ).to_csv(folder / "latency.csv", index=False)
            table = engine.claims_table(tmp_path, {"11_latency": ["11_latency"]},
                                        [CLAIMS["example_latency_under_50us"]])
            return table.iloc[0].to_dict()

        assert judged([30.1, 30.4, 29.8, 30.0, 30.2])["verdict"] == "agrees"
        assert judged([80.1, 80.4, 79.8, 80.0, 80.2])["verdict"] == "differs"
        row = judged([30.1, 30.4, 29.8])
        assert row["verdict"] == "inconclusive" and "3 runs" in row["reason"]
        bad = claim_code.replace('("11_latency", "latency")', '("11_latency", "nope")')
        bad = bad.replace("example_latency_under_50us", "example_bad")
        with pytest.raises(ValueError, match="declares no table 'nope'"):
            exec(bad, {"__name__": "claim_example_bad"})
    finally:
        CLAIMS.unregister("example_latency_under_50us")
        CHAPTERS.unregister("11_latency")
        sys.modules.pop("latency_example", None)
    assert "example_latency_under_50us" not in CLAIMS
