"""Checkpoints of a training run: what a restarted run needs to go on as if nothing happened.

One checkpoint is one file `checkpoints/ckpt-<step>.pt` in the run's out folder, written
atomically (a temp file in the same folder, fsync, then `os.replace`), so a reader sees the old
file or the new one, never half of one. It holds:

- `step`: steps completed (warm-up included), and `data`: the data position there (epoch, row of
  that epoch's permutation), so the next step draws the batch it would have drawn;
- `engine`: worker 0's model state (parameters and buffers) and optimizer state, and for PS
  strategies each server's shard, its optimizer state and version (the servers own the weights);
- `driver`: the records so far (step rows, chunk windows, evaluations, failures), as JSON, so a
  run killed outright leaves them and a rerun of the same command continues them;
- `fingerprint`: the config fields that must match for a rerun to resume from it.

The file starts with a magic line and the sha256 of the payload: a truncated or corrupted
checkpoint is skipped (with a warning) and the previous one used. The last `KEEP` are kept.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ddlstudy.records.lock import atomic_write_bytes

log = logging.getLogger(__name__)

MAGIC = b"DDLSTUDY-CKPT-1\n"
KEEP = 2  # newest checkpoints kept: the previous one is the fallback for a damaged newest
FOLDER = "checkpoints"
_NAME = re.compile(r"^ckpt-(\d{8})\.pt$")
# Config fields a resumed run may change (how long, how often, what fault to inject).
RESUMABLE_CHANGES = ("steps", "epochs", "checkpoint_every", "fail_worker", "fail_at_step",
                     "eval", "timeout_s")


def fingerprint(config: Mapping[str, Any]) -> str:
    """Digest of the config fields that decide the run's trajectory (a rerun must match)."""
    keep = {k: v for k, v in sorted(config.items()) if k not in RESUMABLE_CHANGES}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:16]


def folder(out_dir: str | Path) -> Path:
    return Path(out_dir) / FOLDER


def path_for(out_dir: str | Path, step: int) -> Path:
    return folder(out_dir) / f"ckpt-{step:08d}.pt"


def save(out_dir: str | Path, state: dict[str, Any]) -> Path:
    """Write `state` (needs "step") atomically; drop all but the newest KEEP. Returns the path."""
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    target = path_for(out_dir, int(state["step"]))
    target.parent.mkdir(parents=True, exist_ok=True)
    # a temp unique per process and thread, fsynced, renamed; removed on any error (full disk)
    atomic_write_bytes(target, MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n"
                       + payload)
    for old in _listed(out_dir)[KEEP:]:
        old.unlink(missing_ok=True)
    return target


def load(path: str | Path) -> dict[str, Any]:
    """One checkpoint; ValueError when it is truncated, corrupted or not a checkpoint."""
    data = Path(path).read_bytes()
    head = len(MAGIC) + 65
    if not data.startswith(MAGIC) or len(data) < head:
        raise ValueError(f"{path}: not a ddlstudy checkpoint (bad header)")
    digest, payload = data[len(MAGIC):head - 1].decode(errors="replace"), data[head:]
    if hashlib.sha256(payload).hexdigest() != digest:
        raise ValueError(f"{path}: checksum mismatch (truncated or corrupted)")
    state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or "step" not in state:
        raise ValueError(f"{path}: no step in checkpoint")
    return state


def _listed(out_dir: str | Path) -> list[Path]:
    """Checkpoint files, newest (highest step) first."""
    root = folder(out_dir)
    if not root.is_dir():
        return []
    files = [p for p in root.iterdir() if _NAME.match(p.name)]
    return sorted(files, key=lambda p: int(_NAME.match(p.name).group(1)), reverse=True)


def latest(out_dir: str | Path) -> dict[str, Any] | None:
    """The newest checkpoint that loads; damaged ones are skipped with a warning. None: none."""
    for path in _listed(out_dir):
        try:
            state = load(path)
        except (OSError, ValueError, RuntimeError, EOFError) as err:
            log.warning("skipping checkpoint %s: %s", path.name, err)
            continue
        state["path"] = str(path)
        return state
    return None


def driver_records(state: Mapping[str, Any]) -> dict[str, Any]:
    """The driver's records a checkpoint carries (stored as JSON text)."""
    return json.loads(state["driver"])


def pack_driver(records: Mapping[str, Any]) -> str:
    return json.dumps(records, default=_plain)


def _plain(value: Any) -> Any:
    """numpy / torch scalars as Python numbers for JSON."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)
