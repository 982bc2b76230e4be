"""DP training: datasets, models, per-example clipping, the algorithms' step chains and the trainer."""

from engine.privacy.planning import steps_for
from engine.training.config.catalogue import describe_algorithms
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan, plan_run, plan_spec
from engine.training.config.spec import RunSpec, SpecError, parse_spec, spec_dataset_info
from engine.training.datasets import DATASETS, Dataset, DatasetError, dataset_info, load_dataset
from engine.training.trainers.single_run import StepRecord, TrainResult, pick_device, train
from engine.training.trainers.stack import StackError, StackMember, stack_key, train_stack

__all__ = [
    "DATASETS",
    "Algorithm",
    "Dataset",
    "DatasetError",
    "RunSpec",
    "SpecError",
    "StackError",
    "StackMember",
    "StepRecord",
    "TrainResult",
    "TrainingPlan",
    "dataset_info",
    "describe_algorithms",
    "load_dataset",
    "parse_spec",
    "pick_device",
    "plan_run",
    "plan_spec",
    "spec_dataset_info",
    "stack_key",
    "steps_for",
    "train",
    "train_stack",
]
