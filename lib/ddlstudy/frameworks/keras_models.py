"""Keras twins of `ddlstudy.workload.models` for the TensorFlow strategies: same layers, same
widths.

A TF strategy's gradient volume per step is what PS vs all-reduce is about, so each Keras model
matches its torch model's trainable parameter count (tests/test_frameworks.py checks within 1 %;
the layers here give the exact count). Inputs are channels-last (TF's CPU convolutions need
NHWC); padding is written out (ZeroPadding2D + "valid") where torch pads, so feature maps have
torch's sizes. Batch norm's moving statistics are not trainable in either framework. Dropout is
left out (it has no parameters). Models not listed in KERAS_MODELS have no TF twin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ddlstudy.workload.models import _VGG_CFG, _is_small, _resolve_shape


def _layers() -> Any:
    import keras

    return keras.layers


def mlp(in_shape: Sequence[int], num_classes: int, hidden: int = 128, hidden1: int = 128,
        activation: str = "sigmoid", dtype: str = "float32") -> Any:
    """Fourie 2019's MLP (see models.MLP): flatten, two hidden layers, linear output."""
    import keras

    L = _layers()
    c, h, w = in_shape
    return keras.Sequential([
        keras.Input((h, w, c), dtype=dtype), L.Flatten(dtype=dtype),
        L.Dense(hidden1, activation=activation, dtype=dtype),
        L.Dense(hidden, activation=activation, dtype=dtype),
        L.Dense(num_classes, dtype=dtype),
    ], name="mlp")


def _conv(x: Any, filters: int, k: int, stride: int = 1, pad: int = 0, bias: bool = False,
          dtype: str = "float32") -> Any:
    L = _layers()
    if pad:
        x = L.ZeroPadding2D(pad, dtype=dtype)(x)
    return L.Conv2D(filters, k, stride, "valid", use_bias=bias, dtype=dtype)(x)


def _bn(x: Any, dtype: str) -> Any:
    return _layers().BatchNormalization(momentum=0.9, epsilon=1e-5, dtype=dtype)(x)


def _block(x: Any, planes: int, stride: int, bottleneck: bool, dtype: str) -> Any:
    """BasicBlock or Bottleneck (v1.5: stride on the 3x3), as models.py."""
    L = _layers()
    expansion = 4 if bottleneck else 1
    out_ch = planes * expansion
    identity = x
    if stride != 1 or x.shape[-1] != out_ch:
        identity = _bn(_conv(x, out_ch, 1, stride, dtype=dtype), dtype)
    if bottleneck:
        y = L.ReLU(dtype=dtype)(_bn(_conv(x, planes, 1, dtype=dtype), dtype))
        y = L.ReLU(dtype=dtype)(_bn(_conv(y, planes, 3, stride, 1, dtype=dtype), dtype))
        y = _bn(_conv(y, out_ch, 1, dtype=dtype), dtype)
    else:
        y = L.ReLU(dtype=dtype)(_bn(_conv(x, planes, 3, stride, 1, dtype=dtype), dtype))
        y = _bn(_conv(y, planes, 3, 1, 1, dtype=dtype), dtype)
    return L.ReLU(dtype=dtype)(L.Add(dtype=dtype)([y, identity]))


def _resnet(layers: list[int], bottleneck: bool) -> Callable[..., Any]:
    def build(in_shape: Sequence[int], num_classes: int, dtype: str = "float32") -> Any:
        """ResNet v1.5 with models.ResNet's small-input stem (3x3, no max-pool)."""
        import keras

        L = _layers()
        c, h, w = in_shape
        inp = keras.Input((h, w, c), dtype=dtype)
        if _is_small(in_shape):
            x = _conv(inp, 64, 3, 1, 1, dtype=dtype)
            x = L.ReLU(dtype=dtype)(_bn(x, dtype))
        else:
            x = L.ReLU(dtype=dtype)(_bn(_conv(inp, 64, 7, 2, 3, dtype=dtype), dtype))
            x = L.MaxPooling2D(3, 2, dtype=dtype)(L.ZeroPadding2D(1, dtype=dtype)(x))
        for stage, (planes, n) in enumerate(zip((64, 128, 256, 512), layers, strict=True)):
            for i in range(n):
                x = _block(x, planes, 2 if stage and i == 0 else 1, bottleneck, dtype)
        x = L.GlobalAveragePooling2D(dtype=dtype)(x)
        return keras.Model(inp, L.Dense(num_classes, dtype=dtype)(x))

    return build


def _classifier(x: Any, num_classes: int, fc_width: int, dtype: str) -> Any:
    L = _layers()
    x = L.Flatten(dtype=dtype)(x)
    x = L.Dense(fc_width, activation="relu", dtype=dtype)(x)
    x = L.Dense(fc_width, activation="relu", dtype=dtype)(x)
    return L.Dense(num_classes, dtype=dtype)(x)


def alexnet(in_shape: Sequence[int], num_classes: int, fc_width: int = 4096,
            dtype: str = "float32") -> Any:
    """models.AlexNet (torchvision's single-GPU variant; small inputs: 3x3 convs, 2x2 pools)."""
    import keras

    L = _layers()
    c, h, w = in_shape
    inp = keras.Input((h, w, c), dtype=dtype)
    relu = "relu"
    if _is_small(in_shape):
        x = inp
        for filters, pool in ((64, True), (192, True), (384, False), (256, False), (256, True)):
            x = L.Conv2D(filters, 3, padding="same", activation=relu, dtype=dtype)(x)
            if pool:
                x = L.MaxPooling2D(2, dtype=dtype)(x)
    else:
        x = L.ZeroPadding2D(2, dtype=dtype)(inp)
        x = L.Conv2D(64, 11, 4, activation=relu, dtype=dtype)(x)
        x = L.MaxPooling2D(3, 2, dtype=dtype)(x)
        x = L.Conv2D(192, 5, padding="same", activation=relu, dtype=dtype)(x)
        x = L.MaxPooling2D(3, 2, dtype=dtype)(x)
        for filters in (384, 256, 256):
            x = L.Conv2D(filters, 3, padding="same", activation=relu, dtype=dtype)(x)
        x = L.MaxPooling2D(3, 2, dtype=dtype)(x)  # 6x6 at 224: torch's adaptive pool is a no-op
    return keras.Model(inp, _classifier(x, num_classes, fc_width, dtype), name="alexnet")


def _vgg(cfg: str) -> Callable[..., Any]:
    def build(in_shape: Sequence[int], num_classes: int, fc_width: int = 4096,
              dtype: str = "float32") -> Any:
        """models.VGG without batch norm (small inputs skip pools at 1 pixel)."""
        import keras

        L = _layers()
        c, h, w = in_shape
        inp = keras.Input((h, w, c), dtype=dtype)
        x, side, small = inp, min(h, w), _is_small(in_shape)
        for v in _VGG_CFG[cfg]:
            if v == "M":
                if small and side < 2:
                    continue
                x = L.MaxPooling2D(2, dtype=dtype)(x)
                side //= 2
            else:
                x = L.Conv2D(int(v), 3, padding="same", activation="relu", dtype=dtype)(x)
        return keras.Model(inp, _classifier(x, num_classes, fc_width, dtype), name=cfg)

    return build


KERAS_MODELS: dict[str, Callable[..., Any]] = {
    "mlp": mlp,
    "resnet18": _resnet([2, 2, 2, 2], bottleneck=False),
    "resnet50": _resnet([3, 4, 6, 3], bottleneck=True),
    "resnet152": _resnet([3, 8, 36, 3], bottleneck=True),
    "alexnet": alexnet,
    "vgg16": _vgg("vgg16"),
    "vgg19": _vgg("vgg19"),
}


def build_keras_model(name: str, shape: str | Sequence[int] = "cifar",
                      num_classes: int | None = None, dtype: str = "float32", **kw: Any) -> Any:
    """The Keras twin of models.build_model(name, shape, num_classes, **kw)."""
    if name not in KERAS_MODELS:
        raise ValueError(f"model {name!r} has no TensorFlow (Keras) version; the TF strategies "
                         f"train: {', '.join(KERAS_MODELS)}")
    in_shape, default_classes = _resolve_shape(shape)
    classes = num_classes if num_classes is not None else (default_classes or 10)
    return KERAS_MODELS[name](in_shape, classes, dtype=dtype, **kw)


def trainable_count(model: Any) -> int:
    """Trainable parameters (what crosses the network per step), as torch's count."""
    import numpy as np

    return int(sum(np.prod(v.shape) for v in model.trainable_weights))
