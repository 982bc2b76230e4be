"""From a spec, its plan and its loaded dataset to what a run trains with (`build_training`): the inputs the model
sees on the run's device (`inputs`: pixels or ScatterNet features, (DP-)PCA), the model, its optimizer, an audit's
canaries, the augmentation, the algorithm's step (`algorithms.registry.make_step`) and the moving average of the
iterates. The single-run trainer trains with it and the pace (`engine.training.pace`) times it, so the two never
drift apart. The textbook learners, which have no model or step, are set up by their own route."""

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from engine.training.algorithms.noisy_gd import BinaryLogistic
from engine.training.algorithms.optimizers import OptimizerName, make_optimizer
from engine.training.algorithms.registry import Step, StepContext, make_step
from engine.training.augmentation import spec_augmentation
from engine.training.averaging import IterateAverage, iterate_average
from engine.training.canaries import Canaries, GradientCanaries, InputCanaries, make_canaries
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan
from engine.training.config.reach import model_options
from engine.training.config.spec import RunSpec
from engine.training.datasets import Dataset
from engine.training.inputs import features, input_arrays
from engine.training.models.architectures import build_model
from engine.training.noise import random_streams


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def build_run_model(spec: RunSpec, *, n_features: int, n_classes: int, image_shape) -> nn.Module:
    """The spec's model for inputs of `n_features` (noisy GD: its logistic regression without a bias)."""
    if spec.algorithm == Algorithm.NOISY_GD:
        return BinaryLogistic(n_features)
    options = model_options(spec, image_shape)  # ScatterNet features: the image model sees their (K, h, w)
    return build_model(spec.model, n_features=n_features, n_classes=n_classes, **options)


@dataclass(frozen=True, kw_only=True)
class RunTraining:
    """What a run trains with. `step(t)` takes step t (1-based) of the plan; `released` is the model every
    evaluation sees and the run releases (the iterates' moving average with `ema_decay`, else the model)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    step: Step
    average: IterateAverage | None
    canaries: Canaries | None  # an audited run's, scored after training (`canaries.audited`)
    x_train: Tensor  # with the input canaries that are in, if any
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    inputs_s: float  # seconds spent preparing the inputs (ScatterNet features, PCA), part of the run's setup

    @property
    def released(self) -> nn.Module:
        return self.model if self.average is None else self.average.model


def build_training(
    spec: RunSpec, plan: TrainingPlan, data: Dataset, device: torch.device, *, cache_dir: Path | None = None
) -> RunTraining:
    """Set `spec` up to train by `plan` on `data` (ScatterNet features cached under `cache_dir`, if given). The
    private randomness comes from the run's streams; the initialization from the seed alone (it is public)."""
    started = time.perf_counter()
    streams = random_streams(spec, device)  # the private randomness: from the whole spec, or the OS's
    x_train, x_test = input_arrays(spec, data, cache_dir=cache_dir, device=device)
    x_train, y_train = torch.as_tensor(x_train, device=device), torch.as_tensor(data.y_train, device=device)
    x_test, y_test = torch.as_tensor(x_test, device=device), torch.as_tensor(data.y_test, device=device)
    x_train, x_test = features(spec, plan, x_train, x_test, streams["pca"])
    inputs_s = time.perf_counter() - started

    torch.manual_seed(spec.seed)
    model = build_run_model(
        spec, n_features=x_train.shape[1], n_classes=data.n_classes, image_shape=data.image_shape
    ).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(OptimizerName(spec.optimizer), params, lr=spec.lr, momentum=spec.momentum)
    canaries = make_canaries(spec, model, x_train=x_train, public=(x_test, y_test), n_classes=data.n_classes)
    if isinstance(canaries, InputCanaries):  # those that are in are examples like any other
        x_train, y_train = canaries.training_set(x_train, y_train)
    context = StepContext(
        spec=spec,
        plan=plan,
        model=model,
        optimizer=optimizer,
        x=x_train,
        y=y_train,
        streams=streams,
        canaries=canaries if isinstance(canaries, GradientCanaries) else None,
        augmentation=spec_augmentation(spec, data.image_shape, streams),
    )
    return RunTraining(
        model=model,
        optimizer=optimizer,
        step=make_step(context),
        average=iterate_average(model, spec.ema_decay),  # None when off: the plain run
        canaries=canaries,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        inputs_s=inputs_s,
    )


__all__ = ["RunTraining", "build_run_model", "build_training", "pick_device"]
