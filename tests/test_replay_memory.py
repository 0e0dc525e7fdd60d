"""Replayed compute on synthetic data holds one image per worker, not the global batch: the
rows are never read (no forward pass), and the full set (1.2 GB per engine at 224x224 x 2048
rows) kept 2 x 8 engines of ResNet-50 from fitting this host. Real compute keeps real rows."""

from __future__ import annotations

import torch

from ddlstudy.train.config import TrainConfig
from ddlstudy.train.rank import batch_rows, worker_data


def test_replay_rows_are_one_image_viewed_global_batch_times() -> None:
    config = TrainConfig(model="resnet50", dataset="synthetic", shape="imagenet", workers=16,
                         batch_size=128, compute="replay", replay_source="gpu")
    x, y = worker_data(config, 128 * 16)
    assert x.shape == (2048, 3, 224, 224) and y.shape == (2048,)
    assert x.untyped_storage().nbytes() == 3 * 224 * 224 * 4
    batch = batch_rows(x, torch.arange(128, 256))  # what a step slices: a view, no copy
    assert batch.shape == (128, 3, 224, 224)
    assert batch.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    torch.testing.assert_close(batch[5], x[200], rtol=0, atol=0)


def test_real_compute_keeps_distinct_rows() -> None:
    config = TrainConfig(model="mlp", dataset="synthetic", workers=2, batch_size=4)
    x, y = worker_data(config, 8)
    assert x.shape[0] == 8 and x.untyped_storage().nbytes() == x.numel() * x.element_size()
    assert not torch.equal(x[0], x[1])
    idx = torch.tensor([6, 1])
    torch.testing.assert_close(batch_rows(x, idx), x[idx], rtol=0, atol=0)
