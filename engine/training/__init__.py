"""DP training: datasets, models, per-example clipping, the DP-SGD step chain and the trainer."""

from engine.training.datasets import DATASETS, Dataset, DatasetError, dataset_info, load_dataset
from engine.training.dpsgd import DpSgdPlan, plan_dpsgd, steps_for
from engine.training.spec import RunSpec, SpecError, parse_spec
from engine.training.trainer import StepRecord, TrainResult, pick_device, train

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetError",
    "DpSgdPlan",
    "RunSpec",
    "SpecError",
    "StepRecord",
    "TrainResult",
    "dataset_info",
    "load_dataset",
    "parse_spec",
    "pick_device",
    "plan_dpsgd",
    "steps_for",
    "train",
]
