"""Run a grid of training configurations with resume: the shape of every chapter-3/4 sweep.

Each cell writes its own folder (`<out>/<label>/`, with summary.csv and meta.json); a cell whose
folder already holds a summary for the same configuration, written by the same code (digest of
lib/ddlstudy, ddlstudy.records.resume), is read back, not rerun, and a cell that fails is recorded
with its
error while the rest of the grid goes on. `repeats` runs every cell that many times, interleaved.

`emulated_cluster` runs a grid inside an emulated cluster network
(ddlstudy.network.emulated.netem): one network
namespace and shaped link per engine, so each node's traffic crosses its own link and its own
counters. `dilate` then stretches replayed compute by 1/scale to keep the real cluster's
compute:communication ratio.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from ddlstudy.records import reference, resume
from ddlstudy.records import store as records
from ddlstudy.strategies import get_strategy
from ddlstudy.train.trainer import TrainConfig, train


def cell_dir(out: Path, config: TrainConfig) -> Path:
    label = config.label.replace("/", "-").replace(" ", "_")
    return out / re.sub(r"[^A-Za-z0-9_.\-]", "", label)


def cell_identity(cluster: Any) -> dict[str, Any]:
    """What a cell runs on beyond its TrainConfig, as records.reference.cell_identity reads it
    back from meta.json: testbed, network profile, gpus_per_node, latency emulated."""
    return reference.cell_identity({"network": getattr(cluster, "network_info", None)})


def _finished(folder: Path, config: TrainConfig,
              identity: dict[str, Any] | None = None) -> pd.DataFrame | None:
    """The cell's summary when it finished ok with this config (and, given `identity`, on this
    testbed / network / gpus_per_node / latency) under this exact code, else None."""
    if not (folder / "summary.csv").exists() or not (folder / "meta.json").exists():
        return None
    meta = resume.read_marker(folder / "meta.json")
    # make reference accumulates cells over sittings and commits: same params suffice there
    # (each cell's meta.json keeps its own git sha and code digest, and the label lists them)
    any_code = os.environ.get("DDLSTUDY_RESUME_ANY_CODE") == "1"
    if (meta is None or meta.get("status") != "ok"
            or (not any_code and meta.get("code_digest") != resume.code_digest())
            or not _same_config(meta.get("params"), config, any_code)
            or (identity is not None and reference.cell_identity(meta) != identity)):
        return None
    return reference.with_identity(records.read_table(folder, "summary"), meta)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(d, default=str))


# Where the data files sit is not what a cell ran: a checkout elsewhere (another clone, a
# worktree, another node) must still find its cells.
LOCATION_KEYS = ("data_root",)


def _same_config(stored: Any, config: TrainConfig, any_code: bool) -> bool:
    """Whether a stored cell ran this config (its data folder's location aside). Across code
    versions (make reference), a field TrainConfig gained since the cell ran counts as equal
    when it holds its default: the old code ran what that default means (a new field must
    default to the old behaviour)."""
    if not isinstance(stored, dict):
        return False
    now = {k: v for k, v in _jsonable(config.to_dict()).items() if k not in LOCATION_KEYS}
    stored = {k: v for k, v in stored.items() if k not in LOCATION_KEYS}
    if stored == now or not any_code:
        return stored == now
    defaults = _jsonable(TrainConfig().to_dict())
    return all(stored[k] == v if k in stored else v == defaults.get(k) for k, v in now.items())


def repeat_dir(out: Path, config: TrainConfig, repeat: int, repeats: int) -> Path:
    """A cell's folder for one repeat: the first run in <label>/ itself, run k >= 1 in
    <label>/r<k>/. So a grid run once and later given more repeats keeps its first runs as
    repeat 0 and adds the others beside them (how results/reference gains independent runs)."""
    folder = cell_dir(out, config)
    return folder if repeat == 0 else folder / f"r{repeat}"


def interleaved(items: Sequence[Any], repeats: int) -> list[tuple[int, Any]]:
    """(repeat, item) in run order: every item once per repeat, the order rotated each repeat
    (by len/repeats) so slow drift of the host hits every arm alike, not always the last."""
    n = len(items)
    order = []
    for rep in range(repeats):
        shift = (rep * n) // repeats if n else 0
        order += [(rep, items[(i + shift) % n]) for i in range(n)]
    return order


def run_grid(cluster: Any, configs: Sequence[TrainConfig], out: str | Path,
             train_fn: Callable[..., Any] = train, repeats: int = 1,
             **train_kwargs: Any) -> pd.DataFrame:
    """Summary rows of every cell and repeat (reused or run), with a `repeat` column; failed
    cells carry an `error` column. Repeats run interleaved (see `interleaved`)."""
    out = Path(out)
    rows = []
    identity = cell_identity(cluster)  # a stored cell of another testbed / link is not this one
    bar = tqdm(interleaved(configs, repeats), desc="grid", unit="run")
    for rep, config in bar:
        bar.set_postfix_str(f"{config.label} r{rep}")
        folder = repeat_dir(out, config, rep, repeats)
        done = _finished(folder, config, identity)
        if done is not None:
            rows.append(done.assign(repeat=rep, reused=True, error=""))
            continue
        try:
            result = train_fn(cluster, config, out_dir=folder, progress=False, **train_kwargs)
            summary = result.summary.assign(**{k: v for k, v in identity.items()
                                               if k not in result.summary})
            rows.append(summary.assign(repeat=rep, reused=False, error=""))
        except (ValueError, TimeoutError, RuntimeError) as err:
            tqdm.write(f"FAILED {config.label} r{rep}: {err}")
            rows.append(pd.DataFrame([{"strategy": config.strategy, "model": config.model,
                                       "workers": config.workers, "repeat": rep,
                                       "reused": False,
                                       "error": f"{type(err).__name__}: {err}"}]))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def training_grid(base: TrainConfig, models: Sequence[str], strategies: Sequence[str],
                  workers: Sequence[int], **overrides: Any) -> list[TrainConfig]:
    """models x strategies x workers, each from `base`; strategy-specific fields set right.

    `single` is one process by definition, so it joins the grid at 1 worker only.
    """
    configs = []
    for model in models:
        for strategy in strategies:
            spec = get_strategy(strategy)
            for n in workers:
                if spec.family == "single" and n != 1:
                    continue
                servers = overrides.get("servers") if spec.servers_configurable else None
                extra = {k: v for k, v in overrides.items() if k != "servers"}
                configs.append(replace(base, model=model, strategy=strategy, workers=n,
                                       servers=servers, **extra).validate())
    return configs


def engines_needed(configs: Sequence[TrainConfig]) -> int:
    return max(c.world_size for c in configs)


def run_monitored(cluster: Any, configs: Sequence[TrainConfig], out: str | Path,
                  interval_s: float = 0.5, repeats: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each config trained while every one of its ranks samples utilisation and traffic.

    Returns (summaries, samples); both carry `repeat`, samples also the run's strategy and worker
    count. Repeats run interleaved. A cell with a finished summary and monitor.csv for the same
    configuration and code is read back, not rerun.
    """
    from ddlstudy.experiments.monitor import monitoring
    from ddlstudy.strategies import Layout

    out = Path(out)
    summaries, samples = [], []
    for rep, config in tqdm(interleaved(configs, repeats), desc="monitored runs", unit="run"):
        folder = repeat_dir(out, config, rep, repeats)
        done = _finished(folder, config, cell_identity(cluster))
        if done is not None and (folder / "monitor.csv").exists():
            summaries.append(done.assign(repeat=rep))
            samples.append(records.read_table(folder, "monitor").assign(repeat=rep))
            continue
        layout = Layout(config.workers, config.n_servers)
        ranks = list(range(config.world_size))
        with monitoring(cluster, interval_s, ranks, [layout.role(r) for r in ranks]) as mon:
            result = train(cluster, config, out_dir=folder, progress=False)
        frame = mon.frame.assign(strategy=config.strategy, workers=config.workers,
                                 model=config.model, repeat=rep)
        records.write_table(frame, folder, "monitor")
        summaries.append(result.summary.assign(repeat=rep))
        samples.append(frame)
    return pd.concat(summaries, ignore_index=True), pd.concat(samples, ignore_index=True)


@contextlib.contextmanager
def emulated_cluster(network: str, engines: int, scale: float | None = None,
                     offload_off: bool = True, gpus_per_node: int = 1, latency: bool = False,
                     testbed: str | None = None, **cluster_kwargs: Any) -> Iterator[Any]:
    """A started Cluster of `engines` engines, each in its own namespace on a link shaped to
    `network` x `scale` (netem profile, e.g. "10GbE"); stopped, and the network removed, on exit.

    scale None: `netem.scale_for` picks the largest scale at which `engines` links fit under the
    host's measured ceiling for this offload state. offload_off: wire-sized packet counts
    (chapter 04); on, the host moves several times more, so throughput chapters turn it on.

    network "none": plain local engines. Where namespaces cannot be made (not root, no tc), one
    line is printed and the engines run on loopback, unshaped; the records then say so. The
    cluster carries `network_info` (what `trainer.train` writes into summary and meta.json) and
    `emulated_network` (the EmulatedNetwork, or None).

    gpus_per_node k: k engines per node namespace sharing its shaped link, ranks grouped by node
    (ddlstudy.network.emulated.nodes). latency: each inter-node message of the Comm harness is
    delayed by the profile's latency x 1/scale (ddlstudy.collectives.latency); both go into
    `network_info` (gpus_per_node, rank_nodes, latency_emulated_s).

    testbed: the name of the testbed (ddlstudy.testbeds) whose settings the caller took; it is
    recorded in `network_info` (and so in every cell's meta.json) as part of the cell's identity.
    """
    from ddlstudy.cluster.engines import Cluster
    from ddlstudy.network.emulated import netem, nodes

    if network not in ("none", netem.UNSHAPED, *netem.PROFILES):
        raise ValueError(f"unknown network {network!r}; valid: none, "
                         f"{', '.join([*netem.PROFILES, netem.UNSHAPED])}")
    launch = cluster_kwargs.get("launch")
    if network != "none" and launch is not None and launch.is_remote:
        raise ValueError(f"network {network!r} emulates a cluster on this machine; it cannot use "
                         f"the {launch.launcher} launcher's hosts: set training.network to none, "
                         "or cluster.launcher to local")
    if network != "none" and cluster_kwargs.get("profile"):
        raise ValueError(f"network {network!r} starts local engines in namespaces; it cannot use "
                         f"the running ipyparallel profile {cluster_kwargs['profile']!r}: set "
                         "training.network to none, or cluster.profile to null")
    n_nodes = nodes.nodes_for(engines, gpus_per_node)
    if network == "none" and (gpus_per_node > 1 or latency):
        raise ValueError("gpus_per_node > 1 and latency need an emulated network (a link "
                         "profile such as 10GbE), not network 'none'")
    if network == "none":
        cluster = Cluster(workers=engines, **cluster_kwargs).start()
        cluster.emulated_network = None
        cluster.network_info = ({"profile": "none", "scale": None, "latency_emulated": False,
                                 "testbed": testbed} if testbed else None)
        try:
            yield cluster
        finally:
            cluster.stop()
        return
    cluster_kwargs.pop("profile", None)
    if scale is None:  # one shaped link per node: k engines of a node share it
        scale = netem.scale_for(network, n_nodes, offload_off)
    with netem.network_or_loopback(n_nodes, network, scale, offload_off=offload_off) as net:
        if net is None:
            cluster = Cluster(workers=engines, **cluster_kwargs).start()
            info: dict[str, Any] = {"profile": "loopback", "requested": network, "scale": None,
                                    "latency_emulated": False, "latency_emulated_s": 0.0,
                                    "gpus_per_node": gpus_per_node,
                                    "reason": netem.available()[1]}
        elif gpus_per_node > 1 or latency:
            delay = nodes.lat.delay_for(net.profile) if latency else 0.0
            cluster = nodes.start_node_cluster(net, engines, gpus_per_node, delay,
                                               **cluster_kwargs)
            info = nodes.describe(net, engines, gpus_per_node, delay)
        else:
            cluster = netem.start_cluster_in_namespaces(net, **cluster_kwargs)
            info = {**net.describe(), "rank_nodes": netem.rank_nodes(cluster, net),
                    "gpus_per_node": 1, "latency_emulated_s": 0.0}
        if testbed:
            info["testbed"] = testbed
        cluster.emulated_network, cluster.network_info = net, info
        try:
            yield cluster
        finally:
            cluster.stop()


def dilation(cluster: Any, compute: str) -> float:
    """1/scale for replayed compute on scaled links (the real cluster's compute:communication
    ratio), else 1."""
    scale = (getattr(cluster, "network_info", None) or {}).get("scale")
    return 1.0 / scale if compute == "replay" and scale else 1.0


def dilate(configs: Sequence[TrainConfig], cluster: Any) -> list[TrainConfig]:
    """The configs with time_dilation set for this cluster's links (see `dilation`)."""
    return [replace(c, time_dilation=dilation(cluster, c.compute)).validate() for c in configs]


def engine_data_root(params: Any) -> str:
    """The data root as the engines resolve it: the driver's absolute path on a local cluster;
    relative to their own checkout / cluster.remote_root where engines are launched on other
    hosts (never the driver's absolute path there)."""
    return params.cluster.launch_spec().engine_path(str(params.data.path()),
                                                    records.project_root())


def base_config(params: Any, model: str, training: Any = None, **overrides: Any) -> TrainConfig:
    """The TrainConfig a chapter's grid starts from: training params (or `training`, a validated
    TrainingParams with notebook overrides) plus the study's seed and data root."""
    t = training or params.training
    data_root = engine_data_root(params)
    fields = dict(model=model, shape=t.shape, dataset=t.dataset, algorithm=t.algorithm,
                  batch_size=t.batch_size, steps=t.steps, warmup_steps=t.warmup_steps, lr=t.lr,
                  bucket_mb=t.bucket_mb, overlap=t.overlap, seed=params.seed,
                  data_root=data_root, verify_data=params.data.verify,
                  compute=t.compute,
                  replay_source=t.replay_source)
    return TrainConfig(**{**fields, **overrides})
