"""The update rules a spec may name (key `optimizer`), their descriptions and momentum's default: the names the
spec and the catalogue read, below the rules themselves (`engine.training.algorithms.optimizers`)."""

from enum import StrEnum

DEFAULT_MOMENTUM = 0.9


class OptimizerName(StrEnum):
    SGD = "sgd"
    MOMENTUM = "momentum"
    ADAM = "adam"


OPTIMIZER_DESCRIPTIONS = {
    OptimizerName.SGD: "plain SGD: θ ← θ − η·g",
    OptimizerName.MOMENTUM: "SGD with heavy-ball momentum (key `momentum`, default 0.9)",
    OptimizerName.ADAM: "Adam (β = 0.9, 0.999) on the noisy gradient",
}
