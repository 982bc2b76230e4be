"""Training a textbook learner: the interface the trainer calls, dispatched to one module per learner."""

from collections.abc import Callable

from engine.training.datasets import Dataset
from engine.training.learners.expmech import train_expmech
from engine.training.learners.linear import train_rwm_linear
from engine.training.learners.outcome import LearnerOutcome, Report
from engine.training.learners.rwm import train_rwm_online
from engine.training.learners.sq import train_sq
from engine.training.plan import TrainingPlan
from engine.training.spec import Algorithm, RunSpec

LEARNERS: dict[Algorithm, Callable[..., LearnerOutcome]] = {
    Algorithm.EXPMECH_STUMPS: train_expmech,
    Algorithm.SQ_LAPLACE: train_sq,
    Algorithm.RWM_ONLINE: train_rwm_online,
    Algorithm.RWM_LINEAR: train_rwm_linear,
}


def train_learner(spec: RunSpec, plan: TrainingPlan, data: Dataset, *, should_stop: Callable[[], bool] | None,
                  report: Report) -> LearnerOutcome:  # fmt: skip
    """Runs the spec's learner; `report(step, **metrics)` gets each record (step 0 first)."""
    if data.n_classes != 2:
        raise ValueError(f"{spec.algorithm} learns two classes; {data.name} has {data.n_classes}")
    return LEARNERS[Algorithm(spec.algorithm)](spec, plan, data, should_stop=should_stop, report=report)


__all__ = ["LEARNERS", "LearnerOutcome", "Report", "train_learner"]
