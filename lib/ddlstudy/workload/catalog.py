"""The registries of what a run trains on: models, input shapes and data sets (torch-free).

One place names each model, input shape and data set with its properties; `ddlstudy.workload.models`
(builders), `ddlstudy.workload.data` (loaders), params validation, the CLI's choices, the trainer
and the
tests derive their lists from here. Torch-free on purpose: params and its CLI read these names
and stay small. A model names its builder as "module:attr", imported on first use. Adding one:
docs/extending.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """A model: its builder `(in_shape, num_classes, **kw) -> nn.Module` and where it is from."""

    name: str
    builder: str
    summary: str = ""


@dataclass(frozen=True)
class ShapeSpec:
    """A named input shape (C, H, W) and the class count of the data sets that have it."""

    name: str
    dims: tuple[int, int, int]
    classes: int


@dataclass(frozen=True)
class DatasetSpec:
    """A data set: real (not generated) or generated, and the input shape it implies (a shape
    name or an explicit (C, H, W)); folder: where its files sit under the data root (None: no
    files needed, e.g. bundled with scikit-learn); fetchable: `python -m ddlstudy.data fetch`
    gets it (else its folder is filled by hand)."""

    name: str
    real: bool
    shape: str | tuple[int, int, int]
    folder: str | None = None
    fetchable: bool = False
    summary: str = ""


MODELS: dict[str, ModelSpec] = {}
SHAPES: dict[str, ShapeSpec] = {}
DATASETS: dict[str, DatasetSpec] = {}


def _add(registry: dict, spec: ModelSpec | ShapeSpec | DatasetSpec, what: str) -> None:
    if spec.name in registry:
        raise ValueError(f"{what} {spec.name!r} is already registered")
    registry[spec.name] = spec


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add a model (its builder is imported when a run builds it)."""
    _add(MODELS, spec, "model")
    return spec


def register_dataset(spec: DatasetSpec) -> DatasetSpec:
    """Add a data set (ddlstudy.workload.data must also know how to load it)."""
    if isinstance(spec.shape, str) and spec.shape not in SHAPES:
        raise ValueError(f"data set {spec.name!r}: unknown shape {spec.shape!r}; valid: "
                         f"{', '.join(SHAPES)}")
    _add(DATASETS, spec, "data set")
    return spec


def unregister(name: str) -> None:
    """Remove a model or data set of that name (tests register toys and clean up)."""
    MODELS.pop(name, None)
    DATASETS.pop(name, None)


def real_datasets() -> list[str]:
    """Data sets read from files (not generated)."""
    return [d.name for d in DATASETS.values() if d.real]


def file_datasets() -> list[str]:
    """Data sets read from files under the data root (what data.require may name)."""
    return [d.name for d in DATASETS.values() if d.folder]


def fetchable_datasets() -> list[str]:
    """Data sets `python -m ddlstudy.data fetch` downloads."""
    return [d.name for d in DATASETS.values() if d.fetchable]


def _model(name: str, attr: str, summary: str) -> None:
    register_model(ModelSpec(name, f"ddlstudy.workload.models:{attr}", summary))


# Shi 2019's five (Table 3.1), ResNet-18/101/152, GoogLeNet, Inception v3 (the Horovod
# benchmarks' models) and two small networks for quick runs.
_model("alexnet", "AlexNet", "AlexNet (Krizhevsky 2012), torchvision's layout")
_model("vgg16", "vgg16", "VGG-16 (configuration D)")
_model("vgg19", "vgg19", "VGG-19 (configuration E)")
_model("resnet18", "resnet18", "ResNet-18 (basic blocks)")
_model("resnet50", "resnet50", "ResNet-50 (bottleneck blocks)")
_model("resnet101", "resnet101", "ResNet-101 (the Horovod benchmarks' second model)")
_model("resnet152", "resnet152", "ResNet-152")
_model("googlenet", "GoogLeNet", "GoogLeNet / Inception v1, no auxiliary heads")
_model("inception3", "InceptionV3", "Inception v3, no auxiliary head (Horovod's benchmarks)")
_model("shallow_cnn", "ShallowCNN", "Pani's shallow MNIST CNN (two conv, two dense)")
_model("mlp", "MLP", "Fourie 2019's 4-layer feed-forward net")

for _shape in (ShapeSpec("cifar", (3, 32, 32), 10), ShapeSpec("mnist", (1, 28, 28), 10),
               ShapeSpec("imagenet", (3, 224, 224), 1000)):
    _add(SHAPES, _shape, "shape")

register_dataset(DatasetSpec("mnist", True, "mnist", "mnist", fetchable=True,
                             summary="MNIST handwritten digits (IDX files)"))
register_dataset(DatasetSpec("fashion_mnist", True, "mnist", "fashion_mnist", fetchable=True,
                             summary="Fashion-MNIST (IDX files)"))
register_dataset(DatasetSpec("cifar10", True, "cifar", "cifar-10-batches-py",
                             summary="CIFAR-10 (python pickles, put in place by hand)"))
register_dataset(DatasetSpec("digits", True, (1, 8, 8),
                             summary="scikit-learn's 8x8 digits (bundled)"))
register_dataset(DatasetSpec("synthetic", False, "cifar",
                             summary="seeded random tensors of the model's input shape"))
