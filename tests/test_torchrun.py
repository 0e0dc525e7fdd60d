"""The torchrun / srun entry (ddlstudy.cli.torchrun): rank variables from either launcher, no
ipyparallel or pydantic at import, and a real `torchrun --nproc-per-node 2` run on CPU whose
losses match one process on the union batch (as tests/test_strategies.py checks the
ipyparallel path) and whose records are the ones `python -m ddlstudy.train` writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.cli.torchrun import first_host, launch_env

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
# mlp on sklearn digits, float64, no BatchNorm: N workers x b == 1 process x N*b exactly
EXACT = ["--model", "mlp", "--dataset", "digits", "--dtype", "float64", "--lr", "0.5",
         "--steps", "5", "--warmup-steps", "0", "--seed", "3", "--no-eval", "--bucket-mb",
         "0.05", "--device", "cpu", "--no-progress"]


def test_torchrun_variables() -> None:
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29400"}
    assert launch_env(env) == {"rank": 3, "local_rank": 1, "world_size": 4,
                               "local_world_size": 2, "master_addr": "10.0.0.7",
                               "master_port": 29400, "launcher": "torchrun"}


def test_slurm_variables_are_mapped() -> None:
    env = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8",
           "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "gpu[07-08]"}
    got = launch_env(env)
    assert got == {"rank": 5, "local_rank": 1, "world_size": 8, "local_world_size": 4,
                   "master_addr": "gpu07", "master_port": 29500, "launcher": "srun"}
    over = launch_env({**env, "MASTER_ADDR": "head", "SLURM_NTASKS_PER_NODE": "2",
                       "MASTER_PORT": "1234"})
    assert (over["master_addr"], over["master_port"], over["local_world_size"]) == \
        ("head", 1234, 2)
    with pytest.raises(ValueError, match="MASTER_ADDR"):
        launch_env({"SLURM_PROCID": "0"})
    assert launch_env({})["world_size"] == 1 and launch_env({})["launcher"] == "none"


@pytest.mark.parametrize("nodelist,host", [("gpu[03-05,7],cpu1", "gpu03"), ("node12", "node12"),
                                           ("a1,b2", "a1"), ("n[9]", "n9")])
def test_first_host_of_a_nodelist(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "lib"), OMP_NUM_THREADS="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def test_entry_imports_without_ipyparallel_or_pydantic() -> None:
    """As on a GPU machine that has neither: the module and its parser import."""
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('pydantic', 'ipyparallel'):\n"
            "            raise ImportError('blocked ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import ddlstudy.cli.torchrun as t\n"
            "t._parser().parse_args(['--model', 'mlp', '--strategy', 'ps_sync'])\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def _run(args: list[str], out: Path, nproc: int | None) -> pd.DataFrame:
    launcher = ([str(TORCHRUN), "--standalone", "--nproc-per-node", str(nproc)] if nproc
                else [sys.executable])
    done = subprocess.run([*launcher, "-m", "ddlstudy.cli.torchrun", *EXACT, *args, "--out",
                           str(out)], env=_env(), capture_output=True, text=True, timeout=300,
                          cwd=out.parent)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "Total img/sec" in done.stdout and done.stdout.count("Wrote ") == 1  # rank 0 only
    for name in ("steps.csv", "summary.csv", "chunks.csv", "meta.json"):
        assert (out / name).exists(), name
    return pd.read_csv(out / "steps.csv")


def _losses(steps: pd.DataFrame) -> list[float]:
    workers = steps[steps["role"] == "worker"]
    return workers.groupby("step")["loss"].mean().tolist()  # equal halves: the union's mean


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    """One process, no launcher, `single` on the union batch of 2 x 8."""
    out = tmp_path_factory.mktemp("torchrun") / "single"
    return _losses(_run(["--strategy", "single", "--workers", "1", "--batch-size", "16"], out,
                        None))


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not beside this python")
def test_torchrun_two_ranks_match_one_process(reference: list[float], tmp_path: Path) -> None:
    steps = _run(["--strategy", "allreduce", "--workers", "2", "--batch-size", "8"],
                 tmp_path / "ar", 2)
    assert sorted(steps["rank"].unique()) == [0, 1] and len(steps) == 2 * 5
    assert _losses(steps) == pytest.approx(reference, rel=1e-9, abs=1e-12)
    summary = pd.read_csv(tmp_path / "ar" / "summary.csv")
    assert summary.loc[0, "workers"] == 2 and summary.loc[0, "bytes_sent_per_step"] > 0
    meta = json.loads((tmp_path / "ar" / "meta.json").read_text())
    assert meta["status"] == "ok" and len(meta["engines"]) == 2
    assert {e["launcher"] for e in meta["engines"]} == {"torchrun"}
    assert meta["network"]["launcher"] == "torchrun" and meta["network"]["backend"] == "gloo"


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not beside this python")
def test_torchrun_parameter_server(reference: list[float], tmp_path: Path) -> None:
    """ps_sync: 2 workers + 1 server = 3 processes; headers and payloads through the entry."""
    steps = _run(["--strategy", "ps_sync", "--workers", "2", "--batch-size", "8"],
                 tmp_path / "ps", 3)
    assert set(steps["role"]) == {"worker", "server"}
    assert _losses(steps) == pytest.approx(reference, rel=1e-9, abs=1e-12)


def test_wrong_process_count_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "ddlstudy.cli.torchrun", "--model", "mlp",
                           "--strategy", "ps_sync", "--workers", "2", "--device", "cpu"],
                          env=_env(), capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 2
    assert "needs 3 processes; the launcher started 1" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
