"""Train one run spec: load its data, plan it, set it up (`run_setup.build_training`: its inputs, model,
optimizer, canaries and the algorithm's registered step), take the plan's steps, emit a record per step and
return the result (`run_results`). The textbook learners train through their own route (`learner_runs`).

The ε of every record comes from the RDP accountant applied to the ledger of the steps actually
taken so far (the plan's ledger, truncated), so a stopped run reports the ε it really spent. The
final result reports the tightest valid ε of every accountant that applies.

With `ema_decay` the model evaluated (every test accuracy and loss) and released is the moving average of the
iterates (`averaging`: post-processing, no ε); with `augmentation_multiplicity` DP-SGD's lots are augmented
(`augmentation`: public transforms, the same ledger).
"""

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from engine.privacy import rdp_curve
from engine.training.algorithms.learners.learner_runs import train_learner
from engine.training.algorithms.optimizers import set_learning_rate
from engine.training.canaries import audited
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan, plan_run
from engine.training.config.spec import RunSpec
from engine.training.datasets import Dataset
from engine.training.inputs import load_spec_dataset
from engine.training.run_results import EVALUATIONS_PER_RUN, StepRecord, TrainResult, evaluate, result_of
from engine.training.run_setup import build_training, pick_device


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

    run = build_training(spec, plan, data, device, cache_dir=Path(data_dirs[-1]) if data_dirs else None)
    eval_every = max(1, plan.steps // EVALUATIONS_PER_RUN)
    emit = on_step or (lambda record: None)

    accuracy, loss = evaluate(run.released, run.x_test, run.y_test)
    emit(StepRecord(step=0, epoch=0.0, epsilon=epsilon_after(0), test_accuracy=accuracy, test_loss=loss))
    steps_done = 0
    loop_started = time.perf_counter()
    for step in range(1, plan.steps + 1):
        set_learning_rate(run.optimizer, spec.lr * spec.lr_schedule.factor_at(plan.epoch_of(step - 1)))
        stats = run.step(step)
        if run.average is not None:
            run.average.update()
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
            accuracy, loss = evaluate(run.released, run.x_test, run.y_test)
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
    return result if run.canaries is None else audited(result, run.canaries, run.model, delta=plan.delta)


__all__ = ["train"]
