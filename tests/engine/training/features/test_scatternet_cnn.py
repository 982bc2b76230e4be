"""ScatterNet + CNN (Tramèr & Boneh 2021): the spec takes `"features": "scatternet"` with `"model": "cnn"`, the
model is their CNN on the scattering coefficients (81×7×7 for MNIST), the spec's coordinate count is the model the
trainer builds, and a few DP-SGD steps run end to end on generated 28×28 images."""

import math

import pytest
import torch
from torch import nn

from engine.training import parse_spec
from engine.training.config.plan import plan_run
from engine.training.config.reach import spec_coordinates
from engine.training.config.spec import spec_dataset_info
from engine.training.features import scatternet
from engine.training.models.architectures import build_model, model_image_shape, trainable_coordinates
from engine.training.run_setup import build_run_model
from engine.training.trainers.single_run import train
from tests.helpers import fast_spec, square_images

MNIST_COEFFICIENTS = (81, 7, 7)


def scatter_spec(**changes):
    return fast_spec(dataset="mnist", model="cnn", features="scatternet", lot_size=32, delta=1e-5) | changes


def test_the_spec_accepts_scatternet_features_for_the_cnn():
    spec = parse_spec(scatter_spec())
    assert (spec.model, spec.features) == ("cnn", "scatternet")
    assert spec.to_dict()["features"] == "scatternet"
    assert parse_spec(scatter_spec(dataset="fashion-mnist")).features == "scatternet"


def test_the_model_sees_the_scattering_shape():
    assert model_image_shape("scatternet", (1, 28, 28)) == MNIST_COEFFICIENTS
    assert scatternet.scattering_shape((1, 28, 28)) == MNIST_COEFFICIENTS
    assert model_image_shape("scatternet", (3, 32, 32)) == (243, 8, 8)
    assert model_image_shape("pixels", (1, 28, 28)) == (1, 28, 28)


def test_the_grey_scatternet_cnn_is_tramer_and_bonehs():
    """Handcrafted-DP's MNIST_CNN on K = 81 channels: 3×3 convolutions to 16 (stride 2) and 32 channels, tanh,
    a hidden layer of 32: 33,066 parameters."""
    torch.manual_seed(0)
    model = build_model("cnn", n_features=3969, n_classes=10, image_shape=MNIST_COEFFICIENTS, features="scatternet")
    assert model(torch.randn(5, 3969)).shape == (5, 10)
    convs = [m for m in model if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding) for c in convs] == [
        (81, 16, (3, 3), (2, 2), (1, 1)),
        (16, 32, (3, 3), (1, 1), (1, 1)),
    ]
    linears = [m for m in model if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(32 * 4 * 4, 32), (32, 10)]
    assert sum(isinstance(m, nn.Tanh) for m in model) == 3
    assert sum(p.numel() for p in model.parameters()) == 33_066


def test_the_colour_scatternet_cnn_is_tramer_and_bonehs():
    """Handcrafted-DP's CIFAR10_CNN (default size) on K = 243 channels: 3×3 conv to 64, 2×2 max pool, 3×3 conv to
    64, one linear layer: 187,210 parameters."""
    model = build_model("cnn", n_features=243 * 64, n_classes=10, image_shape=(243, 8, 8), features="scatternet")
    assert model(torch.randn(2, 243 * 64)).shape == (2, 10)
    assert [m.out_channels for m in model if isinstance(m, nn.Conv2d)] == [64, 64]
    assert [(m.in_features, m.out_features) for m in model if isinstance(m, nn.Linear)] == [(64 * 4 * 4, 10)]
    assert sum(p.numel() for p in model.parameters()) == 187_210


@pytest.mark.parametrize(("dataset", "coordinates"), [("mnist", 33_066), ("cifar10", 187_210)])
def test_spec_coordinates_count_the_model_the_trainer_builds(dataset, coordinates):
    spec = parse_spec(scatter_spec(dataset=dataset, delta=1e-6))
    info = spec_dataset_info(spec)
    inputs = math.prod(model_image_shape("scatternet", info.image_shape))
    built = build_run_model(spec, n_features=inputs, n_classes=10, image_shape=info.image_shape)
    assert isinstance(built[0], nn.Unflatten) and built[0].unflattened_size == model_image_shape(
        "scatternet", info.image_shape
    )
    assert sum(p.numel() for p in built.parameters() if p.requires_grad) == coordinates
    assert spec_coordinates(spec, info) == coordinates
    assert (
        trainable_coordinates(
            "cnn", n_features=inputs, n_classes=10, image_shape=built[0].unflattened_size, features="scatternet"
        )
        == coordinates
    )


def test_a_few_dpsgd_steps_end_to_end_on_generated_28x28_images():
    data = square_images(n_train=160)
    raw = scatter_spec(noise_multiplier=1.0, epochs=1, lr=1.0)
    del raw["target_epsilon"]
    spec = parse_spec(raw)
    plan = plan_run(spec, n_train=len(data.x_train))
    records = []
    result = train(spec, dataset=data, plan=plan, on_step=records.append, device=torch.device("cpu"))
    assert result.steps == plan.steps == 5
    assert math.isfinite(result.test_loss) and 0.0 <= result.test_accuracy <= 1.0
    assert result.epsilon is not None and 0.0 < result.epsilon < math.inf
    trained = [r for r in records if r.step > 0]
    assert len(trained) == 5 and all(math.isfinite(r.train_loss) and r.grad_norm_p50 > 0.0 for r in trained)
