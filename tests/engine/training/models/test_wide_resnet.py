"""The wide ResNet (De et al. 2022; Zagoruyko & Komodakis 2016): its layout and size, its spec keys, and a few
DP-SGD steps end to end on generated CIFAR-like images (no CIFAR-10 download)."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from engine.training import SpecError, parse_spec, stack_key
from engine.training.config.plan import plan_run
from engine.training.config.reach import spec_coordinates
from engine.training.config.spec import spec_dataset_info
from engine.training.datasets import Dataset
from engine.training.models.architectures import build_model, trainable_coordinates
from engine.training.models.layers import WeightStandardizedConv2d
from engine.training.models.registry import MODELS
from engine.training.models.wide_resnet import WideBlock
from engine.training.run_setup import build_run_model
from engine.training.trainers.single_run import train
from tests.helpers import fast_spec

CIFAR = (3, 32, 32)


def wrn(depth: int, width: int, image_shape=CIFAR, n_classes: int = 10) -> nn.Module:
    torch.manual_seed(0)
    return build_model(
        "wrn",
        n_features=math.prod(image_shape),
        n_classes=n_classes,
        image_shape=image_shape,
        wrn_depth=depth,
        wrn_width=width,
    )


def cifar_like(n_train: int = 64, n_test: int = 32, seed: int = 0) -> Dataset:
    """Generated 3×32×32 images in [0, 1] of 10 classes (a brighter square whose place is the class)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n_train + n_test)
    x = rng.random((n_train + n_test, *CIFAR)).astype(np.float32) * 0.3
    for i, label in enumerate(y):
        row, col = divmod(int(label), 5)
        x[i, :, 4 + 12 * row : 14 + 12 * row, 2 + 6 * col : 6 + 6 * col] += 0.7
    x = x.reshape(len(x), -1)
    return Dataset(
        name="cifar10",
        x_train=x[:n_train],
        y_train=y[:n_train],
        x_test=x[n_train:],
        y_test=y[n_train:],
        n_classes=10,
        image_shape=CIFAR,
    )


def test_wrn_is_a_described_model():
    assert "wrn" in MODELS
    assert "De et al. 2022" in MODELS["wrn"].description


@pytest.mark.parametrize("image_shape", [CIFAR, (1, 28, 28), (3, 8, 8), (2, 9, 13)])
def test_any_image_of_at_least_8x8_gives_one_logit_per_class(image_shape):
    model = wrn(10, 1, image_shape, n_classes=7)
    assert model(torch.rand(3, math.prod(image_shape))).shape == (3, 7)


def test_images_smaller_than_8x8_and_bad_depths_are_refused():
    with pytest.raises(ValueError, match="H, W ≥ 8"):
        wrn(10, 1, (1, 7, 7))
    with pytest.raises(ValueError, match="H, W ≥ 8"):
        build_model("wrn", n_features=64, n_classes=10)  # no image shape
    with pytest.raises(ValueError, match="6n \\+ 4"):
        wrn(12, 1)


def test_wrn_10_1_has_the_hand_counted_parameters():
    """One block per stage; the first block of each stage projects its shortcut (jax_privacy's layout); every
    convolution has a bias, every GroupNorm a scale and an offset."""

    def conv(c_in, c_out, k):
        return c_in * c_out * k * k + c_out

    def norm(c):
        return 2 * c

    stem = conv(3, 16, 3)
    stages = 0
    for c_in, c_out in ((16, 16), (16, 32), (32, 64)):
        residual = norm(c_in) + conv(c_in, c_out, 3) + norm(c_out) + conv(c_out, c_out, 3)
        shortcut = norm(c_in) + conv(c_in, c_out, 1)
        stages += residual + shortcut
    head = norm(64) + 64 * 10 + 10
    expected = stem + stages + head
    assert expected == 78_586
    model = wrn(10, 1)
    assert sum(p.numel() for p in model.parameters()) == expected
    assert (
        trainable_coordinates("wrn", n_features=3072, n_classes=10, image_shape=CIFAR, wrn_depth=10, wrn_width=1)
        == expected
    )


def test_wrn_16_4_layout_groupnorm_and_weight_standardization_no_batchnorm():
    model = wrn(16, 4)
    modules = list(model.modules())
    assert not any("BatchNorm" in type(m).__name__ for m in modules)
    convs = [m for m in modules if isinstance(m, nn.Conv2d)]
    assert all(isinstance(c, WeightStandardizedConv2d) for c in convs)
    assert len(convs) == 1 + 3 * 2 * 2 + 3  # stem, two blocks of two per stage, a projection per stage
    assert [c.out_channels for c in convs if c.kernel_size == (1, 1)] == [64, 128, 256]
    assert [c.stride for c in convs if c.kernel_size == (3, 3) and c.stride != (1, 1)] == [(2, 2), (2, 2)]
    norms = [m for m in modules if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 3 * 2 * 2 + 3 + 1  # two per block, one per projection, the final one
    assert all(n.num_groups == 16 and n.affine for n in norms)
    assert sum(isinstance(m, WideBlock) for m in modules) == 6
    assert not any(getattr(m, "inplace", False) for m in modules)
    assert sum(p.numel() for p in model.parameters()) == 2_751_562
    head = model[-1]
    assert isinstance(head, nn.Linear) and (head.in_features, head.out_features) == (256, 10)


def test_groups_shrink_to_a_divisor_of_the_channels():
    model = wrn(10, 3, (1, 8, 8))  # 48, 96, 192 channels: 16 groups; stem 16
    assert {n.num_groups for n in model.modules() if isinstance(n, nn.GroupNorm)} == {16}
    from engine.training.models.wide_resnet import group_norm

    assert group_norm(24).num_groups == 8 and group_norm(10).num_groups == 2


def test_an_example_output_does_not_depend_on_the_others():
    model = wrn(10, 2)
    x = torch.rand(4, 3072)
    changed = x.clone()
    changed[1:] = torch.rand(3, 3072) * 5
    torch.testing.assert_close(model(x)[0], model(changed)[0])


def spec_raw(**changes):
    return fast_spec(dataset="cifar10", model="wrn", lot_size=16, delta=1e-5) | changes


def test_spec_defaults_to_wrn_16_4_and_counts_its_coordinates():
    spec = parse_spec(spec_raw())
    assert (spec.wrn_depth, spec.wrn_width) == (16, 4)
    assert spec.to_dict()["wrn_depth"] == 16 and spec.to_dict()["wrn_width"] == 4
    assert spec_coordinates(spec, spec_dataset_info(spec)) == 2_751_562
    other = parse_spec(spec_raw(wrn_depth=28, wrn_width=10))
    assert other.cache_key("v") != spec.cache_key("v")
    assert "wrn_depth" not in parse_spec(fast_spec()).to_dict()  # other models' canonical specs are unchanged


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"wrn_depth": 12}, "wrn_depth", "must be 6n + 4 for n = 1 to 6 blocks per stage (10, 16, 22, 28, 34, 40)"),
        ({"wrn_depth": 46}, "wrn_depth", "[10, 40]"),
        ({"wrn_depth": 16.5}, "wrn_depth", "integer"),
        ({"wrn_width": 0}, "wrn_width", "[1, 10]"),
        ({"wrn_width": 11}, "wrn_width", "[1, 10]"),
        ({"wrn_width": "4"}, "wrn_width", ""),
        ({"model": "mlp", "wrn_depth": 16}, "wrn_depth", "only applies to model 'wrn'"),
        ({"model": "cnn", "wrn_width": 2}, "wrn_width", "only applies to model 'wrn'"),
        ({"dataset": "adult", "delta": 1e-6}, "model", "'wrn' needs images of at least 8×8; adult has no image"),
        ({"pca_dims": 20, "pca_noise": 4.0}, "pca_dims", "does not apply to model 'wrn'"),
        ({"features": "scatternet"}, "features", "the wrn takes pixels"),
    ],
)
def test_bad_wrn_specs_name_the_field(changes, field, message):
    with pytest.raises(SpecError) as caught:
        parse_spec(spec_raw(**changes))
    assert caught.value.field == field
    assert message in str(caught.value)


def test_wrn_runs_never_stack():
    assert stack_key(parse_spec(spec_raw())) is None
    assert stack_key(parse_spec(spec_raw(model="cnn"))) is not None


def test_a_few_dpsgd_steps_end_to_end_on_generated_32x32_images():
    data = cifar_like()
    raw = spec_raw(wrn_depth=10, wrn_width=1, noise_multiplier=1.0, epochs=1, lr=0.5, clip_norm=1.0)
    del raw["target_epsilon"]
    spec = parse_spec(raw)
    model = build_run_model(spec, n_features=3072, n_classes=10, image_shape=CIFAR)
    assert sum(p.numel() for p in model.parameters()) == 78_586  # the trainer builds the spec's WRN-10-1
    plan = plan_run(spec, n_train=len(data.x_train))
    records = []
    result = train(spec, dataset=data, plan=plan, on_step=records.append, device=torch.device("cpu"))
    assert result.steps == plan.steps == 4
    assert math.isfinite(result.test_loss) and 0.0 <= result.test_accuracy <= 1.0
    assert result.epsilon is not None and 0.0 < result.epsilon < math.inf
    assert result.epsilons["rdp"] == pytest.approx(records[-1].epsilon)
    trained = [r for r in records if r.step > 0]
    assert len(trained) == 4 and all(math.isfinite(r.train_loss) and r.lot_size is not None for r in trained)
    assert all(r.grad_norm_p50 > 0.0 for r in trained)  # per-example gradients of the WRN were clipped
