"""The models a run can train: the architectures (`architectures`), the wide ResNets (`wide_resnet`) and the
layers of the lab's own they use (`layers`).

Submodules are imported directly (`from engine.training.models.architectures import build_model`)."""
