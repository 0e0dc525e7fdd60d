"""The GPU path without a GPU: which backend a CUDA rank's group gets, where payloads and
metadata live for a given backend, that the PS puts its buffers where the model computes, that
the ipyparallel cluster picks `cpu:gloo,cuda:nccl` for CUDA engines, and the replay table's
precision / channels-last / compile options (run on CPU with tiny settings)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest
import torch
from torch import nn

from ddlstudy.collectives import device as dev
from ddlstudy.strategies import make_strategy
from ddlstudy.workload import replay


# ----------------------------------------------------------------------------- device placement
@pytest.mark.parametrize("device,backend", [
    ("cuda", "cpu:gloo,cuda:nccl"), ("cuda:1", "cpu:gloo,cuda:nccl"),
    (torch.device("cuda", 0), "cpu:gloo,cuda:nccl"), ("cpu", "gloo"),
])
def test_backend_for_device(device: Any, backend: str) -> None:
    assert dev.backend_for(device) == backend


@pytest.mark.parametrize("backend,cuda,payload,meta,any_source", [
    ("cpu:gloo,cuda:nccl", 0, "cuda:0", "cpu", True),   # the study's CUDA group
    ("cpu:gloo,cuda:nccl", 3, "cuda:3", "cpu", True),
    ("cpu:gloo,cuda:nccl", None, "cpu", "cpu", True),   # no CUDA device set: all on CPU
    ("nccl", 1, "cuda:1", "cuda:1", False),              # NCCL alone: metadata must be on CUDA
    ("gloo", 0, "cpu", "cpu", True),                    # gloo, even with a GPU in the box
    ("", None, "cpu", "cpu", True),                     # no group at all
])
def test_payload_and_metadata_devices(backend: str, cuda: int | None, payload: str, meta: str,
                                      any_source: bool) -> None:
    assert dev.payload_device(backend, cuda) == torch.device(payload)
    assert dev.meta_device(backend, cuda) == torch.device(meta)
    assert dev.any_source_ok(backend) is any_source


def test_group_devices_without_a_group_are_cpu() -> None:
    assert dev.group_backend() == ""
    assert dev.group_payload_device() == torch.device("cpu")
    assert dev.group_meta_device() == torch.device("cpu")
    dev.synchronize("cpu")  # a no-op off CUDA
    dev.synchronize(None)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def test_ps_buffers_follow_the_model_headers_follow_the_group(monkeypatch) -> None:
    """A server's gradient buffers sit on the model's device (here torch's 'meta' device
    stands in for CUDA: no GPU needed); headers on the group's metadata device."""
    from ddlstudy.strategies import ps

    monkeypatch.setattr(ps, "group_meta_device", lambda group=None: torch.device("cpu"))
    server = make_strategy("ps_sync", _mlp().to("meta"), rank=2, workers=2, servers=1)
    assert server.w.device.type == "meta"
    assert {g.device.type for g in server.gbufs} == {"meta"}
    assert server._header(2, 7).device.type == "cpu"
    assert server._header(2, 7).tolist() == [2, 7]
    worker = make_strategy("ps_sync", _mlp().to("meta"), rank=0, workers=2, servers=1)
    assert worker.gbuf.device.type == worker.wbuf.device.type == "meta"
    assert {h.device.type for h in worker.push_hdr + worker.pull_hdr} == {"cpu"}


def test_ps_async_refuses_a_plain_nccl_group(monkeypatch) -> None:
    """The async server receives from any worker: NCCL alone cannot, one line says so."""
    from ddlstudy.strategies import ps

    monkeypatch.setattr(ps, "group_backend", lambda group=None: "nccl")
    with pytest.raises(ValueError, match="cpu:gloo,cuda:nccl") as err:
        make_strategy("ps_async", _mlp(), rank=2, workers=2, servers=1)
    assert "\n" not in str(err.value)
    monkeypatch.setattr(ps, "group_backend", lambda group=None: "cpu:gloo,cuda:nccl")
    make_strategy("ps_async", _mlp(), rank=2, workers=2, servers=1)  # accepted


def test_strategy_syncs_only_on_cuda(monkeypatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    single = make_strategy("single", _mlp())
    assert single.device == torch.device("cpu")
    single.step(torch.randn(4, 6), torch.tensor([0, 1, 2, 0]))
    assert calls == []
    single.device = torch.device("cuda", 0)  # as a CUDA model would set it
    single._sync()
    assert calls == [torch.device("cuda", 0)]


def test_cluster_picks_the_mixed_backend_for_cuda_engines(monkeypatch) -> None:
    """Cluster.init_process_group's default backend is backend_for(engine 0's device); the
    spy stops the call right after that choice (no engines needed)."""
    from ddlstudy.cluster.engines import Cluster

    class Chosen(Exception):
        pass

    real = dev.backend_for

    def spy(device: Any) -> str:
        raise Chosen(real(device))

    monkeypatch.setattr(dev, "backend_for", spy)
    for device, backend in (("cuda:0", "cpu:gloo,cuda:nccl"), ("cpu", "gloo")):
        c = object.__new__(Cluster)
        c.engine_ids, c.infos = [0, 1], [{"device": device}] * 2
        with pytest.raises(Chosen) as chosen:
            c.init_process_group(world_size=2)
        assert str(chosen.value) == backend


# ----------------------------------------------------------------------------- replay measure
def test_measure_bf16_channels_last_on_cpu() -> None:
    table = replay.measure(["mlp", "shallow_cnn"], "mnist", 4, "cpu", steps=2, warmup=1,
                           channels_last=True, precision="bf16")
    assert list(table.columns) == replay.COLUMNS + replay.HOW_COLUMNS
    assert (table["precision"] == "bf16").all() and table["channels_last"].all()
    assert not table["compiled"].any()
    assert (table["compute_s_p50"] > 0).all() and (table["error"] == "").all()
    assert table["date"].str.endswith("Z").all() and (table["steps"] == 2).all()


def test_measure_records_a_failing_compile_and_goes_on(monkeypatch) -> None:
    """torch.compile failing for a model: its row says why, the next model is measured."""
    def boom(model: nn.Module, **_: Any) -> nn.Module:
        if isinstance(model, nn.Sequential) or type(model).__name__ == "MLP":
            raise RuntimeError("inductor exploded")
        return model

    monkeypatch.setattr(torch, "compile", boom)
    rows: list[dict[str, Any]] = []
    table = replay.measure(["mlp", "shallow_cnn"], "mnist", 4, "cpu", steps=1, warmup=1,
                           compile=True, record_errors=True, on_row=rows.append)
    assert len(rows) == 2 and table["compiled"].all()
    by = table.set_index("model")
    assert "inductor exploded" in by.loc["mlp", "error"] and math.isnan(by.loc["mlp",
                                                                            "compute_s_p50"])
    assert by.loc["shallow_cnn", "error"] == "" and by.loc["shallow_cnn", "compute_s_p50"] > 0
    with pytest.raises(RuntimeError, match="inductor exploded"):  # default: raise
        replay.measure(["mlp"], "mnist", 4, "cpu", steps=1, warmup=0, compile=True)


def test_measure_cli_flags_and_columns(tmp_path, capsys) -> None:
    out = tmp_path / "t.csv"
    assert replay.main(["measure", "--models", "mlp", "--shapes", "mnist", "--batch-sizes",
                        "2,4", "--steps", "1", "--warmup", "0", "--precision", "bf16",
                        "--channels-last", "--out", str(out)]) == 0
    table = pd.read_csv(out, keep_default_na=False)
    assert table["batch_size"].tolist() == [2, 4] and (table["precision"] == "bf16").all()
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown precision"):
        replay.measure(["mlp"], "mnist", 2, "cpu", precision="fp8")


@pytest.mark.parametrize("name", ["h100-fp32-eager", "h100-bf16-cl", "h100-bf16-cl-compile"])
def test_stored_gpu_tables_say_how_they_were_measured(name: str) -> None:
    table = replay.load_table(name)
    assert set(replay.COLUMNS + replay.HOW_COLUMNS) <= set(table.columns)
    assert (table["device_name"] == "NVIDIA H100 80GB HBM3").all()
    assert table["driver"].astype(str).str.len().gt(0).all() and table["date"].notna().all()
    assert replay.compute_time(table, "resnet50", "imagenet", 32) > 0
