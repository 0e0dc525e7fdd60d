"""The papers' networks in plain torch, for CIFAR, MNIST and ImageNet input shapes.

Long because: eight network families written out layer for layer (torchvision cannot be
installed beside this torch), each class short, sharing the same few helpers.

torchvision cannot be installed beside CPU torch 2.13 here, so the ImageNet-shaped models are
written out layer for layer to match torchvision's definitions: same parameter counts (and so
the same gradient volume per step, which is what Parameter Server vs all-reduce is about).

Small inputs (side < 64, i.e. CIFAR 32x32 and MNIST 28x28) get the usual adaptations, each
described in its builder's docstring. Parameter counts and multiply-adds come from
`model_table`, which runs on the meta device so even VGG19 at 224x224 costs milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import pandas as pd
import torch
from torch import nn

from ddlstudy.registry import resolve
from ddlstudy.workload.catalog import MODELS as WORKLOAD_MODELS
from ddlstudy.workload.catalog import SHAPES

__all__ = [
    "INPUT_SHAPES",
    "MODELS",
    "NUM_CLASSES",
    "PAPER_TABLE_3_1",
    "build_model",
    "count_macs",
    "gradient_sizes",
    "model_table",
    "paper_comparison",
]

# Named input shapes and their class counts: from the one registry,
# ddlstudy.workload.catalog.SHAPES.
INPUT_SHAPES: dict[str, tuple[int, int, int]] = {s.name: s.dims for s in SHAPES.values()}
NUM_CLASSES: dict[str, int] = {s.name: s.classes for s in SHAPES.values()}

# Shi 2019, Table 3.1. "Model size (MB)" reads as MiB of float32 parameters (AlexNet:
# 61.1M params * 4 B = 233.1 MiB). The GFLOPs column counts multiply-adds, as torchvision does.
PAPER_TABLE_3_1: dict[str, dict[str, float]] = {
    "alexnet": {"size_mb": 233, "top1": 57.0, "top5": 80.3, "gflops": 0.7},
    "vgg16": {"size_mb": 528, "top1": 70.5, "top5": 90.0, "gflops": 15.5},
    "vgg19": {"size_mb": 548, "top1": 71.3, "top5": 92.7, "gflops": 19.6},
    "resnet50": {"size_mb": 98, "top1": 75.8, "top5": 92.9, "gflops": 3.9},
    "resnet152": {"size_mb": 230, "top1": 77.6, "top5": 93.8, "gflops": 11.3},
}

_SMALL_SIDE = 64  # below this, inputs are "CIFAR-like": no aggressive stride-2 stems


def _is_small(in_shape: Sequence[int]) -> bool:
    return min(in_shape[1], in_shape[2]) < _SMALL_SIDE


def _init_cnn(model: nn.Module) -> None:
    """torchvision's initialisation, so training from scratch behaves like the reference."""
    if _on_meta(model):
        return
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.constant_(m.bias, 0)


def _on_meta(model: nn.Module) -> bool:
    """Meta parameters hold no values: skip init (its first call on meta costs ~1.5 s)."""
    return any(p.is_meta for p in model.parameters())


def _feature_side(features: nn.Module, in_shape: Sequence[int]) -> tuple[int, int, int]:
    """Output (C, H, W) of a feature extractor: one tiny forward on the default device (which
    is "meta", i.e. no compute, when the model itself is being built on the meta device)."""
    with torch.no_grad():
        out = features(torch.zeros(1, *in_shape))
    return tuple(out.shape[1:])  # type: ignore[return-value]


class _FeaturesPoolClassifier(nn.Module):
    """AlexNet's and VGG's shape: conv `features`, `avgpool` to a fixed map, FC `classifier`."""

    features: nn.Module
    avgpool: nn.Module
    classifier: nn.Module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# --------------------------------------------------------------------------------------- AlexNet
class AlexNet(_FeaturesPoolClassifier):
    """AlexNet as in torchvision (the single-GPU "one weird trick" variant, 61.1M params).

    Small inputs: 3x3 stride-1 convolutions with 2x2 max-pools (32 -> 16 -> 8 -> 4; 28 -> 3),
    same channel widths, and the first classifier layer sized to the real feature map (256*4*4
    on CIFAR) instead of upsampling to 6x6. The 4096-wide FC layers are kept: they hold most of
    AlexNet's parameters, and that parameter-heavy profile is why it stresses a parameter server.
    """

    def __init__(
        self,
        in_shape: Sequence[int] = (3, 224, 224),
        num_classes: int = 1000,
        dropout: float = 0.5,
        fc_width: int = 4096,
    ) -> None:
        super().__init__()
        c = in_shape[0]
        if _is_small(in_shape):
            self.features = nn.Sequential(
                nn.Conv2d(c, 64, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                nn.Conv2d(64, 192, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            )  # fmt: skip
            self.avgpool: nn.Module = nn.Identity()
            fc_in = 1
            for d in _feature_side(self.features, in_shape):
                fc_in *= d
        else:
            self.features = nn.Sequential(
                nn.Conv2d(c, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True),
                nn.MaxPool2d(3, 2),
                nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
                nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            )  # fmt: skip
            self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
            fc_in = 256 * 6 * 6
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(fc_in, fc_width), nn.ReLU(inplace=True),
            nn.Dropout(dropout), nn.Linear(fc_width, fc_width), nn.ReLU(inplace=True),
            nn.Linear(fc_width, num_classes),
        )  # fmt: skip
        _init_cnn(self)


# ------------------------------------------------------------------------------------------- VGG
_VGG_CFG: dict[str, list[int | str]] = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}  # fmt: skip


class VGG(_FeaturesPoolClassifier):
    """VGG (configurations D and E) as in torchvision, without batch norm by default.

    Small inputs: a max-pool is skipped once the map is 1 pixel wide (MNIST: 28 -> 14 -> 7 -> 3
    -> 1, fifth pool skipped), there is no 7x7 adaptive pool, and the first FC layer takes the real
    feature map (512 on CIFAR). FC widths stay 4096 so the gradient profile stays VGG-like.
    """

    def __init__(
        self,
        cfg: Sequence[int | str],
        in_shape: Sequence[int] = (3, 224, 224),
        num_classes: int = 1000,
        batch_norm: bool = False,
        dropout: float = 0.5,
        fc_width: int = 4096,
    ) -> None:
        super().__init__()
        small = _is_small(in_shape)
        layers: list[nn.Module] = []
        ch, side = in_shape[0], min(in_shape[1], in_shape[2])
        for v in cfg:
            if v == "M":
                if small and side < 2:
                    continue
                layers.append(nn.MaxPool2d(2, 2))
                side //= 2
            else:
                assert isinstance(v, int)
                layers.append(nn.Conv2d(ch, v, 3, padding=1))
                if batch_norm:
                    layers.append(nn.BatchNorm2d(v))
                layers.append(nn.ReLU(inplace=True))
                ch = v
        self.features = nn.Sequential(*layers)
        if small:
            self.avgpool: nn.Module = nn.Identity()
            fc_in = 1
            for d in _feature_side(self.features, in_shape):
                fc_in *= d
        else:
            self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
            fc_in = 512 * 7 * 7
        self.classifier = nn.Sequential(
            nn.Linear(fc_in, fc_width), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(fc_width, fc_width), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(fc_width, num_classes),
        )  # fmt: skip
        _init_cnn(self)


# ---------------------------------------------------------------------------------------- ResNet
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck (stride on the 3x3 conv), as torchvision: 4.1 GMACs for ResNet50
    where the original v1 (stride on the 1x1, the paper's 3.9) has the same parameters."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _downsample(inplanes: int, outplanes: int, stride: int) -> nn.Module | None:
    if stride == 1 and inplanes == outplanes:
        return None
    return nn.Sequential(
        nn.Conv2d(inplanes, outplanes, 1, stride, bias=False), nn.BatchNorm2d(outplanes)
    )


class ResNet(nn.Module):
    """ResNet as in torchvision (v1.5).

    Small inputs: a 3x3 stride-1 stem conv and no max-pool, as Pani did for MNIST ResNet-18
    (1 input channel, 3x3 kernel) and as is usual for CIFAR; the four stages then run at 32, 16,
    8, 4 pixels. Parameter counts change only in the stem and the classifier.
    """

    def __init__(
        self,
        block: type[BasicBlock | Bottleneck],
        layers: Sequence[int],
        in_shape: Sequence[int] = (3, 224, 224),
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        c = in_shape[0]
        self.inplanes = 64
        if _is_small(in_shape):
            self.conv1 = nn.Conv2d(c, 64, 3, 1, 1, bias=False)
            self.maxpool: nn.Module = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(c, 64, 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        _init_cnn(self)
        if not _on_meta(self):  # torchvision keeps nn.Linear's default init for ResNet's fc
            self.fc.reset_parameters()

    def _make_layer(
        self, block: type[BasicBlock | Bottleneck], planes: int, n: int, stride: int = 1
    ) -> nn.Sequential:
        layers = [block(self.inplanes, planes, stride)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, n)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ------------------------------------------------------------------------------------- GoogLeNet
class BasicConv2d(nn.Module):
    """Conv (no bias) -> BatchNorm -> ReLU; kernels may be rectangular (Inception v3's 1x7)."""

    def __init__(self, cin: int, cout: int, kernel_size: int | tuple[int, int], stride: int = 1,
                 padding: int | tuple[int, int] = 0):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size, stride, padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class Inception(nn.Module):
    def __init__(
        self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, pool_proj: int
    ) -> None:
        super().__init__()
        self.branch1 = BasicConv2d(cin, c1, 1)
        self.branch2 = nn.Sequential(BasicConv2d(cin, c3r, 1), BasicConv2d(c3r, c3, 3, padding=1))
        # torchvision's "5x5" branch uses a 3x3 kernel (a kept bug); we match its counts.
        self.branch3 = nn.Sequential(BasicConv2d(cin, c5r, 1), BasicConv2d(c5r, c5, 3, padding=1))
        self.branch4 = nn.Sequential(
            nn.MaxPool2d(3, 1, 1, ceil_mode=True), BasicConv2d(cin, pool_proj, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    """GoogLeNet (Inception v1) as torchvision without the auxiliary heads (6.6M params).

    Small inputs: the stride-2 7x7 stem and its two max-pools are replaced by a 3x3 stride-1
    conv (64) followed by the same 1x1 (64) and 3x3 (192) convs, so the inception stages run at
    32 -> 16 -> 8 pixels on CIFAR (28 -> 14 -> 7 on MNIST), as common CIFAR GoogLeNets do.
    """

    def __init__(
        self, in_shape: Sequence[int] = (3, 224, 224), num_classes: int = 1000, dropout: float = 0.2
    ) -> None:
        super().__init__()
        c = in_shape[0]
        if _is_small(in_shape):
            self.stem = nn.Sequential(
                BasicConv2d(c, 64, 3, padding=1),
                BasicConv2d(64, 64, 1),
                BasicConv2d(64, 192, 3, padding=1),
            )
        else:
            self.stem = nn.Sequential(
                BasicConv2d(c, 64, 7, stride=2, padding=3),
                nn.MaxPool2d(3, 2, ceil_mode=True),
                BasicConv2d(64, 64, 1),
                BasicConv2d(64, 192, 3, padding=1),
                nn.MaxPool2d(3, 2, ceil_mode=True),
            )
        self.inception3a = Inception(192, 64, 96, 128, 16, 32, 32)
        self.inception3b = Inception(256, 128, 128, 192, 32, 96, 64)
        self.maxpool3 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.inception4a = Inception(480, 192, 96, 208, 16, 48, 64)
        self.inception4b = Inception(512, 160, 112, 224, 24, 64, 64)
        self.inception4c = Inception(512, 128, 128, 256, 24, 64, 64)
        self.inception4d = Inception(512, 112, 144, 288, 32, 64, 64)
        self.inception4e = Inception(528, 256, 160, 320, 32, 128, 128)
        self.maxpool4 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.inception5a = Inception(832, 256, 160, 320, 32, 128, 128)
        self.inception5b = Inception(832, 384, 192, 384, 48, 128, 128)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(1024, num_classes)
        for m in [] if _on_meta(self) else self.modules():  # torchvision: trunc. normal 0.01
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.01, a=-2, b=2)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.maxpool3(self.inception3b(self.inception3a(x)))
        x = self.inception4c(self.inception4b(self.inception4a(x)))
        x = self.maxpool4(self.inception4e(self.inception4d(x)))
        x = self.inception5b(self.inception5a(x))
        return self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))


# ---------------------------------------------------------------------------------- Inception v3
_cbr = BasicConv2d  # conv-BN-ReLU, short for the Inception v3 tables below


class _Concat(nn.Module):
    """Branches run on the same input, outputs concatenated along channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([b(x) for b in self.branches], 1)


def _split_pair(c: int) -> nn.Module:
    """Inception v3's E-block tail: one input into a 1x3 and a 3x1 conv, concatenated."""
    return _Concat(_cbr(c, 384, (1, 3), padding=(0, 1)), _cbr(c, 384, (3, 1), padding=(1, 0)))


def _v3_a(cin: int, pool: int) -> nn.Module:
    return _Concat(_cbr(cin, 64, 1),
                   nn.Sequential(_cbr(cin, 48, 1), _cbr(48, 64, 5, padding=2)),
                   nn.Sequential(_cbr(cin, 64, 1), _cbr(64, 96, 3, padding=1),
                                 _cbr(96, 96, 3, padding=1)),
                   nn.Sequential(nn.AvgPool2d(3, 1, 1), _cbr(cin, pool, 1)))


def _v3_b(cin: int) -> nn.Module:
    return _Concat(_cbr(cin, 384, 3, 2),
                   nn.Sequential(_cbr(cin, 64, 1), _cbr(64, 96, 3, padding=1),
                                 _cbr(96, 96, 3, 2)),
                   nn.MaxPool2d(3, 2))


def _v3_c(cin: int, c7: int) -> nn.Module:
    r, c = (1, 7), (7, 1)
    pr, pc = (0, 3), (3, 0)
    return _Concat(_cbr(cin, 192, 1),
                   nn.Sequential(_cbr(cin, c7, 1), _cbr(c7, c7, r, padding=pr),
                                 _cbr(c7, 192, c, padding=pc)),
                   nn.Sequential(_cbr(cin, c7, 1), _cbr(c7, c7, c, padding=pc),
                                 _cbr(c7, c7, r, padding=pr), _cbr(c7, c7, c, padding=pc),
                                 _cbr(c7, 192, r, padding=pr)),
                   nn.Sequential(nn.AvgPool2d(3, 1, 1), _cbr(cin, 192, 1)))


def _v3_d(cin: int) -> nn.Module:
    return _Concat(nn.Sequential(_cbr(cin, 192, 1), _cbr(192, 320, 3, 2)),
                   nn.Sequential(_cbr(cin, 192, 1), _cbr(192, 192, (1, 7), padding=(0, 3)),
                                 _cbr(192, 192, (7, 1), padding=(3, 0)), _cbr(192, 192, 3, 2)),
                   nn.MaxPool2d(3, 2))


def _v3_e(cin: int) -> nn.Module:
    return _Concat(_cbr(cin, 320, 1),
                   nn.Sequential(_cbr(cin, 384, 1), _split_pair(384)),
                   nn.Sequential(_cbr(cin, 448, 1), _cbr(448, 384, 3, padding=1),
                                 _split_pair(384)),
                   nn.Sequential(nn.AvgPool2d(3, 1, 1), _cbr(cin, 192, 1)))


class InceptionV3(nn.Module):
    """Inception v3 (Szegedy 2016) as torchvision and tf_cnn_benchmarks' `inception3` build it,
    without the auxiliary head (23.8M params): the Horovod README's and paper's third model,
    here so the step model can predict their published points (its gradient sizes).

    Small inputs: the stem's stride-2 conv and both max-pools are dropped (stride 1, padded),
    so the A / C / E blocks run at 32 / 15 / 7 pixels on CIFAR.
    """

    def __init__(self, in_shape: Sequence[int] = (3, 299, 299), num_classes: int = 1000,
                 dropout: float = 0.5) -> None:
        super().__init__()
        c = in_shape[0]
        small = _is_small(in_shape)
        pool: Callable[[], nn.Module] = nn.Identity if small else (lambda: nn.MaxPool2d(3, 2))
        self.stem = nn.Sequential(
            _cbr(c, 32, 3, 1 if small else 2, 1 if small else 0),
            _cbr(32, 32, 3, padding=1 if small else 0), _cbr(32, 64, 3, padding=1), pool(),
            _cbr(64, 80, 1), _cbr(80, 192, 3, padding=1 if small else 0), pool())
        self.blocks = nn.Sequential(
            _v3_a(192, 32), _v3_a(256, 64), _v3_a(288, 64), _v3_b(288),
            _v3_c(768, 128), _v3_c(768, 160), _v3_c(768, 160), _v3_c(768, 192),
            _v3_d(768), _v3_e(1280), _v3_e(2048))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(2048, num_classes)
        _init_cnn(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.blocks(self.stem(x)))
        return self.fc(self.dropout(torch.flatten(x, 1)))


# ----------------------------------------------------------------------------- Pani / Fourie 2019
class ShallowCNN(nn.Module):
    """Pani's shallow MNIST CNN: conv(20, 5x5) -> pool -> conv(50, 5x5) -> pool -> FC 800
    -> 500 -> classes (the classic PyTorch/Horovod MNIST net; 50*4*4 = 800 on 28x28).

    Returns log-probabilities (log-softmax), as the paper trained with NLL loss. On CIFAR the
    flattened map is 50*5*5 = 1250; on ImageNet-sized input an adaptive average pool to 4x4
    keeps the FC at 800 -> 500 (otherwise 140,450 -> 500 would be a 70M-param layer).
    """

    def __init__(self, in_shape: Sequence[int] = (1, 28, 28), num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_shape[0], 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.squeeze: nn.Module = nn.Identity() if _is_small(in_shape) else nn.AdaptiveAvgPool2d(4)
        with torch.no_grad():
            feat = self._features(torch.zeros(1, *in_shape))
        self.fc1 = nn.Linear(feat.shape[1], 500)
        self.fc2 = nn.Linear(500, num_classes)

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return torch.flatten(self.squeeze(x), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(self._features(x)))
        return torch.log_softmax(self.fc2(x), dim=1)


_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "sigmoid": nn.Sigmoid,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
}


class MLP(nn.Module):
    """Fourie 2019's 4-layer feed-forward net (input, 2 hidden, output; Genann in C).

    The paper varied the *second* hidden layer's width to vary message size: that is `hidden`.
    It does not give the first width; `hidden1` defaults to 128. Genann's default activation is
    the sigmoid, kept here; pass activation="relu" to train faster.
    """

    def __init__(
        self,
        in_shape: Sequence[int] = (1, 28, 28),
        num_classes: int = 10,
        hidden: int = 128,
        hidden1: int = 128,
        activation: str = "sigmoid",
    ) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(_ACTIVATIONS)}")
        if hidden < 1 or hidden1 < 1:
            raise ValueError(f"hidden widths must be >= 1, got hidden={hidden}, hidden1={hidden1}")
        act = _ACTIVATIONS[activation]
        n_in = in_shape[0] * in_shape[1] * in_shape[2]
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(n_in, hidden1), act(),
            nn.Linear(hidden1, hidden), act(),
            nn.Linear(hidden, num_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# -------------------------------------------------------------------------------------- registry
def _vgg(cfg: str) -> Callable[..., nn.Module]:
    def build(in_shape: Sequence[int], num_classes: int, **kw) -> nn.Module:
        return VGG(_VGG_CFG[cfg], in_shape, num_classes, **kw)

    build.__doc__ = f"{cfg.upper()}: see VGG."
    return build


def _resnet(block: type[BasicBlock | Bottleneck], layers: list[int]) -> Callable[..., nn.Module]:
    def build(in_shape: Sequence[int], num_classes: int, **kw) -> nn.Module:
        return ResNet(block, layers, in_shape, num_classes, **kw)

    return build


# Builders named in the one model registry (ddlstudy.workload.catalog.MODELS); each takes
# (in_shape, num_classes, **kw).
vgg16 = _vgg("vgg16")
vgg19 = _vgg("vgg19")
resnet18 = _resnet(BasicBlock, [2, 2, 2, 2])
resnet50 = _resnet(Bottleneck, [3, 4, 6, 3])
resnet101 = _resnet(Bottleneck, [3, 4, 23, 3])
resnet152 = _resnet(Bottleneck, [3, 8, 36, 3])


class _Builders(Mapping[str, Callable[..., nn.Module]]):
    """name -> builder, a live view of ddlstudy.workload.catalog.MODELS (so a model registered
    later,
    e.g. by a test or the docs' example, is buildable too)."""

    def __getitem__(self, name: str) -> Callable[..., nn.Module]:
        return resolve(WORKLOAD_MODELS[name].builder)

    def __iter__(self) -> Iterator[str]:
        return iter(WORKLOAD_MODELS)

    def __len__(self) -> int:
        return len(WORKLOAD_MODELS)


MODELS: Mapping[str, Callable[..., nn.Module]] = _Builders()


def _resolve_shape(shape: str | Sequence[int]) -> tuple[tuple[int, int, int], int | None]:
    if isinstance(shape, str):
        key = shape.lower()
        if key not in INPUT_SHAPES:
            raise ValueError(f"unknown input shape {shape!r}; valid: {', '.join(INPUT_SHAPES)}")
        return INPUT_SHAPES[key], NUM_CLASSES[key]
    dims = tuple(int(d) for d in shape)
    if len(dims) != 3 or min(dims) < 1:
        raise ValueError(f"input shape must be (C, H, W) with positive sizes, got {shape!r}")
    return dims, None  # type: ignore[return-value]


def build_model(
    name: str, shape: str | Sequence[int] = "cifar", num_classes: int | None = None, **kw
) -> nn.Module:
    """Build a registered model for a named input shape (or an explicit (C, H, W)).

    Extra keywords go to the builder (e.g. `hidden=` for "mlp", `batch_norm=` for VGG).
    """
    key = name.lower()
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
    in_shape, default_classes = _resolve_shape(shape)
    classes = num_classes if num_classes is not None else (default_classes or 10)
    return MODELS[key](in_shape, classes, **kw)


def count_macs(model: nn.Module, in_shape: Sequence[int]) -> int:
    """Multiply-adds of Conv2d and Linear layers for one image, via forward hooks.

    Runs on whatever device the model's parameters are on; on "meta" it only propagates shapes.
    """
    total = 0

    def conv_hook(m: nn.Conv2d, _inp: tuple, out: torch.Tensor) -> None:
        nonlocal total
        kh, kw = m.kernel_size
        total += (out.numel() // out.shape[0]) * (m.in_channels // m.groups) * kh * kw

    def linear_hook(m: nn.Linear, _inp: tuple, out: torch.Tensor) -> None:
        nonlocal total
        total += (out.numel() // out.shape[0]) * m.in_features

    handles = []
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            handles.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            handles.append(m.register_forward_hook(linear_hook))
    device = next(model.parameters()).device
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, *in_shape, device=device))
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return total


def _build_meta(name: str, shape: str | Sequence[int], **kw) -> nn.Module:
    with torch.device("meta"):
        return build_model(name, shape, **kw)


def model_table(
    shape: str | Sequence[int] = "imagenet", names: Iterable[str] | None = None
) -> pd.DataFrame:
    """Parameters, float32 size in MiB and forward GMACs ("GFLOPs" as the papers count them)."""
    in_shape, _ = _resolve_shape(shape)
    rows = []
    for name in names if names is not None else MODELS:
        model = _build_meta(name, shape)
        params = sum(p.numel() for p in model.parameters())
        rows.append(
            {
                "model": name.lower(),
                "params": params,
                "size_mib": params * 4 / 2**20,
                "gflops": count_macs(model, in_shape) / 1e9,
            }
        )
    return pd.DataFrame(rows, columns=["model", "params", "size_mib", "gflops"])


def paper_comparison(table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Our ImageNet-shape numbers beside Shi 2019's Table 3.1, with relative differences.

    `table` is an already computed `model_table("imagenet")` to reuse.
    """
    if table is None:
        table = model_table("imagenet", PAPER_TABLE_3_1)
    ours = table.set_index("model").loc[list(PAPER_TABLE_3_1)]
    paper = pd.DataFrame(PAPER_TABLE_3_1).T[["size_mb", "gflops"]]
    out = pd.DataFrame(
        {
            "params": ours["params"],
            "size_mib": ours["size_mib"],
            "paper_size_mb": paper["size_mb"],
            "gflops": ours["gflops"],
            "paper_gflops": paper["gflops"],
        }
    )
    out["size_rel_diff"] = out["size_mib"] / out["paper_size_mb"] - 1
    out["gflops_rel_diff"] = out["gflops"] / out["paper_gflops"] - 1
    return out.reset_index(names="model")


def gradient_sizes(name: str, shape: str | Sequence[int] = "cifar", **kw) -> list[int]:
    """numel of each trainable parameter in registration order: the per-step gradient tensors
    a strategy has to move (for compute replay and traffic emulation without the model)."""
    model = _build_meta(name, shape, **kw)
    return [p.numel() for p in model.parameters() if p.requires_grad]
