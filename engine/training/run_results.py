"""What a run reports, shared by every trainer: a record per step (`StepRecord`), the result at its end
(`TrainResult`, from the plan's ledger truncated to the steps taken: `result_of`), and the held-out evaluation
(`evaluate`) both carry. Below the trainers and the canaries (an audit adds its counts to a result here)."""

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.privacy import Panel, PrivacyLedger, panel, privacy_statement
from engine.privacy.tradeoff import attack_bound
from engine.training.config.plan import TrainingPlan
from engine.training.config.spec import RunSpec
from engine.training.noise import noise_mode

EVALUATIONS_PER_RUN = 100  # a run evaluates its released model on the test set about this often, and at its end


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """Metrics after `step` steps. Fields marked private are computed on private training data."""

    step: int
    epoch: float
    epsilon: float | None  # None: not private
    train_loss: float | None = None  # private: mean loss on the lot
    lot_size: int | None = None  # private: the realized Poisson lot size
    clip_fraction: float | None = None  # private: share of the lot whose gradient was clipped
    grad_norm_p10: float | None = None  # private: quantiles of the lot's per-example gradient norms before clipping
    grad_norm_p50: float | None = None
    grad_norm_p90: float | None = None
    train_accuracy: float | None = None  # private: accuracy on the lot, from the logits the step computed (the iterate)
    test_accuracy: float | None = None  # of the released model: the iterates' moving average with ema_decay
    test_loss: float | None = None
    elapsed_s: float | None = None  # wall time since the first step began
    regret: float | None = None  # private: online learners' loss minus the best expert's, after `step` rounds
    regret_bound: float | None = None  # public: the theorem's bound on the expected regret after `step` rounds
    regret_nonprivate: float | None = None  # private: non-private RWM (η = √(8 ln k / T)) on the same stream

    def metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items() if k != "step" and v is not None}


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    algorithm: str
    private: bool
    test_accuracy: float
    test_loss: float
    epsilon: float | None  # the tightest valid ε(δ) of the steps taken, by `accountant`; None: not private
    delta: float | None
    noise_multiplier: float | None
    sampling_rate: float
    steps: int
    planned_steps: int
    accountant: str | None
    epsilons: dict[str, float]  # every applicable accountant's ε for the same steps
    best_order: float | None  # of the RDP accountant
    order_at_edge: bool
    privacy_statement: str
    stopped_early: bool
    seconds: float
    device: str
    stack: dict | None = None  # trained in a vectorized stack (`trainers.stack`): size, lead seed, joint ε
    audit: dict | None = None  # an audited run's canaries (`canaries.audited`): ε̂, its ceiling, the counts
    restart: dict | None = None  # a restarted run's earlier attempts and own ε (`TrainingPlan.restart`)
    attack_bound: dict | None = None  # the highest TPR of any membership-inference attack at each FPR (`tradeoff`)

    def to_dict(self) -> dict:
        return asdict(self)


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 8192) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) on a held-out set."""
    correct, loss = 0.0, 0.0
    with torch.no_grad():
        for start in range(0, len(x), batch):
            logits = model(x[start : start + batch])
            loss += float(F.cross_entropy(logits, y[start : start + batch], reduction="sum"))
            correct += float((logits.argmax(dim=1) == y[start : start + batch]).sum())
    return correct / len(x), loss / len(x)


def result_of(
    plan: TrainingPlan,
    spec: RunSpec,
    *,
    accuracy,
    loss,
    steps_done,
    seconds,
    device,
    panel_of: Callable[[PrivacyLedger, float], Panel] | None = None,
) -> TrainResult:
    """The run's result; `panel_of(ledger, δ)` (default `panel`) gives every accountant's ε of the steps taken."""
    common = dict(
        algorithm=spec.algorithm,
        private=plan.private,
        test_accuracy=accuracy,
        test_loss=loss,
        sampling_rate=plan.sampling_rate,
        steps=steps_done,
        planned_steps=plan.steps,
        stopped_early=steps_done < plan.steps,
        seconds=seconds,
        device=str(device),
    )
    if not plan.private:
        statement = (
            "Not differentially private: a baseline trained without clipping or noise (ε = ∞). "
            "Its accuracy is the reference the private runs pay for."
        )
        return TrainResult(
            **common,
            epsilon=None,
            delta=None,
            noise_multiplier=None,
            accountant=None,
            epsilons={},
            best_order=None,
            order_at_edge=False,
            privacy_statement=statement,
        )
    panel_of = panel_of or (lambda ledger, delta: panel(ledger, delta=delta))
    ledger = plan.ledger(steps_done)
    accounts = panel_of(ledger, plan.delta)
    lots = not plan.full_batch and plan.learner_step is None  # the learners draw no lots
    tightest, epsilon = accounts.tightest()
    attack = attack_bound(ledger, accountant=tightest, epsilon=epsilon, delta=plan.delta)
    statement = privacy_statement(
        ledger=ledger,
        panel=accounts,
        dataset_size=plan.n_train,
        lot_size=plan.lot_size if lots else None,
        noise=noise_mode(spec),
        attack=attack,
    )
    restart = plan.restart(steps_done, epsilon=statement.epsilon, panel_of=panel_of)
    return TrainResult(
        **common,
        epsilon=statement.epsilon,
        delta=plan.delta,
        noise_multiplier=plan.noise_multiplier,
        accountant=statement.accountant,
        epsilons=accounts.final(),
        best_order=accounts.curves["rdp"].final_order,
        order_at_edge=accounts.curves["rdp"].order_at_edge,
        privacy_statement=statement.text() + (f"\n{restart['sentence']}" if restart else ""),
        restart=restart,
        attack_bound=attack.to_dict(),
    )


__all__ = ["EVALUATIONS_PER_RUN", "StepRecord", "TrainResult", "evaluate", "result_of"]
