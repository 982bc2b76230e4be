"""What the engine can train, described for `python -m engine algorithms` and the dashboard: one
line and a source per algorithm, model, preprocessing step and update rule."""

from dataclasses import asdict, dataclass

from engine.training.algorithms.optimizers import DESCRIPTIONS as OPTIMIZER_DESCRIPTIONS
from engine.training.config.keys import CLIPPING_MODES, KEYS_BY_ALGORITHM, Algorithm
from engine.training.models.architectures import MODEL_DESCRIPTIONS


@dataclass(frozen=True, kw_only=True)
class AlgorithmInfo:
    name: str
    kind: str  # algorithm | preprocessing | technique | model | optimizer
    title: str
    description: str
    source: str
    private: bool = True
    keys: tuple[str, ...] = ()


ALGORITHM_INFO = (
    AlgorithmInfo(
        name=Algorithm.DPSGD.value,
        kind="algorithm",
        title="DP-SGD",
        description="Poisson lots (q = L/N), per-example clipping to C (flat or per layer), Gaussian noise σC, "
        "physical batches accumulated per lot; schedules for lr, σ, C; SGD, momentum or Adam.",
        source="Abadi et al. 2016, Deep Learning with Differential Privacy",
        keys=KEYS_BY_ALGORITHM[Algorithm.DPSGD],
    ),
    AlgorithmInfo(
        name=Algorithm.NOISY_GD.value,
        kind="algorithm",
        title="Noisy gradient descent",
        description="Full-batch logistic regression (labels ±1): clipped gradient sum (or clipped inputs) + "
        "Gaussian noise, divided by a Laplace-noised count.",
        source="Near & Abuah, Programming Differential Privacy, ch. Machine Learning",
        keys=KEYS_BY_ALGORITHM[Algorithm.NOISY_GD],
    ),
    AlgorithmInfo(
        name=Algorithm.NONPRIVATE.value,
        kind="algorithm",
        title="Non-private baseline",
        private=False,
        description="The same model, optimizer and schedule on shuffled batches, without clipping or noise (ε = ∞).",
        source="the reference every private run is compared with",
        keys=KEYS_BY_ALGORITHM[Algorithm.NONPRIVATE],
    ),
    AlgorithmInfo(
        name=Algorithm.ANISO_DPSGD.value,
        kind="algorithm",
        title="Anisotropic-noise DP-SGD",
        description="DP-SGD with per-layer (or per-coordinate) weights W: each gradient clipped to ‖W⁻¹g‖₂ ≤ C, "
        "noise N(0, σ²C²W²): the Gaussian mechanism at σ after the change of variables W⁻¹, so accounted as "
        "DP-SGD. W ∝ sensitivity^(-1/2) from earlier released noisy gradients only (post-processing).",
        source="Xiang et al., DP deep learning from an optimization perspective (2019), honestly accounted",
        keys=KEYS_BY_ALGORITHM[Algorithm.ANISO_DPSGD],
    ),
    AlgorithmInfo(
        name=Algorithm.EXPMECH_STUMPS.value,
        kind="algorithm",
        title="Exponential mechanism over decision stumps",
        description="Private PAC learning: one stump (feature, threshold on a public grid, sign) drawn with "
        "probability ∝ exp(ε·(−training errors)/2); ε-DP.",
        source="Dwork & Roth ch. 11; Kasiviswanathan et al. 2008; the exponential mechanism, Thm 3.10",
        keys=KEYS_BY_ALGORITHM[Algorithm.EXPMECH_STUMPS],
    ),
    AlgorithmInfo(
        name=Algorithm.SQ_LAPLACE.value,
        kind="algorithm",
        title="SQ logistic regression through Laplace noise",
        description="Gradient descent that sees the data only through statistical queries Σφ, φ ∈ [0, 1], each "
        "answered with Laplace noise; T·d queries share ε by pure composition.",
        source="Dwork & Roth §11.1; Blum, Dwork, McSherry, Nissim 2005",
        keys=KEYS_BY_ALGORITHM[Algorithm.SQ_LAPLACE],
    ),
    AlgorithmInfo(
        name=Algorithm.RWM_ONLINE.value,
        kind="algorithm",
        title="Private online learning (randomized weighted majority)",
        description="Stump experts on a stream of training examples; RWM at η = ε/√(32 T ln(1/δ)), each round "
        "2η-DP; regret against rounds with its bound and non-private RWM.",
        source="Dwork & Roth §11.2, Thm 11.2 (privacy), Thms 11.1, 11.3–11.4 (regret)",
        keys=KEYS_BY_ALGORITHM[Algorithm.RWM_ONLINE],
    ),
    AlgorithmInfo(
        name=Algorithm.RWM_LINEAR.value,
        kind="algorithm",
        title="Private linear learner (RWM over the simplex)",
        description="RWM over the vertices of the simplex (stump experts) on linear losses; the output is the "
        "average action, a mixture of stumps.",
        source="Dwork & Roth §11.2, Algorithm 17 and Thm 11.6",
        keys=KEYS_BY_ALGORITHM[Algorithm.RWM_LINEAR],
    ),
    AlgorithmInfo(
        name="dp_pca",
        kind="preprocessing",
        title="DP-PCA input projection",
        description="Unit-normalize inputs, Gaussian noise σ_p on their covariance, project on the top pca_dims "
        "eigenvectors; charged up front to the run's ledger.",
        source="Abadi et al. 2016, §4",
        keys=("pca_dims", "pca_noise"),
    ),
    AlgorithmInfo(
        name="augmentation_multiplicity",
        kind="technique",
        title="Augmentation multiplicity",
        description="DP-SGD on images: K random crops (and flips where the data allow) of each example, its gradient "
        "the mean over the copies, clipped once; the same ledger and ε as K = 1, about K times the step's cost.",
        source="De et al. 2022, §3.1",
        keys=("augmentation_multiplicity",),
    ),
    AlgorithmInfo(
        name="ema_decay",
        kind="technique",
        title="Parameter averaging",
        description="The evaluated and released model is the exponential moving average of the iterates (warm-up "
        "min(β, (1+t)/(10+t))); post-processing, free in ε.",
        source="De et al. 2022; TensorFlow's ExponentialMovingAverage",
        keys=("ema_decay",),
    ),
    AlgorithmInfo(
        name="fill_budget",
        kind="technique",
        title="Budget-filling run",
        description="σ fixed; the run trains the most steps whose ε stays within target_epsilon by RDP or PLD, "
        "whichever allows more, epochs being the most it may train.",
        source="Abadi et al. 2016 train until the accountant reaches the budget",
        keys=("fill_budget", "target_epsilon", "noise_multiplier"),
    ),
)


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
