"""Which runs can train as one stack, and the stacked trainer: shared Poisson lots from the lead member's
stream, each member's own noise, initialization, learning rate and records (see the package docstring); the
joint ε of releasing the whole stack."""

import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from engine.privacy import PrivacyLedger, panel, rdp_curve
from engine.training.algorithms.dpsgd import average, noise_std, norm_quantiles_by_row
from engine.training.clipping import constant_tensor
from engine.training.config.keys import Algorithm
from engine.training.config.optimizer_keys import DEFAULT_MOMENTUM, OptimizerName
from engine.training.config.plan import TrainingPlan
from engine.training.config.spec import RunSpec
from engine.training.datasets import Dataset
from engine.training.inputs import features, input_arrays, load_spec_dataset
from engine.training.noise import (
    RELEASE,
    Stream,
    noise_mode,
    pca_release_identity,
    random_streams,
    sample_poisson_lot,
)
from engine.training.noise_ahead import NoiseAhead
from engine.training.run_results import EVALUATIONS_PER_RUN, StepRecord, TrainResult, result_of
from engine.training.run_setup import build_run_model, pick_device
from engine.training.trainers.stack.clipping import (
    StackedClippedSum,
    StackedClipper,
    StackError,
    clipped_sum_in_chunks,
)
from engine.training.trainers.stack.joint import StackMember, joint_epsilon
from engine.training.trainers.stack.optimizer import StackedOptimizer
from engine.training.trainers.stack.stack_graph import StackStepGraph, stack_graph_for

# What every member of a stack must share: the data, the model, and the lots (q and the number of steps).
STACK_KEYS = (
    "dataset",
    "schema",
    "data_sha256",
    "features",
    "pca_dims",
    "model",
    "hidden",
    "lot_size",
    "epochs",
    "optimizer",
    "noise",
)


# The models a stack holds: the stacked clipper has the rules of nn.Linear and nn.Conv2d only (not those of the
# wide ResNet's GroupNorm and weight-standardized convolutions).
STACKED_MODELS = ("logreg", "mlp", "cnn")


def stack_key(spec: RunSpec) -> str | None:
    """Specs with equal keys can train as one stack; None: this spec never stacks (not DP-SGD with flat
    clipping, audited, a model outside `STACKED_MODELS`, or using augmentation multiplicity, a moving average of
    the iterates or a filled budget, which the stacked trainer does not implement; a filled budget's steps also
    depend on its σ). DP-PCA runs stack too: members whose PCA releases differ (another seed or σ_p) each get their
    own. Only runs of one noise mode stack (a release-mode stack draws its lots from the OS too)."""
    if spec.algorithm != Algorithm.DPSGD or spec.clipping not in (None, "flat") or spec.audit is not None:
        return None  # an audited run trains alone: its canaries join its own lots only
    if spec.model not in STACKED_MODELS:
        return None
    if spec.augmentation_multiplicity > 1 or spec.ema_decay > 0 or spec.fill_budget:
        return None
    shared = {key: getattr(spec, key) for key in STACK_KEYS}
    return json.dumps(shared, sort_keys=True, default=list)


def stack_note(members: int, sampling_rate: float, noise: str) -> str:
    lots = "from OS randomness" if noise == RELEASE else "from the lead run's sampling stream"
    return (
        f"Trained in a vectorized stack of {members} runs that shared each step's Poisson lot (rate q = "
        f"{sampling_rate:.4g}, drawn {lots}); each run drew its own noise (a stream no other run shares), so "
        "this run on its own is an exact DP-SGD run and the ε above is its own. Releasing several runs of the "
        "stack together costs their joint ε (stored with the stack: every run's Gaussian noise on each shared "
        "lot, and every up-front release), not this one."
    )


def check_stackable(members: Sequence[StackMember]) -> None:
    keys = {stack_key(m.spec) for m in members}
    if None in keys or len(keys) != 1:
        raise StackError(
            "stacked runs must all be flat-clipped DP-SGD on the same data, model, lot size, epochs "
            f"and optimizer ({', '.join(STACK_KEYS)})"
        )
    if len({(m.plan.steps, m.plan.lot_size, m.plan.n_train) for m in members}) != 1:
        raise StackError("stacked runs must have the same plan of lots (N, L and steps)")


def train_stack(
    members: Sequence[StackMember],
    *,
    data_dirs: Sequence[Path] = (),
    on_step: Sequence[Callable[[StepRecord], None] | None] | None = None,
    should_stop: Sequence[Callable[[], bool] | None] | None = None,
    device: torch.device | None = None,
    dataset: Dataset | None = None,
) -> list[TrainResult]:
    """Train the members as one stack; one result per member, in order. A member whose `should_stop` says
    so ends there (its result `stopped_early`) and leaves the stack; an exception from one stops them all."""
    check_stackable(members)
    started = time.perf_counter()
    device = device or pick_device()
    k_all = len(members)
    emit = [(cb or (lambda record: None)) for cb in (on_step or [None] * k_all)]
    stops = list(should_stop or [None] * k_all)
    lead = members[0]
    data = dataset or load_spec_dataset(lead.spec, data_dirs)
    if lead.plan.n_train != len(data.x_train):
        raise ValueError(f"plan is for N={lead.plan.n_train} but {lead.spec.dataset} has N={len(data.x_train)}")
    note = stack_note(k_all, lead.plan.sampling_rate, noise_mode(lead.spec))
    plans = [replace(m.plan, notes=(*m.plan.notes, note)) for m in members]
    rdp_of = PerLedger(lambda ledger, delta: rdp_curve(ledger, delta=delta, steps=np.arange(ledger.steps + 1)))
    curves = [rdp_of(p.ledger(), p.delta).epsilons for p in plans]

    x_train, x_test = input_arrays(lead.spec, data, cache_dir=Path(data_dirs[-1]) if data_dirs else None, device=device)
    x_train, y_train = torch.as_tensor(x_train, device=device), torch.as_tensor(data.y_train, device=device)
    x_test, y_test = torch.as_tensor(x_test, device=device), torch.as_tensor(data.y_test, device=device)
    streams = [random_streams(m.spec, device) for m in members]
    inputs = StackInputs.of(members, plans, streams, x_train, x_test)
    models = []
    for m in members:
        torch.manual_seed(m.spec.seed)  # each member's own (public) initialization, as a separate run draws it
        models.append(
            build_run_model(
                m.spec, n_features=inputs.n_features, n_classes=data.n_classes, image_shape=data.image_shape
            ).to(device)
        )
    clipper = StackedClipper(models)
    momenta = [m.spec.momentum if m.spec.momentum is not None else DEFAULT_MOMENTUM for m in members]
    optimizer = StackedOptimizer(OptimizerName(lead.spec.optimizer), clipper.params, momenta)
    chunk = min((m.spec.physical_batch_size for m in members if m.spec.physical_batch_size), default=None)
    plan0 = plans[0]
    eval_every = max(1, plan0.steps // EVALUATIONS_PER_RUN)
    alive = list(range(k_all))  # indices into `members` of those still training, in stack order
    member_shapes = [clipper.params[n][0] for n in clipper.names]  # one member's rows of each parameter
    noise_ahead = [  # DP-SGD's noise stage of each member: its separate run's draws, drawn a step ahead
        NoiseAhead(member_shapes, functools.partial(noise_std, p), streams[k]["noise"], last_step=plan0.steps)
        for k, p in enumerate(plans)
    ]
    outcome: dict[int, tuple[float, float, int]] = {}

    def graph_for() -> StackStepGraph | None:  # over the inputs of the members training now (`inputs.keep`)
        common = dict(n_train=len(x_train), sampling_rate=plan0.sampling_rate, lot_size=plan0.lot_size)
        return stack_graph_for(
            clipper, inputs.train, y_train, per_member=inputs.per_member, physical_batch_size=chunk, **common
        )

    graph = graph_for()

    accuracies, losses = _evaluate(clipper, inputs, y_test)
    for k in alive:
        emit[k](
            StepRecord(step=0, epoch=0.0, epsilon=float(curves[k][0]), test_accuracy=accuracies[k], test_loss=losses[k])
        )
    loop_started = time.perf_counter()
    for step in range(1, plan0.steps + 1):
        epoch = plan0.epoch_of(step - 1)
        lot = sample_poisson_lot(len(x_train), plan0.sampling_rate, streams[0]["sampling"], device)
        clip_norms = [plans[k].clip_norm_at(step) for k in alive]
        if graph is not None and graph.fits(len(lot)):  # on a GPU: the stages below as one CUDA graph replay
            noise = [noise_ahead[k].take(step, noise_std(plans[k], step)) for k in alive]
            clipped = graph.run(inputs.train, y_train, lot, clip_norms, noise)
        else:
            clipped = clipped_sum_in_chunks(
                clipper, inputs.rows(inputs.train, lot), y_train[lot], clip_norms, chunk, per_member=inputs.per_member
            )
            for row, k in enumerate(alive):
                noise_ahead[k].add_to([clipped.grads[n][row] for n in clipper.names], step, noise_std(plans[k], step))
            average(list(clipped.grads.values()), plan0)  # and its 1/L, all members at once (one L for the stack)
        lrs = tuple(members[k].spec.lr * members[k].spec.lr_schedule.factor_at(epoch) for k in alive)
        optimizer.step(clipped.grads, constant_tensor(lrs, x_train.dtype, device))

        stopping = [bool(stops[k] and stops[k]()) for k in alive]
        evaluate_now = step % eval_every == 0 or step == plan0.steps or any(stopping)
        if evaluate_now:
            accuracies, losses = _evaluate(clipper, inputs, y_test)
        records = _step_records(
            step, plan0, clipped, [curves[k][step] for k in alive], time.perf_counter() - loop_started
        )
        for row, k in enumerate(alive):
            extra = dict(test_accuracy=accuracies[row], test_loss=losses[row]) if evaluate_now else {}
            emit[k](StepRecord(**records[row], **extra))
            if stopping[row] or step == plan0.steps:
                outcome[k] = (accuracies[row], losses[row], step)
        if any(stopping):
            rows = [row for row, stop in enumerate(stopping) if not stop]
            for row, stop in enumerate(stopping):
                if stop:
                    noise_ahead[alive[row]].cancel()
            alive = [alive[row] for row in rows]
            if not alive:
                break
            index = torch.tensor(rows, device=device)
            clipper.keep(index)
            optimizer.keep(index, clipper.params)
            inputs.keep(index)
            graph = graph_for()  # the parameters' shapes changed: a graph for the members left

    seconds = time.perf_counter() - started
    stack = {
        "members": k_all,
        "lead_seed": lead.spec.seed,
        "sampling_rate": plan0.sampling_rate,
        **joint_epsilon(members, plans),
    }
    results, panel_of = [], PerLedger(lambda ledger, delta: panel(ledger, delta=delta))
    for k, (m, plan) in enumerate(zip(members, plans, strict=True)):
        accuracy, loss, steps_done = outcome[k]
        result = result_of(
            plan,
            m.spec,
            accuracy=accuracy,
            loss=loss,
            steps_done=steps_done,
            seconds=seconds,
            device=device,
            panel_of=panel_of,
        )
        results.append(replace(result, stack={**stack, "position": k}))
    return results


@dataclass(kw_only=True)
class StackInputs:
    """What the models see: one (N, d) tensor every member shares, or (K, N, d) when members' inputs differ
    (DP-PCA releases of other seeds or σ_p: one release per distinct `pca_release_identity`, drawn from that
    release's stream, as a separate run of any of its members draws it)."""

    train: Tensor
    test: Tensor
    per_member: bool

    @classmethod
    def of(
        cls,
        members: Sequence[StackMember],
        plans: Sequence[TrainingPlan],
        streams: Sequence[dict[str, Stream]],
        x_train: Tensor,
        x_test: Tensor,
    ) -> "StackInputs":
        if members[0].spec.pca_dims is None:
            return cls(train=x_train, test=x_test, per_member=False)
        projected: dict[str, tuple[Tensor, Tensor]] = {}
        for m, plan, stream in zip(members, plans, streams, strict=True):
            key = pca_release_identity(m.spec)  # equal keys: one release (in release mode: one OS draw)
            if key not in projected:
                projected[key] = features(m.spec, plan, x_train, x_test, stream["pca"])
        if len(projected) == 1:
            train, test = next(iter(projected.values()))
            return cls(train=train, test=test, per_member=False)
        each = [projected[pca_release_identity(m.spec)] for m in members]
        return cls(train=torch.stack([t for t, _ in each]), test=torch.stack([t for _, t in each]), per_member=True)

    @property
    def n_features(self) -> int:
        return self.train.shape[-1]

    def rows(self, x: Tensor, index: Tensor | slice) -> Tensor:
        return x[:, index] if self.per_member else x[index]

    def keep(self, alive: Tensor) -> None:
        if self.per_member:
            self.train, self.test = self.train[alive], self.test[alive]


class PerLedger:
    """`compute(ledger, δ)` once per distinct (ledger, δ): members with equal ledgers (a learning-rate, C or
    seed grid) share the numbers. Ledgers are compared, not hashed (a composed DP event holds a list)."""

    def __init__(self, compute: Callable[[PrivacyLedger, float], Any]):
        self.compute = compute
        self.done: list[tuple[tuple[PrivacyLedger, float], Any]] = []

    def __call__(self, ledger: PrivacyLedger, delta: float) -> Any:
        key = (ledger, delta)
        for seen, value in self.done:
            if seen == key:
                return value
        value = self.compute(ledger, delta)
        self.done.append((key, value))
        return value


def _evaluate(
    clipper: StackedClipper, inputs: "StackInputs", y: Tensor, batch: int = 8192
) -> tuple[list[float], list[float]]:
    """Each member's (accuracy, mean cross-entropy) on the held-out set."""
    correct = torch.zeros(clipper.members, dtype=torch.float64, device=y.device)
    loss = torch.zeros_like(correct)
    for start in range(0, len(y), batch):
        part = inputs.rows(inputs.test, slice(start, start + batch))
        logits = clipper.logits(part, per_member=inputs.per_member)  # (K, b, classes)
        target = y[start : start + batch]
        correct += (logits.argmax(dim=2) == target).sum(dim=1)
        loss += F.cross_entropy(logits.transpose(1, 2), target.expand(len(logits), -1), reduction="none").sum(dim=1)
    return (correct / len(y)).tolist(), (loss / len(y)).tolist()


def _step_records(
    step: int, plan: TrainingPlan, clipped: StackedClippedSum, epsilons: list[float], elapsed: float
) -> list[dict]:
    """Each member's private diagnostics of the step, from what clipping computed anyway."""
    n = clipped.norms.shape[1]
    common = dict(step=step, epoch=plan.epoch_of(step), lot_size=n, elapsed_s=elapsed)
    if not n:
        return [dict(common, epsilon=float(e)) for e in epsilons]
    quantiles = norm_quantiles_by_row(clipped.norms)
    loss = (clipped.loss_sum / n).tolist()
    fraction = clipped.clipped.float().mean(dim=1).tolist()
    accuracy = (clipped.correct.double() / n).tolist()
    records = []
    for row, epsilon in enumerate(epsilons):
        p10, p50, p90 = quantiles[row]
        records.append(
            dict(
                common,
                epsilon=float(epsilon),
                train_loss=loss[row],
                clip_fraction=fraction[row],
                grad_norm_p10=p10,
                grad_norm_p50=p50,
                grad_norm_p90=p90,
                train_accuracy=accuracy[row],
            )
        )
    return records
