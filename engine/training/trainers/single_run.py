"""Train one run spec: load data, apply DP-PCA if asked, plan, run the algorithm's step chain, emit a
record per step.

The ε of every record comes from the RDP accountant applied to the ledger of the steps actually
taken so far (the plan's ledger, truncated), so a stopped run reports the ε it really spent. The
final result reports the tightest valid ε of every accountant that applies.

With `ema_decay` the model evaluated (every test accuracy and loss) and released is the moving average of the
iterates (`averaging`: post-processing, no ε); with `augmentation_multiplicity` DP-SGD's lots are augmented
(`augmentation`: public transforms, the same ledger).
"""

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from engine.privacy import Panel, PrivacyLedger, panel, privacy_statement, rdp_curve
from engine.privacy.tradeoff import attack_bound
from engine.training.algorithms.aniso import DEFAULT_MAX_RATIO, DEFAULT_SMOOTHING, AnisoDPSGD, aniso_dpsgd_step
from engine.training.algorithms.dpsgd import StepStats, dpsgd_step, noise_std
from engine.training.algorithms.dpsgd_graph import step_graph_for
from engine.training.algorithms.learners.learner_runs import train_learner
from engine.training.algorithms.noisy_gd import BinaryLogistic, noisy_count, noisy_gd_step
from engine.training.algorithms.nonprivate import ShuffledBatches, nonprivate_step
from engine.training.algorithms.optimizers import OptimizerName, make_optimizer, set_learning_rate
from engine.training.augmentation import spec_augmentation
from engine.training.averaging import iterate_average
from engine.training.canaries import GradientCanaries, InputCanaries, audited, make_canaries
from engine.training.clipping import make_clipper
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan, plan_run
from engine.training.config.reach import model_options
from engine.training.config.spec import RunSpec
from engine.training.datasets import Dataset
from engine.training.inputs import features, input_arrays, load_spec_dataset
from engine.training.models.architectures import build_model
from engine.training.noise import noise_mode, random_streams
from engine.training.noise_ahead import NoiseAhead

EVALUATIONS_PER_RUN = 100


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """Metrics after `step` steps. Fields marked private are computed on private training data."""

    step: int
    epoch: float
    epsilon: float | None  # None: not private
    train_loss: float | None = None  # private: mean loss on the lot
    lot_size: int | None = None  # private: the realized Poisson lot size
    clip_fraction: float | None = None  # private: share of the lot whose gradient was clipped
    grad_norm_p10: float | None = None  # private: quantiles of the lot's per-example gradient norms before clipping
    grad_norm_p50: float | None = None
    grad_norm_p90: float | None = None
    train_accuracy: float | None = None  # private: accuracy on the lot, from the logits the step computed (the iterate)
    test_accuracy: float | None = None  # of the released model: the iterates' moving average with ema_decay
    test_loss: float | None = None
    elapsed_s: float | None = None  # wall time since the first step began
    regret: float | None = None  # private: online learners' loss minus the best expert's, after `step` rounds
    regret_bound: float | None = None  # public: the theorem's bound on the expected regret after `step` rounds
    regret_nonprivate: float | None = None  # private: non-private RWM (η = √(8 ln k / T)) on the same stream

    def metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items() if k != "step" and v is not None}


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    algorithm: str
    private: bool
    test_accuracy: float
    test_loss: float
    epsilon: float | None  # the tightest valid ε(δ) of the steps taken, by `accountant`; None: not private
    delta: float | None
    noise_multiplier: float | None
    sampling_rate: float
    steps: int
    planned_steps: int
    accountant: str | None
    epsilons: dict[str, float]  # every applicable accountant's ε for the same steps
    best_order: float | None  # of the RDP accountant
    order_at_edge: bool
    privacy_statement: str
    stopped_early: bool
    seconds: float
    device: str
    stack: dict | None = None  # trained in a vectorized stack (`algorithms.stacked`): size, lead seed, joint ε
    audit: dict | None = None  # an audited run's canaries (`canaries.audited`): ε̂, its ceiling, the counts
    restart: dict | None = None  # a restarted run's earlier attempts and own ε (`TrainingPlan.restart`)
    attack_bound: dict | None = None  # the highest TPR of any membership-inference attack at each FPR (`tradeoff`)

    def to_dict(self) -> dict:
        return asdict(self)


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 8192) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) on a held-out set."""
    correct, loss = 0.0, 0.0
    with torch.no_grad():
        for start in range(0, len(x), batch):
            logits = model(x[start : start + batch])
            loss += float(F.cross_entropy(logits, y[start : start + batch], reduction="sum"))
            correct += float((logits.argmax(dim=1) == y[start : start + batch]).sum())
    return correct / len(x), loss / len(x)


def train(
    spec: RunSpec,
    *,
    data_dirs: Sequence[Path] = (),
    on_step: Callable[[StepRecord], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    device: torch.device | None = None,
    dataset: Dataset | None = None,
    plan: TrainingPlan | None = None,
) -> TrainResult:
    """Train `spec`. `plan` skips calibration when the caller already planned the run."""
    started = time.perf_counter()
    device = device or pick_device()
    data = dataset or load_spec_dataset(spec, data_dirs)
    n_train = len(data.x_train)
    plan = plan or plan_run(spec, n_train=n_train)
    if plan.n_train != n_train:
        raise ValueError(f"plan is for N={plan.n_train} but {spec.dataset} has N={n_train}")
    ledger = plan.ledger()
    # ε after every step count 0..T (step 0 holds the up-front releases), for the live plot
    curve = rdp_curve(ledger, delta=plan.delta, steps=np.arange(plan.steps + 1)) if ledger else None

    def epsilon_after(step: int) -> float | None:
        return None if curve is None else float(curve.epsilons[step])

    if Algorithm(spec.algorithm).learner:
        emit = on_step or (lambda record: None)
        outcome = train_learner(
            spec,
            plan,
            data,
            should_stop=should_stop,
            report=lambda step, **metrics: emit(
                StepRecord(step=step, epoch=plan.epoch_of(step), epsilon=epsilon_after(step), **metrics)
            ),
        )
        return result_of(
            plan,
            spec,
            accuracy=outcome.test_accuracy,
            loss=outcome.test_loss,
            steps_done=outcome.steps,
            seconds=time.perf_counter() - started,
            device=device,
        )

    streams = random_streams(spec, device)  # the private randomness: from the whole spec, or the OS's
    x_train, x_test = input_arrays(spec, data, cache_dir=Path(data_dirs[-1]) if data_dirs else None, device=device)
    x_train, y_train = torch.as_tensor(x_train, device=device), torch.as_tensor(data.y_train, device=device)
    x_test, y_test = torch.as_tensor(x_test, device=device), torch.as_tensor(data.y_test, device=device)
    x_train, x_test = features(spec, plan, x_train, x_test, streams["pca"])

    torch.manual_seed(spec.seed)  # the initialization is public: from the seed alone
    model = build_run_model(
        spec, n_features=x_train.shape[1], n_classes=data.n_classes, image_shape=data.image_shape
    ).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(OptimizerName(spec.optimizer), params, lr=spec.lr, momentum=spec.momentum)
    canaries = make_canaries(spec, model, x_train=x_train, public=(x_test, y_test), n_classes=data.n_classes)
    if isinstance(canaries, InputCanaries):  # those that are in are examples like any other
        x_train, y_train = canaries.training_set(x_train, y_train)
    gradient_canaries = canaries if isinstance(canaries, GradientCanaries) else None
    augmentation = spec_augmentation(spec, data.image_shape, streams)
    step_once = make_step(
        spec, plan, model, optimizer, x_train, y_train, streams, canaries=gradient_canaries, augmentation=augmentation
    )
    average = iterate_average(model, spec.ema_decay)  # None when off: the plain run
    released = model if average is None else average.model
    eval_every = max(1, plan.steps // EVALUATIONS_PER_RUN)
    emit = on_step or (lambda record: None)

    accuracy, loss = evaluate(released, x_test, y_test)
    emit(StepRecord(step=0, epoch=0.0, epsilon=epsilon_after(0), test_accuracy=accuracy, test_loss=loss))
    steps_done = 0
    loop_started = time.perf_counter()
    for step in range(1, plan.steps + 1):
        set_learning_rate(optimizer, spec.lr * spec.lr_schedule.factor_at(plan.epoch_of(step - 1)))
        stats = step_once(step)
        if average is not None:
            average.update()
        steps_done = step
        stop = bool(should_stop and should_stop())
        record = dict(
            step=step,
            epoch=plan.epoch_of(step),
            epsilon=epsilon_after(step),
            lot_size=stats.lot_size,
            train_loss=stats.loss_sum / stats.lot_size if stats.lot_size else None,
            clip_fraction=stats.clipped_fraction,
            grad_norm_p10=stats.grad_norm_p10,
            grad_norm_p50=stats.grad_norm_p50,
            grad_norm_p90=stats.grad_norm_p90,
            train_accuracy=stats.correct / stats.lot_size if stats.correct is not None and stats.lot_size else None,
            elapsed_s=time.perf_counter() - loop_started,
        )
        if step % eval_every == 0 or step == plan.steps or stop:
            accuracy, loss = evaluate(released, x_test, y_test)
            record.update(test_accuracy=accuracy, test_loss=loss)
        emit(StepRecord(**record))
        if stop:
            break
    result = result_of(
        plan,
        spec,
        accuracy=accuracy,
        loss=loss,
        steps_done=steps_done,
        seconds=time.perf_counter() - started,
        device=device,
    )
    return result if canaries is None else audited(result, canaries, model, delta=plan.delta)


def build_run_model(spec: RunSpec, *, n_features: int, n_classes: int, image_shape) -> nn.Module:
    if spec.algorithm == Algorithm.NOISY_GD:
        return BinaryLogistic(n_features)
    options = model_options(spec, image_shape)  # ScatterNet features: the image model sees their (K, h, w)
    return build_model(spec.model, n_features=n_features, n_classes=n_classes, **options)


def make_step(
    spec: RunSpec, plan: TrainingPlan, model: nn.Module, optimizer, x, y, streams, *, canaries=None, augmentation=None
) -> Callable[[int], StepStats]:
    """The algorithm's step as a function of the (1-based) step number (DP-SGD's with its audit's `canaries` and
    its `augmentation`, if any: then each lot runs eagerly, and a run without one calls the step as before)."""
    algorithm = Algorithm(spec.algorithm)
    if algorithm is Algorithm.NONPRIVATE:
        batches = ShuffledBatches(len(x), plan.lot_size, streams["shuffle"].generator(), x.device)
        return lambda step: nonprivate_step(
            model=model, optimizer=optimizer, x=x, y=y, batches=batches, physical_batch_size=spec.physical_batch_size
        )
    clipper = make_clipper(model)
    if algorithm is Algorithm.ANISO_DPSGD:
        aniso = AnisoDPSGD(
            clipper,
            granularity=spec.aniso_granularity or "layer",
            smoothing=spec.aniso_smoothing if spec.aniso_smoothing is not None else DEFAULT_SMOOTHING,
            max_ratio=spec.aniso_max_ratio or DEFAULT_MAX_RATIO,
        )
        return lambda step: aniso_dpsgd_step(
            step=step,
            aniso=aniso,
            optimizer=optimizer,
            x=x,
            y=y,
            plan=plan,
            physical_batch_size=spec.physical_batch_size,
            sampling_generator=streams["sampling"],
            noise_generator=streams["noise"],
        )
    if algorithm is Algorithm.NOISY_GD:
        denominator = noisy_count(len(x), epsilon=plan.count_epsilon, generator=streams["count"])
        ahead = drawn_ahead(clipper, plan, streams)
        return lambda step: noisy_gd_step(
            step=step,
            clipper=clipper,
            optimizer=optimizer,
            x=x,
            y=y,
            plan=plan,
            denominator=denominator,
            physical_batch_size=spec.physical_batch_size,
            noise_generator=streams["noise"],
            noise_ahead=ahead,
        )
    ahead = drawn_ahead(clipper, plan, streams)
    graph = None
    if canaries is None and augmentation is None:  # audited, augmented: canaries, copies between the stages
        graph = step_graph_for(
            clipper,
            x,
            y,
            n_train=len(x),
            sampling_rate=plan.sampling_rate,
            lot_size=plan.lot_size,
            physical_batch_size=spec.physical_batch_size,
        )
    return lambda step: dpsgd_step(
        step=step,
        clipper=clipper,
        optimizer=optimizer,
        x=x,
        y=y,
        plan=plan,
        physical_batch_size=spec.physical_batch_size,
        sampling_generator=streams["sampling"],
        noise_generator=streams["noise"],
        canaries=canaries,
        noise_ahead=ahead,
        step_graph=graph,
        **({} if augmentation is None else {"augmentation": augmentation}),
    )


def drawn_ahead(clipper, plan: TrainingPlan, streams) -> NoiseAhead:
    """The run's Gaussian noise drawn a step ahead, from its noise stream (`engine.training.noise_ahead`)."""
    return NoiseAhead(clipper.params, functools.partial(noise_std, plan), streams["noise"], last_step=plan.steps)


def result_of(
    plan: TrainingPlan,
    spec: RunSpec,
    *,
    accuracy,
    loss,
    steps_done,
    seconds,
    device,
    panel_of: Callable[[PrivacyLedger, float], Panel] | None = None,
) -> TrainResult:
    """The run's result; `panel_of(ledger, δ)` (default `panel`) gives every accountant's ε of the steps taken."""
    common = dict(
        algorithm=spec.algorithm,
        private=plan.private,
        test_accuracy=accuracy,
        test_loss=loss,
        sampling_rate=plan.sampling_rate,
        steps=steps_done,
        planned_steps=plan.steps,
        stopped_early=steps_done < plan.steps,
        seconds=seconds,
        device=str(device),
    )
    if not plan.private:
        statement = (
            "Not differentially private: a baseline trained without clipping or noise (ε = ∞). "
            "Its accuracy is the reference the private runs pay for."
        )
        return TrainResult(
            **common,
            epsilon=None,
            delta=None,
            noise_multiplier=None,
            accountant=None,
            epsilons={},
            best_order=None,
            order_at_edge=False,
            privacy_statement=statement,
        )
    panel_of = panel_of or (lambda ledger, delta: panel(ledger, delta=delta))
    ledger = plan.ledger(steps_done)
    accounts = panel_of(ledger, plan.delta)
    lots = not plan.full_batch and plan.learner_step is None  # the learners draw no lots
    tightest, epsilon = accounts.tightest()
    attack = attack_bound(ledger, accountant=tightest, epsilon=epsilon, delta=plan.delta)
    statement = privacy_statement(
        ledger=ledger,
        panel=accounts,
        dataset_size=plan.n_train,
        lot_size=plan.lot_size if lots else None,
        noise=noise_mode(spec),
        attack=attack,
    )
    restart = plan.restart(steps_done, epsilon=statement.epsilon, panel_of=panel_of)
    return TrainResult(
        **common,
        epsilon=statement.epsilon,
        delta=plan.delta,
        noise_multiplier=plan.noise_multiplier,
        accountant=statement.accountant,
        epsilons=accounts.final(),
        best_order=accounts.curves["rdp"].final_order,
        order_at_edge=accounts.curves["rdp"].order_at_edge,
        privacy_statement=statement.text() + (f"\n{restart['sentence']}" if restart else ""),
        restart=restart,
        attack_bound=attack.to_dict(),
    )


__all__ = ["StepRecord", "TrainResult", "evaluate", "pick_device", "train"]
