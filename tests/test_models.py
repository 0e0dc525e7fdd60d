"""Model zoo: shapes, parameter counts against torchvision and Shi 2019's Table 3.1, MAC counts."""

from __future__ import annotations

import pytest
import torch

from ddlstudy.workload.models import (
    INPUT_SHAPES,
    MODELS,
    NUM_CLASSES,
    PAPER_TABLE_3_1,
    build_model,
    count_macs,
    gradient_sizes,
    model_table,
    paper_comparison,
)

ALL = list(MODELS)
# Forward passes on real tensors at 224x224 cost ~1 s each for these: shape-only on meta by default.
HEAVY_IMAGENET = {"vgg16", "vgg19", "resnet50", "resnet101", "resnet152", "inception3"}

# torchvision's own parameter counts (torchvision.models.*(weights=None), aux heads off).
TORCHVISION_PARAMS = {
    "alexnet": 61_100_840,
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "googlenet": 6_624_904,
    "inception3": 23_834_568,  # inception_v3(aux_logits=False, init_weights=False)
}


@pytest.fixture(scope="module")
def imagenet_table():
    return model_table("imagenet")


@pytest.fixture(scope="module")
def by_model(imagenet_table):
    return imagenet_table.set_index("model")


def test_registry_has_the_papers_models():
    assert set(MODELS) == {
        "alexnet", "vgg16", "vgg19", "resnet18", "resnet50", "resnet101", "resnet152", "googlenet",
        "inception3", "shallow_cnn", "mlp",
    }  # fmt: skip
    assert INPUT_SHAPES == {"cifar": (3, 32, 32), "mnist": (1, 28, 28), "imagenet": (3, 224, 224)}
    assert NUM_CLASSES == {"cifar": 10, "mnist": 10, "imagenet": 1000}


@pytest.mark.parametrize("shape", ["cifar", "mnist"])
@pytest.mark.parametrize("name", ALL)
def test_forward_small_shapes(name, shape):
    torch.manual_seed(0)
    model = build_model(name, shape)  # train mode: batch-norm uses batch statistics
    with torch.no_grad():
        out = model(torch.randn(2, *INPUT_SHAPES[shape]))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", sorted(HEAVY_IMAGENET))
def test_forward_imagenet_shape_on_meta(name):
    """Shape check without compute for the models whose real 224x224 forward is marked slow."""
    with torch.device("meta"):
        model = build_model(name, "imagenet")
        out = model(torch.empty(2, 3, 224, 224))
    assert out.shape == (2, 1000)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY_IMAGENET else n for n in ALL],
)
def test_forward_imagenet_real(name):
    torch.manual_seed(0)
    model = build_model(name, "imagenet").eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 224, 224))
    assert out.shape == (2, 1000)
    assert torch.isfinite(out).all()


def test_backward_fills_every_gradient_listed_by_gradient_sizes():
    model = build_model("resnet18", "mnist")
    x, y = torch.randn(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])
    torch.nn.functional.cross_entropy(model(x), y).backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None for g in grads)
    assert [g.numel() for g in grads] == gradient_sizes("resnet18", "mnist")


@pytest.mark.parametrize("name", list(TORCHVISION_PARAMS))
def test_imagenet_params_match_torchvision(by_model, name):
    assert by_model.loc[name, "params"] == TORCHVISION_PARAMS[name]


@pytest.mark.parametrize("name", list(PAPER_TABLE_3_1))
def test_table_3_1_sizes_within_2_percent(by_model, name):
    ours = by_model.loc[name, "size_mib"]
    paper = PAPER_TABLE_3_1[name]["size_mb"]
    assert ours == pytest.approx(paper, rel=0.02)
    assert ours == pytest.approx(by_model.loc[name, "params"] * 4 / 2**20)


@pytest.mark.parametrize("name", list(PAPER_TABLE_3_1))
def test_table_3_1_gflops(by_model, name):
    # ResNet v1.5 (stride on the 3x3) costs 4.09 GMACs vs the paper's v1 3.9: allow 6%.
    assert by_model.loc[name, "gflops"] == pytest.approx(PAPER_TABLE_3_1[name]["gflops"], rel=0.06)


def test_paper_comparison_columns(imagenet_table):
    df = paper_comparison(imagenet_table)
    assert list(df["model"]) == list(PAPER_TABLE_3_1)
    assert {"size_mib", "paper_size_mb", "gflops", "paper_gflops", "size_rel_diff"} <= set(df)
    assert (df["size_rel_diff"].abs() < 0.02).all()


def test_shallow_cnn_is_seed_003_layers_and_macs():
    # conv(1->20, 5x5), conv(20->50, 5x5), FC 800 -> 500 -> 10, weights then biases.
    assert gradient_sizes("shallow_cnn", "mnist") == [500, 20, 25_000, 50, 400_000, 500, 5_000, 10]
    model = build_model("shallow_cnn", "mnist")
    # 24*24*20*25 + 8*8*50*20*25 + 800*500 + 500*10, counted by hand
    assert count_macs(model, (1, 28, 28)) == 288_000 + 1_600_000 + 400_000 + 5_000
    out = model(torch.randn(3, 1, 28, 28))
    assert torch.allclose(out.exp().sum(1), torch.ones(3), atol=1e-5)  # log-softmax output


def test_meta_mac_count_equals_real_forward():
    real = count_macs(build_model("resnet18", "cifar"), (3, 32, 32))
    assert model_table("cifar", ["resnet18"])["gflops"].item() * 1e9 == pytest.approx(real)


def test_mlp_hidden_width_sets_second_hidden_layer():
    assert gradient_sizes("mlp", "mnist", hidden=64) == [784 * 128, 128, 128 * 64, 64, 64 * 10, 10]
    small, big = (sum(gradient_sizes("mlp", "mnist", hidden=h)) for h in (16, 4096))
    assert big > small


def test_num_classes_override_and_explicit_shape():
    assert build_model("resnet18", "cifar", num_classes=100)(torch.randn(2, 3, 32, 32)).shape == (
        2,
        100,
    )
    assert build_model("shallow_cnn", (3, 40, 40))(torch.randn(2, 3, 40, 40)).shape == (2, 10)


@pytest.mark.parametrize(
    "call, bad",
    [
        (lambda: build_model("lenet"), "lenet"),
        (lambda: build_model("vgg16", "svhn"), "svhn"),
        (lambda: model_table("tiny"), "tiny"),
        (lambda: build_model("mlp", "mnist", activation="gelu"), "gelu"),
    ],
)
def test_bad_names_give_one_line_listing_valid(call, bad):
    with pytest.raises(ValueError) as err:
        call()
    msg = str(err.value)
    assert bad in msg and "valid:" in msg and "\n" not in msg
