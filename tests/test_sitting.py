"""`python -m ddlstudy.records.sitting`: a reference sitting runs HEAD's code from a throwaway
worktree, stops at its deadline or on a signal keeping nothing running, and leaves no worktree."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ddlstudy.records import sitting
from ddlstudy.records.sitting import SittingError, check_params, deadline

SMOKE = ["params/default.yaml", "params/sitting-smoke.yaml"]
CI = ["params/default.yaml", "params/ci.yaml"]  # minutes: a deadline of seconds always hits


def _left_behind(where: Path) -> list[str]:
    """Processes whose command line or working directory is inside `where` (the tests put
    their sittings' worktrees there, so a real sitting beside them does not count)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if str(where) in cmd + cwd:
            found.append(f"{proc.name}: {cmd[:120]}")
    return found


def _worktrees(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "worktree", "list"], capture_output=True,
                          text=True, check=True).stdout


def _head(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def test_deadline_is_the_sooner_of_until_and_max_s():
    now = dt.datetime(2026, 11, 27, 11, 0, 0)
    assert deadline("11:30", None, now) == 1800
    assert deadline("11:30", 60, now) == 60
    assert deadline(None, None, now) == float("inf")
    with pytest.raises(SittingError, match="has passed"):
        deadline("10:59", None, now)
    with pytest.raises(SittingError, match="HH:MM"):
        deadline("25:99", None, now)
    with pytest.raises(SittingError, match="> 0"):
        deadline(None, 0, now)


def test_layers_head_does_not_hold_are_copied_in_untracked(tmp_path: Path):
    """HEAD's copy runs where HEAD holds a params file unchanged; an uncommitted, edited or
    outside file is copied into the worktree under LOCAL (untracked: the code stays clean)."""
    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    (repo / "params").mkdir(parents=True)
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    for name in ("a", "b"):
        (repo / "params" / f"{name}.yaml").write_text(f"run_id: {name}\n")
    subprocess.run([*git, "add", "params"], check=True)
    subprocess.run([*git, "commit", "-qm", "p"], check=True)
    (repo / "params" / "c.yaml").write_text("run_id: c\n")
    (repo / "params" / "b.yaml").write_text("run_id: edited\n")
    (tmp_path / "outside.yaml").write_text("run_id: o\n")
    layers = check_params(["params/a.yaml", str(repo / "params" / "b.yaml"), "params/c.yaml",
                           str(tmp_path / "outside.yaml")], repo)
    assert layers == [("params/a.yaml", None),
                      (f"{sitting.LOCAL}/01-b.yaml", (repo / "params" / "b.yaml").resolve()),
                      (f"{sitting.LOCAL}/02-c.yaml", (repo / "params" / "c.yaml").resolve()),
                      (f"{sitting.LOCAL}/03-outside.yaml", (tmp_path / "outside.yaml").resolve())]
    with pytest.raises(SittingError, match="no such params file"):
        check_params(["params/d.yaml"], repo)
    with pytest.raises(SittingError, match="no params file"):
        check_params([], repo)


def test_outside_a_git_checkout_it_says_so(tmp_path: Path):
    (tmp_path / "p.yaml").write_text("run_id: x\n")
    with pytest.raises(SittingError, match="is not a git checkout"):
        sitting.run([str(tmp_path / "p.yaml")], tmp_path / "out", 10.0, root=tmp_path)


@pytest.mark.parametrize("args, match", [
    (["--until", "25:99"], "is not a time of day"),
    (["--max-s", "-1"], "must be > 0"),
    (["--out", "results/x"], "is under results/"),
    (["params/nope.yaml"], "no such params file"),
])
def test_cli_bad_input_is_one_line_exit_2(repo_root: Path, tmp_path: Path, args: list[str],
                                          match: str):
    out = [] if "--out" in args else ["--out", str(tmp_path / "o")]
    params = [] if any(a.endswith(".yaml") for a in args) else SMOKE
    proc = subprocess.run([sys.executable, "-m", "ddlstudy.records.sitting", *out, *args,
                           *params], cwd=repo_root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], lines
    assert not (tmp_path / "o").exists()


@pytest.fixture(autouse=True)
def _worktrees_in_tmp(tmp_path: Path, monkeypatch) -> None:
    """Each test's sitting makes its worktree under its own tmp_path."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))


def test_a_sitting_runs_heads_code_and_leaves_no_worktree(repo_root: Path, tmp_path: Path,
                                                          capsys):
    """Whatever the checkout holds uncommitted, the run's record names HEAD, clean; a layer
    from outside the repository runs too, and the record holds what it set."""
    before = _worktrees(repo_root)
    layer = tmp_path / "mine.yaml"
    layer.write_text((repo_root / SMOKE[1]).read_text() + "seed: 7\n")
    assert sitting.run([SMOKE[0], str(layer)], tmp_path / "out", 600.0, root=repo_root) == 0
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["git_sha"] == _head(repo_root)  # no "+dirty": the worktree's code ran
    assert meta["params"]["seed"] == 7 and meta["params"]["run_id"] == "sitting-smoke"
    assert (tmp_path / "out" / "00_background.ipynb").is_file()
    assert _worktrees(repo_root) == before and not _left_behind(tmp_path)
    out = capsys.readouterr().out
    assert "(a worktree of HEAD)" in out and "mine.yaml is not HEAD's" in out


def test_the_deadline_stops_it_and_nothing_outlives_it(repo_root: Path, tmp_path: Path,
                                                       capsys):
    before = _worktrees(repo_root)
    t0 = time.monotonic()
    assert sitting.run(CI, tmp_path / "out", 8.0, root=repo_root, grace_s=30.0) == 124
    assert time.monotonic() - t0 < 8.0 + 30.0 + 30.0
    assert "stopped by deadline" in capsys.readouterr().out
    assert _worktrees(repo_root) == before and not _left_behind(tmp_path)


def test_sigterm_to_the_sitting_is_passed_on(repo_root: Path, tmp_path: Path):
    """A SIGTERM to `python -m ddlstudy.records.sitting` stops the report (SIGTERM, then
    SIGKILL after the grace), removes the worktree and exits 128 + 15."""
    before = _worktrees(repo_root)
    proc = subprocess.Popen([sys.executable, "-m", "ddlstudy.records.sitting", "--out",
                             str(tmp_path / "out"), "--grace-s", "30", *CI], cwd=repo_root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = proc.stdout.readline()  # printed once the worktree exists, before the report starts
    assert first.startswith("sitting: "), first
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "stopped by SIGTERM" in out
    assert _worktrees(repo_root) == before and not _left_behind(tmp_path)


def test_the_add_runs_lines_send_each_chapter_to_its_reference_folder(tmp_path: Path):
    for chapter, testbed in (("03_ps_vs_ring-emulated-vgg19", "shi2019"),
                             ("03_ps_vs_ring-emulated-alexnet", None),
                             ("05_network_profiles", None)):
        run = tmp_path / chapter / "runs" / "cell"
        run.mkdir(parents=True)
        (run / "meta.json").write_text(json.dumps({"network": {"testbed": testbed}}))
    (tmp_path / "00_background").mkdir()  # no runs: nothing to pool
    pool = "python -m ddlstudy.records.reference add-runs"
    assert sitting.add_runs_lines(tmp_path) == [
        f"{pool} {tmp_path}/03_ps_vs_ring-emulated-alexnet "
        "results/reference/03_ps_vs_ring-emulated-alexnet",
        f"{pool} {tmp_path}/03_ps_vs_ring-emulated-vgg19 "
        "results/reference/03_ps_vs_ring-testbed-shi2019-vgg19",
        f"{pool} {tmp_path}/05_network_profiles results/reference/05_network_profiles"]
    assert sitting.add_runs_lines(tmp_path / "missing") == []


def test_a_process_that_left_the_sittings_session_is_found_and_killed():
    """A child in a session of its own (as a notebook kernel is) escapes killpg; it still
    carries the sitting's tag in its environment, and the sweep kills it."""
    tag = f"test-{os.getpid()}"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=dict(os.environ, **{sitting.TAG: tag}), start_new_session=True)
    try:
        deadline_t = time.monotonic() + 10
        while child.pid not in sitting.stragglers(tag) and time.monotonic() < deadline_t:
            time.sleep(0.05)
        assert sitting.stragglers(tag) == [child.pid]
        assert sitting._sweep(tag) == 1
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert sitting.stragglers(tag) == []
    finally:
        if child.poll() is None:
            child.kill()


def _plan(path: Path, stages: list[dict]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({"stages": stages}))
    return path


@pytest.mark.parametrize("stages, match", [
    ([], "has no `stages:` list"),
    ([{"params": SMOKE}], "stage 1: give `out`"),
    ([{"out": "OUT", "params": SMOKE, "when": "now"}], "stage 1: unknown key(s) ['when']"),
    ([{"out": "OUT", "params": SMOKE}, {"out": "OUT", "params": ["params/nope.yaml"]}],
     "stage 2: params/nope.yaml: no such params file"),
    ([{"out": "results/x", "params": SMOKE}], "stage 1: --out results/x is under results/"),
    ([{"out": "OUT", "params": SMOKE, "until": "25:99"}], "stage 1: --until '25:99'"),
])
def test_plan_bad_input_is_one_line_naming_the_stage(repo_root: Path, tmp_path: Path,
                                                     stages: list[dict], match: str):
    """Every stage is checked before any runs: one line, exit 2, nothing written."""
    stages = [{k: (str(tmp_path / "o") if v == "OUT" else v) for k, v in s.items()}
              for s in stages]
    plan = _plan(tmp_path / "plan.yaml", stages)
    proc = subprocess.run([sys.executable, "-m", "ddlstudy.records.sitting", "--plan",
                           str(plan)], cwd=repo_root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --plan ") and match in lines[0], lines
    assert not (tmp_path / "o").exists()


def test_plan_with_params_or_out_too_is_one_line(repo_root: Path, tmp_path: Path):
    plan = _plan(tmp_path / "plan.yaml", [{"out": str(tmp_path / "o"), "params": SMOKE}])
    proc = subprocess.run([sys.executable, "-m", "ddlstudy.records.sitting", "--plan",
                           str(plan), "--out", str(tmp_path / "x")], cwd=repo_root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--plan takes no params" in proc.stderr


def test_a_plan_runs_its_stages_in_order(repo_root: Path, tmp_path: Path, capsys):
    """Two sittings from one plan, each from its own worktree of HEAD, nothing left after."""
    before = _worktrees(repo_root)
    stages = sitting.read_plan(_plan(tmp_path / "plan.yaml", [
        {"out": str(tmp_path / "a"), "params": SMOKE, "max_s": 600},
        {"out": str(tmp_path / "b"), "params": SMOKE}]), repo_root)
    assert sitting.run_plan(stages, root=repo_root) == 0
    for out in ("a", "b"):
        meta = json.loads((tmp_path / out / "meta.json").read_text())
        assert meta["git_sha"] == _head(repo_root)
    printed = capsys.readouterr().out
    assert printed.index("stage 1 of 2") < printed.index("stage 2 of 2")
    assert _worktrees(repo_root) == before and not _left_behind(tmp_path)


def test_a_signal_stops_the_plan_not_only_its_stage(repo_root: Path, tmp_path: Path):
    """SIGTERM during stage 1 stops it (finished runs kept) and stage 2 never starts."""
    before = _worktrees(repo_root)
    plan = _plan(tmp_path / "plan.yaml", [{"out": str(tmp_path / "a"), "params": CI},
                                          {"out": str(tmp_path / "b"), "params": SMOKE}])
    proc = subprocess.Popen([sys.executable, "-m", "ddlstudy.records.sitting", "--plan",
                             str(plan), "--grace-s", "30"], cwd=repo_root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    while line and "(a worktree of HEAD)" not in line:  # stage 1's report is starting
        line = proc.stdout.readline()
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "plan stopped at stage 1 of 2" in out and "stage 2 of 2" not in out
    assert not (tmp_path / "b").exists()
    assert _worktrees(repo_root) == before and not _left_behind(tmp_path)


def test_the_committed_plans_read(repo_root: Path):
    """Every plan under params/plans/ passes the checks a sitting makes before it starts."""
    plans = sorted((repo_root / "params" / "plans").glob("*.yaml"))
    assert plans
    for plan in plans:
        assert sitting.read_plan(plan, repo_root)
