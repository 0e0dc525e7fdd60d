"""The book's parts: cleaned copies of executed notebooks, summaries computed from records, and
one small Sphinx build from a run folder made here (a notebook really executed by a kernel)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from ddlstudy.chapters import summaries
from ddlstudy.report import book

NOISY = [
    ("parameters", "run_dir = 'x'"),
    ("injected-parameters", "run_dir = {run!r}"),
    (None, "import sys, warnings\nprint('kept line')\nprint('oops', file=sys.stderr)\n"
           "warnings.warn('noisy')"),
    (None, "from tqdm.auto import tqdm\nfor _ in tqdm(range(3)): pass"),
    (None, "print({run!r} + '/02_collectives/collectives.csv')"),
    (None, "raise ValueError('bad value')"),
    ("interactive", "import ipywidgets\nipywidgets.IntSlider(description='what-if')"),
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, nbformat.NotebookNode]:
    """A run folder with one notebook executed by a real kernel: stderr, a warning, a tqdm bar,
    an absolute path in stdout and an error, as the chapters' executed copies have."""
    from nbclient import NotebookClient

    run = tmp_path_factory.mktemp("run") / "ci"
    run.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 9. A chapter\n\nIts text, with $a^2 + b^2$.")]
    for tag, src in NOISY:
        cell = nbformat.v4.new_code_cell(src.format(run=str(run.resolve())))
        cell.metadata["tags"] = [tag] if tag else []
        nb.cells.append(cell)
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    nbformat.write(nb, run / "09_demo.ipynb")
    return run, nb


def test_clean_copy_drops_noise_and_paths(executed) -> None:
    run, original = executed
    outputs = [o for c in original.cells for o in c.get("outputs", [])]
    assert any(o.get("name") == "stderr" for o in outputs)  # the noise is really there
    assert str(run.resolve()) in json.dumps(original)
    nb = book.clean_notebook(nbformat.from_dict(json.loads(json.dumps(original))), run,
                             "The summary.")
    text = json.dumps(nb)
    kept = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not any(o.get("name") == "stderr" for o in kept)
    assert not any(book.WIDGET_MIME in o.get("data", {}) for o in kept)
    shown = json.dumps(kept)
    assert "kept line" in shown and "noisy" not in shown and "it/s" not in shown
    assert not re.search(r"/(tmp|home|root|work)/", text), "an absolute path survived"
    errors = [o for o in kept if o["output_type"] == "error"]
    assert [e["traceback"] for e in errors] == [["ValueError: bad value"]]
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all("hide-input" in c.metadata["tags"] or "remove-cell" in c.metadata["tags"]
               for c in code)
    assert "remove-cell" in code[0].metadata["tags"]  # the default parameters: shadowed
    assert "what-if" not in text  # JupyterLab-only sliders: not on the static page
    assert nb.cells[0].source == "# 9. A chapter"  # the summary opens the chapter
    assert "What this run found" in nb.cells[1].source and "The summary." in nb.cells[1].source


def test_scrub_paths(tmp_path: Path) -> None:
    run = tmp_path / "myrun"
    text = f"{run}/02/x.csv and {book.REPO}/params/ci.yaml and /home/someone/data/cifar.tgz"
    out = book.scrub_paths(text, run)
    assert out == "<run folder myrun>/02/x.csv and params/ci.yaml and .../cifar.tgz"


def _collectives(folder: Path, slow: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [("ring", 2, 8, 1e-3, 0), ("tree", 2, 8, 2e-3, 0),
            ("ring", 2, 65536, 4e-3, 0), ("tree", 2, 65536, slow, 0)]
    pd.DataFrame(rows, columns=["algorithm", "ranks", "size_bytes", "time_p50_s", "wrong"]
                 ).to_csv(folder / "collectives.csv", index=False)


def test_summary_follows_the_records(tmp_path: Path) -> None:
    _collectives(tmp_path / "a", slow=9e-3)
    _collectives(tmp_path / "b", slow=1e-3)
    a = summaries.summarize("02_collectives", tmp_path / "a")
    b = summaries.summarize("02_collectives", tmp_path / "b")
    assert "64 KiB" in a and "fastest all-reduce was ring (4 ms" in a and "tree (9 ms)" in a
    assert "fastest all-reduce was tree (1 ms" in b  # other records, other finding
    missing = summaries.summarize("02_collectives", tmp_path / "none")
    assert missing.startswith("No summary") and "collectives.csv" in missing


def test_ps_vs_ring_summary_says_speedup(tmp_path: Path) -> None:
    rows = [("ps_sync", 1, "mlp", 100.0), ("ps_sync", 2, "mlp", 120.0),
            ("allreduce", 1, "mlp", 100.0), ("allreduce", 2, "mlp", 190.0)]
    pd.DataFrame(rows, columns=["strategy", "workers", "model", "images_per_sec"]).to_csv(
        tmp_path / "summary.csv", index=False)
    text = summaries.summarize("03_ps_vs_ring", tmp_path)
    assert "ps_sync 1.20x" in text and "allreduce 1.90x" in text and "share its cores" in text


def test_every_chapter_has_a_summary_function() -> None:
    from ddlstudy.config.params import CHAPTERS

    assert set(CHAPTERS) <= set(summaries.summary_functions())


def test_book_builds_offline(executed) -> None:
    run, _ = executed
    (run / "99_conclusions").mkdir(exist_ok=True)
    pd.DataFrame([{"paper": "Shi 2019", "claim": "ring scales", "value": 1.5,
                   "verdict": "agrees"}]).to_csv(run / "99_conclusions" / "claims.csv",
                                                 index=False)
    pages = [book.Page("09_demo", "09_demo", "ran"), book.Page("99_conclusions",
                                                               "99_conclusions", "not run")]
    meta = {"git_sha": "abc1234", "host": {"hostname": "here"}, "versions": {"torch": "2"}}
    index, seconds = book.build_book(run, pages, meta, "ci", f"run_dir: {run.resolve()}\n")
    landing = index.read_text()
    chapter = (index.parent / "09_demo.html").read_text()
    assert 'class="claims' in landing and "Shi 2019" in landing and "abc1234" in landing
    assert 'href="09_demo.html"' in landing and "99_conclusions (not run)" in landing
    assert "What this run found" in chapter and "a^2 + b^2" in chapter  # math as TeX
    for page in (landing, chapter):
        assert not re.findall(r'(?:src|href)="(?:https?:)?//', page), "a network resource"
        assert str(run.resolve()) not in page and "Traceback" not in page
    assert 0 < seconds < 300


DOCS = ("README.md", "docs/design.md", "docs/metrics.md", "docs/papers.md", "docs/book.md",
        "docs/extending.md")


def test_docs_point_inside_the_repo(repo_root: Path) -> None:
    """README and docs: relative links and `lib/...`/`tests/...`/`params/...` paths exist; papers
    are cited by author and year, not by seed number or folders outside the repository."""
    for name in DOCS:
        text = (repo_root / name).read_text()
        base = (repo_root / name).parent
        for link in re.findall(r"\]\(([^)#\s]+)\)", text):
            if not link.startswith("http"):
                assert (base / link).exists(), f"{name}: link to missing {link}"
        for path in re.findall(r"`((?:lib|tests|params|notebooks|docs)/[\w./-]+)`", text):
            if "<" not in path and "mine" not in path:
                assert (repo_root / path).exists(), f"{name}: names missing {path}"
        bad = re.findall(r"(?i)seed 00\d|steering folder|closing notes|shared/seeds|FINDINGS\.md",
                         text)
        assert not bad, f"{name}: {bad}"


def test_design_examples_name_real_registries() -> None:
    """The worked examples in docs/design.md extend registries that exist under these names."""
    from ddlstudy import collectives, strategies
    from ddlstudy.analysis import costmodel
    from ddlstudy.config import params
    from ddlstudy.network.emulated import netem
    from ddlstudy.workload import models

    assert {"ring", "tree"} <= set(collectives.ALGORITHMS) and callable(costmodel.terms)
    assert "resnet18" in models.MODELS and callable(models.model_table)
    assert "ps_sync" in strategies.STRATEGIES and callable(strategies.register_strategy)
    assert "10GbE" in netem.PROFILES and "10GbE" in params.NETWORKS
    assert set(params.CHAPTERS) <= set(summaries.summary_functions()) and book.HEADLINES
    fields = list(netem.Profile.__dataclass_fields__)
    assert fields[:5] == ["name", "rate_bps", "latency_s", "rate_source", "latency_source"]


def test_claims_table_puts_the_verdict_first() -> None:
    df = pd.DataFrame([{"paper": "Shi 2019", "claim": "q", "chapter": "03_ps_vs_ring",
                        "quantity": "ratio", "value": "2.668654", "ci_low": "1.1620434",
                        "ci_high": "21.58974", "repeats": "2", "verdict": "agrees",
                        "reason": "r"}])
    out = book._claims_table(df)
    assert list(out.columns)[:2] == ["paper", "verdict"]
    assert out["value [95 % interval]"].iloc[0] == "2.67 [1.16, 21.6]"
    old = pd.DataFrame([{"seed": "000", "claim": "q", "this run": "x", "verdict": "agrees"}])
    assert book._claims_table(old).equals(old)  # an older table is shown as it is


def test_code_notebooks_and_params_cite_papers_by_author(repo_root: Path) -> None:
    """lib/, notebooks/, params/ and scripts/ cite papers by author and year too."""
    bad_cite = re.compile(r"(?i)seed 00\d|steering folder|shared/seeds|FINDINGS\.md")
    for folder, globs in {"lib": ["**/*.py"], "notebooks": ["*.ipynb"], "params": ["*.yaml"],
                          "scripts": ["*"]}.items():
        for pattern in globs:
            for path in (repo_root / folder).glob(pattern):
                if path.is_file():
                    found = bad_cite.findall(path.read_text(errors="replace"))
                    assert not found, f"{path.relative_to(repo_root)}: {found}"


PRESENTED = [  # str.format'ed with the chapter folder: braces doubled
    "print('\\n'.join(f'row {{i}}' for i in range(30)))",
    "from pathlib import Path\nPath('outputs') / 'x.csv'",
    "import pandas as pd\npd.DataFrame({{'time_p50_s': [1 / 8.1, float('nan')], "
    "'name': ['a', 'b']}})",
    "%matplotlib inline\nimport matplotlib.pyplot as plt\n"
    "from IPython.display import display\nimport pandas as pd\n"
    "from ddlstudy.analysis import plots\n"
    "df = pd.DataFrame({{'model': ['m'] * 4, 'strategy': ['ps_sync', 'ps_sync', 'allreduce', "
    "'allreduce'], 'workers': [1, 2, 1, 2], 'images_per_sec': [1.0, 2.0, 1.0, 3.0]}})\n"
    "fig = plots.throughput_vs_workers(df, 'Training throughput (emulated)')\n"
    "plots.save(fig, {folder!r}, 'throughput')\ndisplay(fig)\nplt.close(fig)",
]


def _claims_rows() -> pd.DataFrame:
    """A claims.csv as ddlstudy.claims.engine writes it: decided, inconclusive (no interval),
    not measured (NaN everywhere) and set by configuration rows."""
    base = {"quote": "q", "location": "p. 30", "conditions": "GCP", "no_effect": 1.0,
            "margin_low": 0.8, "margin_high": 1.25, "method": "t-log", "chapter": ""}
    nan = float("nan")
    rows = [
        {"paper": "Shi 2019", "claim_id": "shi_ring_scales_better", "claim": "ring scales",
         "quantity": "ratio [03_ps_vs_ring]", "value": 2.668654, "ci_low": 1.1620434,
         "ci_high": 21.58974, "runs": 5, "testbed": "one host", "source": "measured",
         "verdict": "agrees", "reason": "agrees: 95 % interval [1.16, 21.6] lies above 1"},
        {"paper": "Shi 2019", "claim_id": "shi_ps_traffic_proportional", "claim": "PS traffic",
         "quantity": "ratio [10GbE]", "value": 0.986212, "ci_low": nan, "ci_high": nan,
         "runs": 1, "testbed": "emulated", "verdict": "inconclusive",
         "source": "reference run: vm, 2026-11-24, git 0a4b4e3, 126bab8 (22 runs of 13 "
                   "cells); 4 run(s) of uncommitted code left out (not reference material); "
                   "emulated", "reason": "inconclusive: 1 runs (needs 5)"},
        {"paper": "Malik 2018", "claim_id": "malik_same_batch_resnet50", "claim": "same batch",
         "quantity": "ratio [resnet50]", "value": nan, "ci_low": nan, "ci_high": nan,
         "runs": 0, "testbed": "emulated", "source": nan, "verdict": "not measured",
         "reason": "not measured: chapter 09_batch_size is not in this run's "
                   "report.chapters; needs the sweep"},
        {"paper": "Wang (NCHC)", "claim_id": "wang_netpipe_14x", "claim": "IB 14x",
         "quantity": "rate", "value": nan, "ci_low": nan, "ci_high": nan, "runs": 0,
         "testbed": "emulator settings", "source": nan, "verdict": "set by configuration",
         "reason": "set by configuration: the emulated links' rates"},
    ]
    return pd.DataFrame([{**base, **r} for r in rows])


def test_claims_view_is_a_reviewers_table() -> None:
    from ddlstudy.report import claims_view

    df = _claims_rows()
    page = claims_view.claims_html(df)
    assert "nan" not in page.lower().replace("nanoseconds", "")
    assert page.count("<details>") == len(df) and "p. 30" in page  # quote folded under rows
    assert "2.67 [1.16, 21.6], 5 runs" in page  # rounded, with interval and runs
    assert "0.986, 1 run (no interval: a verdict needs 5)" in page
    assert "make report-full" in page and "chapter 09_batch_size" in page  # what to run
    assert ("2 git shas, 22 runs of 13 cells); 4 run(s) of uncommitted code left out"
            in page)  # the reference label shortened, what it counted and left out kept
    assert "\u2014 (set by configuration, not measured)" in page
    assert claims_view.stated_verdicts(page) == [(0, "agrees"), (1, "inconclusive"),
                                                 (2, "not measured"),
                                                 (3, "set by configuration")]
    assert claims_view.check_page(page, df) == []
    wrong = df.assign(verdict=["differs", *df["verdict"][1:]])
    assert any("row 0" in w for w in claims_view.check_page(page, wrong))
    text = f"<p>Per paper: Shi 2019: 2 agrees; Agreeing: Shi 2019.</p>{page}"
    bad = claims_view.check_page(text, df)
    assert any("Shi 2019: page says (2 agrees)" in b for b in bad)
    assert any("Agreeing" in b for b in bad)
    rules = claims_view.rules()
    assert "inconclusive" in rules and "independent runs" in rules and "interval" in rules
    assert claims_view.num(float("nan")) == "\u2014" and claims_view.num(41394.225275) == "4.14e+04"


def _ref_frame(hosts: list[str], shas: list[str], left_out: int = 0) -> pd.DataFrame:
    """A `reference.load` frame: one row per run, two runs of the first cell."""
    df = pd.DataFrame({"strategy": ["ps_sync", "ps_sync", "allreduce"], "workers": [2, 2, 4],
                       "ref_host": hosts, "ref_git_sha": shas,
                       "ref_created": ["2026-11-24T01:00", "2026-11-25T01:00",
                                       "2026-11-26T01:00"]})
    df.attrs["uncommitted_left_out"] = left_out
    return df


@pytest.mark.parametrize("hosts,shas,left_out,want", [
    (["vm"] * 3, ["a" * 40] * 3, 0,
     "reference run (vm, 2026-11-24 to 2026-11-26, aaaaaaa, 3 runs of 2 cells)"),
    (["vm", "vm", "gpu1"], ["a" * 40, "b" * 40, "c" * 40], 4,
     "reference run (gpu1, vm, 2026-11-24 to 2026-11-26, 3 git shas, 3 runs of 2 cells); "
     "4 run(s) of uncommitted code left out (not reference material); emulated"),
])
def test_claims_view_shortens_what_reference_label_writes(hosts: list[str], shas: list[str],
                                                          left_out: int, want: str) -> None:
    """The claims page's source column reads `reference.label`'s own text (the one definition),
    several hosts and the uncommitted-runs tail included."""
    from ddlstudy.records import reference
    from ddlstudy.report import claims_view

    text = reference.label(_ref_frame(hosts, shas, left_out))
    tail = "; emulated" if left_out else ""
    assert claims_view._source(text + tail) == want
    prefix = "chapter 07; "  # text before the label stays
    assert claims_view._source(prefix + text + tail) == prefix + want


def test_lead_figure_from_the_reference_says_its_runs_cells_and_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run without chapter 03's emulated section draws the lead figure from the committed
    reference, labelled by `reference.label` over all its chapters: runs, cells, and the runs of
    uncommitted code each chapter left out, summed."""
    import shutil

    from ddlstudy.records import reference

    src = reference.reference_dir() / "03_ps_vs_ring-emulated-vgg16"
    if not (src / "summary.csv").exists():
        pytest.skip("no committed chapter 03 emulated reference for vgg16")
    ref = tmp_path / "ref"
    for name in ("03_ps_vs_ring-emulated-vgg16", "03_ps_vs_ring-emulated-alexnet"):
        shutil.copytree(src, ref / name, ignore=shutil.ignore_patterns("*.pt"))
    run = next((ref / "03_ps_vs_ring-emulated-alexnet" / "runs").iterdir())
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "git_sha": "f" * 40 + "+dirty",
                                               "code_commit": None}))
    monkeypatch.setattr(reference, "reference_dir", lambda: ref)
    (tmp_path / "book" / "_static" / "data").mkdir(parents=True)
    html_text = book._lead(tmp_path / "run", [], tmp_path / "book")
    pooled = pd.concat([reference.load(n) for n in sorted(p.name for p in ref.iterdir())])
    n = reference.counted(pooled)
    assert f"({n}); 1 run(s) of uncommitted code left out" in html_text, html_text
    assert not hasattr(book, "reference_label")  # one definition: reference.label


def test_book_states_claims_csv_verdicts_and_presents_outputs(tmp_path: Path) -> None:
    """A rendered book: every page's verdicts equal claims.csv's; long stdout moved to a linked
    log, no PosixPath, tables rounded with units and no NaN, figures numbered and captioned
    with their data linked, parameters folded, claims.csv linked."""
    from nbclient import NotebookClient

    from ddlstudy.report import claims_view

    run = tmp_path / "run"
    folder = run / "02_collectives"
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 2. Collectives")]
    nb.cells += [nbformat.v4.new_code_cell(src.format(folder=str(folder))) for src in PRESENTED]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    nbformat.write(nb, run / "02_collectives.ipynb")
    (run / "99_conclusions").mkdir()
    claims = _claims_rows()
    claims.to_csv(run / "99_conclusions" / "claims.csv", index=False)
    c99 = nbformat.v4.new_notebook()
    c99.cells = [nbformat.v4.new_markdown_cell("# 99. Conclusions")]
    nbformat.write(c99, run / "99_conclusions.ipynb")
    pages = [book.Page("02_collectives", "02_collectives", "ran"),
             book.Page("99_conclusions", "99_conclusions", "ran")]
    index, _ = book.build_book(run, pages, {"git_sha": "abc"}, "t", "a: 1\nb: 2\n")
    report = index.parent
    for page in report.glob("*.html"):
        text = page.read_text()
        assert claims_view.check_page(text, claims) == [], page.name
        assert "PosixPath" not in text, page.name
    landing, chapter = index.read_text(), (report / "02_collectives.html").read_text()
    c99_html = (report / "99_conclusions.html").read_text()
    assert len(claims_view.stated_verdicts(c99_html)) == len(claims)
    assert '<details class="params">' in landing and "claims.csv" in landing
    assert (report / "_static" / "data" / "claims.csv").exists()
    assert 'alt="Verdicts by paper' in landing
    logs = list((report / "_static" / "logs").glob("*.txt"))
    assert len(logs) == 1 and "row 29" in logs[0].read_text()
    assert "row 29" not in chapter and "full output (30 lines" in chapter
    assert "0.1235" in chapter and "0.12345679" not in chapter
    assert "time_p50_s (s)" in chapter and ">NaN<" not in chapter
    assert re.search(r'alt="Figure 2\.1: Training throughput \(emulated\)', chapter)
    assert "02_collectives-throughput.csv" in chapter
    assert (report / "_static" / "data" / "02_collectives-throughput.csv").exists()


# --- item 2: a chapter's prose states a paper's verdict only as the claims engine decided it
# a verdict word, or a paper's expectation, in one sentence with a paper (or "theirs")
# ("What differs from the papers: ..." lists conditions, not a verdict)
_VERDICT = (r"(agree\w*|(?<!what )differ\w*|confirm\w*|contradict\w*|inconclusive"
            r"|expect\w*|theirs)")
_PAPER = r"(paper\w*|theirs|they|Shi|Wang|Malik|Fourie|Pani|Rajbhandari|Vogels|Jiang|Zhao)"
PAPER_VERDICT = re.compile(rf"\b{_PAPER}\b[^.]*\b{_VERDICT}|\b{_VERDICT}[^.]*\b{_PAPER}\b",
                           re.I)
# the functions through which a chapter may state a claim's verdict: the engine's own rows
ENGINE_CALLS = {"chapter_claims", "claims_text", "claims_summary", "verdict_counts"}


def _literal_text(node) -> str:
    """A string constant's text; an f-string's literal parts with {} for each field."""
    import ast

    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else ""
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def test_chapter_sources_word_no_verdict_of_their_own(repo_root: Path) -> None:
    """Every string in a chapter module that words a paper's verdict sits in a function that
    takes it from the claims engine (chapter_claims / claims_text / the counts of claims.csv),
    so a chapter page and chapter 99 cannot disagree."""
    import ast

    own = []
    for path in sorted((repo_root / "lib/ddlstudy/chapters").glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            calls = {getattr(c.func, "id", getattr(c.func, "attr", "")) for c in ast.walk(fn)
                     if isinstance(c, ast.Call)}
            if calls & ENGINE_CALLS:
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Constant | ast.JoinedStr) and not (
                        fn.body and isinstance(fn.body[0], ast.Expr)
                        and fn.body[0].value is node):  # docstrings explain, they state nothing
                    text = _literal_text(node)
                    if PAPER_VERDICT.search(text):
                        own.append(f"{path.name}:{node.lineno} {fn.name}: {text[:80]!r}")
    assert not own, "chapter prose wording a paper's verdict itself:\n" + "\n".join(own)


def _verdict_rows() -> pd.DataFrame:
    return pd.DataFrame([
        {"paper": "Shi 2019", "claim_id": "a", "claim": "PS levels off", "verdict": "agrees"},
        {"paper": "Shi 2019", "claim_id": "b", "claim": "ring proportional",
         "verdict": "differs"},
        {"paper": "Shi 2019", "claim_id": "c", "claim": "ring better", "verdict": "differs"},
        {"paper": "Wang (NCHC)", "claim_id": "d", "claim": "IB 89 %",
         "verdict": "inconclusive: 2 runs (needs 5)"},
        {"paper": "Malik 2018", "claim_id": "e", "claim": "almost linear",
         "verdict": "agrees"}])


def test_generated_prose_states_claims_csv(tmp_path: Path, repo_root: Path) -> None:
    """Generated prose, run on records: chapter 99's summary counts claims.csv's verdicts per
    paper (a flipped verdict is caught), says no 'Agreeing' of a paper with a differing claim;
    the committed reference chapters' summaries and chapter 06's findings word no verdict."""
    from types import SimpleNamespace

    from ddlstudy.chapters import ch06_projection as ch06
    from ddlstudy.report import claims_view

    claims = _verdict_rows()
    claims.to_csv(tmp_path / "claims.csv", index=False)
    text = summaries.conclusions(tmp_path)
    assert "Shi 2019: 1 agrees, 2 differs" in text and "Agreeing" not in text, text
    assert claims_view.check_page(text, claims) == []
    flipped = claims.assign(verdict=claims["verdict"].replace({"differs": "agrees"}))
    assert claims_view.check_page(text, flipped), "a count that differs went unnoticed"

    said = {}
    for folder in sorted(p for p in (repo_root / "results/reference").iterdir() if p.is_dir()):
        chapter = next(c for c in summaries.summary_functions() if folder.name.startswith(c))
        said[folder.name] = summaries.summarize(chapter, folder)
    proj = pd.DataFrame([{"model": m, "strategy": s, "workers": n, "images_per_sec": 10.0 * n}
                         for m in ("alexnet", "vgg16") for s in ("ps_sync", "allreduce")
                         for n in (1, 6)])
    wang = pd.DataFrame([{"profile": p, "workers": 64, "efficiency": e}
                         for p, e in (("IB-EDR", 0.4), ("10GbE", 0.6))])  # their order reversed
    malik = pd.DataFrame([{"model": "alexnet", "workers": 512, "images_per_sec": 1.0,
                           "setup": "allreduce (10GbE)", "efficiency": 0.5}])
    S = SimpleNamespace(J=SimpleNamespace(workers=[1, 6], profile="10GbE", replay_source="gpu",
                                          compute_scale=1.0, scaling_workers=[1, 512]),
                        V=SimpleNamespace(n_cells=0), shi=proj, wang=wang, malik=malik,
                        label="projected (analytic)")
    said["06 findings"] = ch06.text(S)
    wording = {k: PAPER_VERDICT.search(v).group(0) for k, v in said.items()
               if PAPER_VERDICT.search(v)}
    assert not wording, f"generated prose wording a verdict of its own: {wording}"
    assert "89 %" in said["06 findings"] and "chapter 99" in said["06 findings"]
