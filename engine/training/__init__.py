"""DP training, in rooms that import only downwards (`tests/test_architecture.py`, `TRAINING_LAYERS`):

1. the data and the networks: `datasets`, `features` (ScatterNet), `models`, `clipping` (per-example clipping);
2. `config`: the spec, its keys and checks, the catalogue, the plan and its ledger;
3. a run's randomness and public transforms: `noise`, `noise_ahead`, `features.pca`, `augmentation`,
   `averaging`, `canary_placement`;
4. what a run reports: `run_results` (`StepRecord`, `TrainResult`, `result_of`, `evaluate`), and `canaries`
   (an audit, added to a result);
5. `algorithms`: each algorithm's step chain, registered in `algorithms.registry` (the learners route apart);
6. the run setup: `inputs` and `run_setup` (`build_training`: inputs, model, optimizer, canaries, step);
7. `trainers`: `single_run` (one spec) and `stack` (K DP-SGD specs as one vmapped model);
8. `pace` (a run's duration, measured), and this façade, which no module inside imports.

A run's life: spec (`parse_spec`) → plan (`plan_run`) → setup (`run_setup.build_training`) → its step from the
registry (`algorithms.registry.make_step`) → a record per step → the result (`run_results.result_of`)."""

from engine.privacy.planning import steps_for
from engine.training.config.catalogue import describe_algorithms
from engine.training.config.keys import Algorithm
from engine.training.config.plan import TrainingPlan, plan_run, plan_spec
from engine.training.config.spec import RunSpec, SpecError, parse_spec, spec_dataset_info
from engine.training.datasets import DATASETS, Dataset, DatasetError, dataset_info, load_dataset
from engine.training.run_results import StepRecord, TrainResult
from engine.training.run_setup import pick_device
from engine.training.trainers.single_run import train
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
