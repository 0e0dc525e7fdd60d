"""A NaN or inf loss stops the run with one line and marks its record failed (issue 23)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddlstudy.train.trainer import NonFiniteLoss, TrainConfig, train


def test_a_diverging_run_stops_and_its_record_says_failed(cluster, tmp_path: Path) -> None:
    # lr 3e38 (float32 max) overflows the weights to inf at the first update: the next loss
    # is NaN (inf - inf in the first layer)
    cfg = TrainConfig(model="mlp", dataset="synthetic", strategy="allreduce", workers=2,
                      batch_size=16, steps=50, warmup_steps=0, lr=3e38, momentum=0.0,
                      eval=False)
    with pytest.raises(NonFiniteLoss) as err:
        train(cluster, cfg, tmp_path, progress=False)
    line = str(err.value)
    assert "\n" not in line and "the loss became" in line and "lower --lr" in line
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["status"].startswith("failed: NonFiniteLoss")
