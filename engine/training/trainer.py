"""Train one run spec: load data, plan DP-SGD, run the step chain, emit a record per step.

The ε of every record comes from the RDP accountant applied to the DP event of the steps actually
taken so far (the plan's event, truncated), so a stopped run reports the ε it really spent.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from engine.privacy import panel, privacy_statement, rdp_curve
from engine.training.clipping import make_clipper
from engine.training.datasets import Dataset, load_dataset
from engine.training.dpsgd import DpSgdPlan, dpsgd_step, plan_dpsgd
from engine.training.models import build_model
from engine.training.spec import RunSpec

EVALUATIONS_PER_RUN = 100


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """Metrics after `step` steps. Fields marked private are computed on private training data."""

    step: int
    epoch: float
    epsilon: float
    train_loss: float | None = None  # private: mean loss on the lot
    lot_size: int | None = None  # private: the realized Poisson lot size
    clip_fraction: float | None = None  # private: share of the lot whose gradient was clipped
    test_accuracy: float | None = None
    test_loss: float | None = None
    elapsed_s: float | None = None  # wall time since the first step began

    def metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items() if k != "step" and v is not None}


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    test_accuracy: float
    test_loss: float
    epsilon: float  # the tightest valid ε(δ) of the steps taken, by `accountant`
    delta: float
    noise_multiplier: float
    sampling_rate: float
    steps: int
    planned_steps: int
    accountant: str
    epsilons: dict[str, float]  # every applicable accountant's ε for the same steps
    best_order: float  # of the RDP accountant
    order_at_edge: bool
    privacy_statement: str
    stopped_early: bool
    seconds: float
    device: str

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
    plan: DpSgdPlan | None = None,
) -> TrainResult:
    """Train `spec` with DP-SGD. `plan` skips calibration when the caller already planned the run."""
    started = time.perf_counter()
    device = device or pick_device()
    data = dataset or load_dataset(spec.dataset, data_dirs)
    n_train = len(data.x_train)
    plan = plan or plan_dpsgd(spec, n_train=n_train)
    if plan.n_train != n_train:
        raise ValueError(f"plan is for N={plan.n_train} but {spec.dataset} has N={n_train}")
    curve = rdp_curve(plan.ledger(), delta=plan.delta)  # ε after every step, for the live plot

    torch.manual_seed(spec.seed)
    model = build_model(
        spec.model, n_features=data.n_features, n_classes=data.n_classes, hidden_sizes=spec.hidden_sizes
    ).to(device)
    clipper = make_clipper(model)
    optimizer = torch.optim.SGD(clipper.params, lr=spec.lr)
    sampling_generator = torch.Generator(device=device).manual_seed(spec.seed * 2 + 1)
    noise_generator = torch.Generator(device=device).manual_seed(spec.seed * 2 + 2)

    x_train, y_train = torch.as_tensor(data.x_train, device=device), torch.as_tensor(data.y_train, device=device)
    x_test, y_test = torch.as_tensor(data.x_test, device=device), torch.as_tensor(data.y_test, device=device)
    eval_every = max(1, plan.steps // EVALUATIONS_PER_RUN)
    emit = on_step or (lambda record: None)

    accuracy, loss = evaluate(model, x_test, y_test)
    emit(StepRecord(step=0, epoch=0.0, epsilon=0.0, test_accuracy=accuracy, test_loss=loss))
    steps_done = 0
    loop_started = time.perf_counter()
    for step in range(1, plan.steps + 1):
        stats = dpsgd_step(
            clipper=clipper,
            optimizer=optimizer,
            x=x_train,
            y=y_train,
            plan=plan,
            sampling_generator=sampling_generator,
            noise_generator=noise_generator,
        )
        steps_done = step
        stop = bool(should_stop and should_stop())
        record = dict(
            step=step,
            epoch=step * plan.expected_lot_size / n_train,
            epsilon=float(curve.epsilons[step - 1]),
            lot_size=stats.lot_size,
            train_loss=stats.loss_sum / stats.lot_size if stats.lot_size else None,
            clip_fraction=stats.clipped_fraction if stats.lot_size else None,
            elapsed_s=time.perf_counter() - loop_started,
        )
        if step % eval_every == 0 or step == plan.steps or stop:
            accuracy, loss = evaluate(model, x_test, y_test)
            record.update(test_accuracy=accuracy, test_loss=loss)
        emit(StepRecord(**record))
        if stop:
            break

    ledger = plan.ledger(steps_done)
    accounts = panel(ledger, delta=plan.delta)
    statement = privacy_statement(ledger=ledger, panel=accounts, dataset_size=n_train, lot_size=plan.expected_lot_size)
    return TrainResult(
        test_accuracy=accuracy,
        test_loss=loss,
        epsilon=statement.epsilon,
        delta=plan.delta,
        noise_multiplier=plan.noise_multiplier,
        sampling_rate=plan.sampling_rate,
        steps=steps_done,
        planned_steps=plan.steps,
        accountant=statement.accountant,
        epsilons=accounts.final(),
        best_order=accounts.curves["rdp"].final_order,
        order_at_edge=accounts.curves["rdp"].order_at_edge,
        privacy_statement=statement.text(),
        stopped_early=steps_done < plan.steps,
        seconds=time.perf_counter() - started,
        device=str(device),
    )


__all__ = ["DpSgdPlan", "StepRecord", "TrainResult", "evaluate", "pick_device", "train"]
