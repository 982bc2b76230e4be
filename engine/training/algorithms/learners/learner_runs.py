"""Training a textbook learner: the interface the trainer calls, dispatched to one module per learner."""

from collections.abc import Callable

from engine.training.algorithms.learners.expmech import train_expmech
from engine.training.algorithms.learners.linear import train_rwm_linear
from engine.training.algorithms.learners.outcome import LearnerOutcome, Report
from engine.training.algorithms.learners.rwm import train_rwm_online
from engine.training.algorithms.learners.sq import train_sq
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan
from engine.training.config.spec import RunSpec
from engine.training.datasets import Dataset

LEARNERS: dict[Algorithm, Callable[..., LearnerOutcome]] = {
    Algorithm.EXPMECH_STUMPS: train_expmech,
    Algorithm.SQ_LAPLACE: train_sq,
    Algorithm.RWM_ONLINE: train_rwm_online,
    Algorithm.RWM_LINEAR: train_rwm_linear,
}


def train_learner(
    spec: RunSpec, plan: TrainingPlan, data: Dataset, *, should_stop: Callable[[], bool] | None, report: Report
) -> LearnerOutcome:
    """Runs the spec's learner; `report(step, **metrics)` gets each record (step 0 first)."""
    if data.n_classes != 2:
        raise ValueError(f"{spec.algorithm} learns two classes; {data.name} has {data.n_classes}")
    return LEARNERS[Algorithm(spec.algorithm)](spec, plan, data, should_stop=should_stop, report=report)


__all__ = ["LEARNERS", "LearnerOutcome", "Report", "train_learner"]
