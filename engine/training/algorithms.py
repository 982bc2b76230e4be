"""What the engine can train, described for `python -m engine algorithms` and the dashboard: one
line and a source per algorithm, model, preprocessing step and update rule."""

from dataclasses import asdict, dataclass

from engine.training.models import MODEL_DESCRIPTIONS
from engine.training.optimizers import DESCRIPTIONS as OPTIMIZER_DESCRIPTIONS
from engine.training.spec import CLIPPING_MODES, KEYS_BY_ALGORITHM, Algorithm


@dataclass(frozen=True, kw_only=True)
class AlgorithmInfo:
    name: str
    kind: str  # algorithm | preprocessing | model | optimizer
    title: str
    description: str
    source: str
    private: bool = True
    keys: tuple[str, ...] = ()


ALGORITHM_INFO = (
    AlgorithmInfo(
        name=Algorithm.DPSGD.value, kind="algorithm", title="DP-SGD",
        description="Poisson lots (q = L/N), per-example clipping to C (flat or per layer), Gaussian noise σC, "
        "physical batches accumulated per lot; schedules for lr, σ, C; SGD, momentum or Adam.",
        source="Abadi et al. 2016, Deep Learning with Differential Privacy (seeds 001, 003)",
        keys=KEYS_BY_ALGORITHM[Algorithm.DPSGD],
    ),
    AlgorithmInfo(
        name=Algorithm.NOISY_GD.value, kind="algorithm", title="Noisy gradient descent",
        description="Full-batch logistic regression (labels ±1): clipped gradient sum (or clipped inputs) + "
        "Gaussian noise, divided by a Laplace-noised count.",
        source="Near & Abuah, Programming Differential Privacy, ch. Machine Learning (seed 000)",
        keys=KEYS_BY_ALGORITHM[Algorithm.NOISY_GD],
    ),
    AlgorithmInfo(
        name=Algorithm.NONPRIVATE.value, kind="algorithm", title="Non-private baseline", private=False,
        description="The same model, optimizer and schedule on shuffled batches, without clipping or noise (ε = ∞).",
        source="the reference every private run is compared with", keys=KEYS_BY_ALGORITHM[Algorithm.NONPRIVATE],
    ),
    AlgorithmInfo(
        name="dp_pca", kind="preprocessing", title="DP-PCA input projection",
        description="Unit-normalize inputs, Gaussian noise σ_p on their covariance, project on the top pca_dims "
        "eigenvectors; charged up front to the run's ledger.",
        source="Abadi et al. 2016, §4 (seed 003)", keys=("pca_dims", "pca_noise"),
    ),
)  # fmt: skip


def describe_algorithms() -> list[dict]:
    """Algorithms, preprocessing, models and update rules, as JSON-able dicts."""
    out = [asdict(info) | {"keys": list(info.keys)} for info in ALGORITHM_INFO]
    for algorithm, modes in CLIPPING_MODES.items():
        out[[i.name for i in ALGORITHM_INFO].index(algorithm.value)]["clipping"] = list(modes)
    out += [{"name": name, "kind": "model", "description": text} for name, text in MODEL_DESCRIPTIONS.items()]
    out += [
        {"name": name.value, "kind": "optimizer", "description": text} for name, text in OPTIMIZER_DESCRIPTIONS.items()
    ]
    return out
