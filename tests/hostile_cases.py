"""The hostile params files (issue 12's and issue 23's set) and what the tests that feed them to
`load_params` and the CLIs share: the writer and a launcher that measures the CLI's own CPU
seconds and peak RSS. tests/test_hostile.py runs every file; tests/test_params.py a sample,
layered over params/default.yaml.

Not a test module (no `test_` prefix): the test files import it by name, as pytest puts tests/
on the path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

NAN, INF = math.nan, math.inf


def y(doc: dict[str, Any]) -> str:
    """YAML text for a params override (nan / inf as YAML's .nan / .inf)."""
    return yaml.safe_dump(doc)


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True))
ESC = "\x1b]0;owned\x07\x1b[2J"

# id -> (file content, a fragment the one-line refusal must contain)
FILES: dict[str, tuple[str | bytes, str]] = {
    # -- the file itself
    "binary_garbage": (bytes(range(256)) * 4, "binary data"),
    "nul_in_text": ("run_id: a\x00b\n", "binary data"),
    "latin1_bytes": (b"run_id: caf\xe9\n", "binary data"),
    "utf16_bom": ("run_id: a\n".encode("utf-16"), "binary data"),
    "too_big": ("# " + "x" * (1 << 20) + "\n", "byte limit"),
    "keys_60000": ("".join(f"k{i}: {i}\n" for i in range(60_000)), "byte limit"),
    "keys_5000_small": ("".join(f"k{i}: 1\n" for i in range(5000)), "unknown key"),
    "deep_list": ("[" * 20000 + "]" * 20000 + "\n", "nested"),
    "deep_mapping": ("".join("  " * i + f"k{i}:\n" for i in range(40)) + "  " * 40 + "v\n",
                     "nested more than"),
    "alias_bomb": (BOMB, "expands to more than"),
    "recursive_alias": ("a: &a [*a]\n", "refers to itself"),
    "duplicate_top_key": ("run_id: a\nrun_id: b\n", "duplicate key 'run_id'"),
    "duplicate_nested_key": ("training:\n  steps: 3\n  steps: 4\n", "duplicate key 'steps'"),
    "python_tag": ("run_id: !!python/object/apply:os.system ['true']\n", "not valid YAML"),
    "tab_indent": ("training:\n\tsteps: 3\n", "not valid YAML"),
    "unclosed_flow": ("cluster: [workers: 4\n", "not valid YAML"),
    "top_is_list": ("- 1\n- 2\n", "top level must be a mapping"),
    "top_is_scalar": ("42\n", "top level must be a mapping"),
    "section_not_mapping": ("training: 5\n", "training"),
    "list_key": ("? [a, b]\n: 1\n", "plain name"),
    "raw_escape_bytes": (f'training:\n  "{ESC}": 1\n', "binary data"),
    "escape_bytes_in_key": ('training:\n  "\\e]0;owned\\a\\e[2J": 1\n', "\\x1b"),
    "escape_bytes_in_value": (y({"training": {"models": [ESC]}}), "\\x1b"),
    "unknown_top_key": ("trainnig:\n  steps: 3\n", "unknown key"),
    "unknown_nested_key": ("cluster:\n  wokers: 4\n", "cluster.wokers: unknown key"),
    "long_bad_value": (y({"training": {"models": ["x" * 5000]}}), "unknown model"),
    "long_bad_value_flow": ("training:\n  models: [" + "x" * 5000 + "]\n", "unknown model"),
    "seed_4301_digits": ("seed: " + "9" * 4301 + "\n", "cannot be read"),
    # -- seeds
    "seed_negative": (y({"seed": -1}), "seed"),
    "seed_2_32": (y({"seed": 2**32}), "seed"),
    "seed_2_64_plus_1": (y({"seed": 2**64 + 1}), "seed"),
    "seed_float": (y({"seed": 1.5}), "seed"),
    "seed_text": (y({"seed": "abc"}), "seed"),
    "seed_bool": (y({"seed": True}), "seed"),
    "convergence_seed_negative": (y({"convergence": {"seeds": [0, -1]}}), "seeds"),
    "convergence_seed_2_33": (y({"convergence": {"seeds": [0, 2**33]}}), "seeds"),
    "batch_sweep_seed_negative": (y({"batch_sweep": {"seeds": [-1]}}), "seeds"),
    # -- NaN and inf
    "lr_nan": (y({"training": {"lr": NAN}}), "training.lr"),
    "lr_inf": (y({"training": {"lr": INF}}), "training.lr"),
    "lr_minus_inf": (y({"training": {"lr": -INF}}), "training.lr"),
    "lr_zero": (y({"training": {"lr": 0}}), "training.lr"),
    "lr_negative": (y({"training": {"lr": -0.1}}), "training.lr"),
    "lr_text": (y({"training": {"lr": "fast"}}), "training.lr"),
    "convergence_lr_nan": (y({"convergence": {"lr": NAN}}), "convergence.lr"),
    "batch_sweep_lr_inf": (y({"batch_sweep": {"lr": INF}}), "batch_sweep.lr"),
    "faults_lr_nan": (y({"faults": {"lr": NAN}}), "faults.lr"),
    "scale_nan": (y({"network": {"scale": NAN}}), "network.scale"),
    "scale_inf": (y({"network": {"scale": INF}}), "network.scale"),
    "interval_nan": (y({"monitor": {"interval_s": NAN}}), "monitor.interval_s"),
    "timeout_nan": (y({"cluster": {"collective_timeout_s": NAN}}), "collective_timeout_s"),
    "timeout_inf": (y({"cluster": {"start_timeout_s": INF}}), "start_timeout_s"),
    "cell_timeout_inf": (y({"report": {"cell_timeout_s": INF}}), "cell_timeout_s"),
    "compute_scale_nan": (y({"projection": {"compute_scale": NAN}}), "compute_scale"),
    "compute_scale_inf": (y({"projection": {"compute_scale": INF}}), "compute_scale"),
    "latency_nan": (y({"projection": {"latency_s": NAN}}), "latency_s"),
    "faults_timeout_inf": (y({"faults": {"timeout_s": INF}}), "faults.timeout_s"),
    # -- unbounded sizes
    "max_bytes_20G": (y({"collectives": {"max_bytes": "20G"}}), "max_bytes"),
    "max_bytes_4096G": (y({"collectives": {"max_bytes": "4096G"}}), "machine's memory"),
    "max_bytes_bool": (y({"collectives": {"max_bytes": True}}), "collectives.max_bytes"),
    "max_bytes_12X": (y({"collectives": {"max_bytes": "12X"}}), "max_bytes"),
    "min_bytes_zero": (y({"collectives": {"min_bytes": 0}}), "at least 1 byte"),
    "min_above_max": (y({"collectives": {"min_bytes": "1M", "max_bytes": "1K"}}),
                      "above max_bytes"),
    "iters_1e9": (y({"collectives": {"iters": 10**9}}), "collectives.iters"),
    "batch_1e8": (y({"training": {"batch_size": 10**8}}), "training.batch_size"),
    "batch_float": (y({"training": {"batch_size": 3.5}}), "training.batch_size"),
    "steps_true": (y({"training": {"steps": True}}), "training.steps: a boolean"),
    "steps_zero": (y({"training": {"steps": 0}}), "training.steps"),
    "steps_1e12": (y({"training": {"steps": 10**12}}), "training.steps"),
    "workers_zero": (y({"training": {"workers": [0, 2]}}), "training.workers"),
    "workers_bool": (y({"training": {"workers": [True, 2]}}), "boolean"),
    "workers_bool_flow": ("training:\n  workers: [true, 2]\n", "boolean"),
    "cluster_workers_false": (y({"cluster": {"workers": False}}), "boolean"),
    "grid_too_big": (y({"cluster": {"workers": 2}, "training": {"workers": [4]}}),
                     "cluster.workers is 2"),
    "batch_sizes_1e9": (y({"batch_sweep": {"batch_sizes": [10**9]}}), "batch_sizes"),
    "bucket_mb_huge": (y({"training": {"bucket_mb": 1e300}}), "bucket_mb"),
    # -- empty lists
    "training_models_empty": (y({"training": {"models": []}}), "training.models"),
    "training_strategies_empty": (y({"training": {"strategies": []}}), "training.strategies"),
    "training_workers_empty": (y({"training": {"workers": []}}), "training.workers"),
    "chapter03_models_empty": (y({"training": {"models": [], "strategies": ["allreduce"]},
                                  "network": {"chapter03_models": []}}), "chapter 03"),
    "monitor_models_empty": (y({"monitor": {"models": []}}), "monitor.models"),
    "projection_models_empty": (y({"projection": {"models": []}}), "projection.models"),
    "convergence_models_empty": (y({"convergence": {"models": []}}), "convergence.models"),
    "batch_sweep_models_empty": (y({"batch_sweep": {"models": []}}), "batch_sweep.models"),
    "collectives_ranks_empty": (y({"collectives": {"ranks": []}}), "collectives.ranks"),
    "collectives_algorithms_empty": (y({"collectives": {"algorithms": []}}),
                                     "collectives.algorithms"),
    "network_profiles_empty": (y({"network": {"profiles": []}}), "network.profiles"),
    "frameworks_strategies_empty": (y({"frameworks": {"strategies": []}}),
                                    "frameworks.strategies"),
    "faults_strategies_empty": (y({"faults": {"strategies": []}}), "at least one strategy"),
    "report_chapters_empty": (y({"report": {"chapters": []}}), "report.chapters"),
    # -- unknown names
    "unknown_kernel": (y({"report": {"kernel": "no-such-kernel"}}), "kernel"),
    "unknown_model": (y({"training": {"models": ["resnet51"]}}), "unknown model 'resnet51'"),
    "unknown_strategy": (y({"training": {"strategies": ["nope"]}}), "nope"),
    "unknown_algorithm": (y({"collectives": {"algorithms": ["ring", "hypercube"]}}),
                          "unknown algorithm 'hypercube'"),
    "unknown_profile": (y({"network": {"profiles": ["100GbE-nope"]}}), "100GbE-nope"),
    "unknown_training_network": (y({"training": {"network": "nope"}}), "nope"),
    "unknown_chapter": (y({"report": {"chapters": ["99_nope"]}}), "99_nope"),
    "unknown_dataset": (y({"training": {"dataset": "imagenet22k"}}), "imagenet22k"),
    # -- replay tables
    "replay_source_missing_csv": (y({"training": {"replay_source": "/no/such/table.csv"}}),
                                  "replay table"),
    "replay_source_unknown_name": (y({"network": {"replay_source": "nope"}}), "replay table"),
    "frameworks_replay_missing": (y({"frameworks": {"replay_source": "/nope.csv"}}),
                                  "replay table"),
    # -- projection bounds
    "compute_scale_1e308": (y({"projection": {"compute_scale": 1e308}}), "compute_scale"),
    "compute_scale_zero": (y({"projection": {"compute_scale": 0}}), "compute_scale"),
    "servers_1e18": (y({"projection": {"servers": [10**18]}}), "projection.servers"),
    "projection_batch_1e12": (y({"projection": {"batch_size": 10**12}}), "batch_size"),
    "scaling_batch_1e12": (y({"projection": {"scaling_batch_size": 10**12}}),
                           "scaling_batch_size"),
    "scaling_workers_1e9": (y({"projection": {"scaling_workers": [10**9]}}),
                            "scaling_workers"),
    "latency_1e9": (y({"projection": {"latency_s": 1e9}}), "latency_s"),
    "latency_negative": (y({"projection": {"latency_s": -1}}), "latency_s"),
    "bucket_mb_1e300": (y({"projection": {"bucket_mb": [1e300]}}), "bucket_mb"),
    "records_etc": (y({"projection": {"records": ["/etc"]}}), "projection.records"),
    "records_root": (y({"projection": {"records": ["/"]}}), "projection.records"),
    "records_proc": (y({"projection": {"records": ["/proc"]}}), "projection.records"),
    # -- network and monitor bounds
    "scale_1e-300": (y({"network": {"scale": 1e-300}}), "network.scale"),
    "scale_zero": (y({"network": {"scale": 0}}), "network.scale"),
    "scale_above_one": (y({"network": {"scale": 2}}), "network.scale"),
    "interval_1e-300": (y({"monitor": {"interval_s": 1e-300}}), "monitor.interval_s"),
    "interval_1ms": (y({"monitor": {"interval_s": 0.001}}), "monitor.interval_s"),
    "interval_two_hours": (y({"monitor": {"interval_s": 7200}}), "monitor.interval_s"),
    # -- paths and names
    "run_id_dotdot": ("run_id: '..'\n", "run_id"),
    "run_id_dot": ("run_id: .\n", "run_id"),
    "run_id_slash": ("run_id: a/b\n", "run_id"),
    "run_id_absolute": ("run_id: /tmp/x\n", "run_id"),
    "run_id_too_long": (f"run_id: {'a' * 65}\n", "run_id"),
    "run_id_escape": (y({"run_id": ESC}), "run_id"),
    # -- timeouts
    "timeout_1e300": (y({"cluster": {"collective_timeout_s": 1e300}}), "collective_timeout_s"),
    "timeout_1e300_text": ("cluster:\n  collective_timeout_s: 1e300\n", "collective_timeout_s"),
    "timeout_over_a_day": (y({"cluster": {"start_timeout_s": 86401}}), "start_timeout_s"),
    "timeout_negative": (y({"cluster": {"collective_timeout_s": -1}}), "collective_timeout_s"),
    "cell_timeout_huge": (y({"report": {"cell_timeout_s": 99999999}}), "cell_timeout_s"),
    # -- faults
    "fail_worker_out_of_range": (y({"faults": {"fail_worker": 99}}), "fail_worker"),
    "fail_at_step_past_end": (y({"faults": {"fail_at_step": 400}}), "fail_at_step"),
    "checkpoint_every_zero": (y({"faults": {"checkpoint_every": 0}}), "checkpoint_every"),
}


def write(path: Path, content: str | bytes) -> Path:
    """`content` into `path` (bytes as they are, text as UTF-8); the path."""
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


# Runs the CLI from a small launcher that prints the CLI's own CPU seconds (user + system: what
# it costs, whatever else the host runs) and peak RSS (KB): a child forked from pytest would
# inherit pytest's RSS high-water mark across exec (1.9 GB after the TF tests), so the CLI must
# be the child of a process that is small itself.
LAUNCH = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); "
          "_, st, ru = os.wait4(p.pid, 0); print(ru.ru_utime + ru.ru_stime, ru.ru_maxrss); "
          "sys.exit(os.waitstatus_to_exitcode(st))")
