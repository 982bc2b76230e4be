"""The plain-language privacy statement of a run: what was protected, how, and what it cost."""

from dataclasses import dataclass

from dp_accounting import NeighboringRelation, dp_event

from engine.privacy.accountants import ACCOUNTANTS, Panel
from engine.privacy.accountants.curve import epsilon_text
from engine.privacy.events import Sampling
from engine.privacy.ledger import PrivacyLedger
from engine.privacy.tradeoff import AttackBound, attack_sentence

ADJACENCY = {
    NeighboringRelation.ADD_OR_REMOVE_ONE: "adding or removing one training example",
    NeighboringRelation.REPLACE_ONE: "replacing one training example by another",
}
NOISE = {  # how the run drew its private randomness (`engine.training.noise`), by the spec's noise mode
    "reproducible": "Noise: reproducible lab mode. Every lot and noise draw came from streams derived from the "
    "whole run spec, so anyone holding the run record can regenerate this run's noise and tell neighbouring "
    "datasets apart: do not publish this model as differentially private (DP-SGD, noisy GD and anisotropic "
    "DP-SGD have a release mode for that).",
    "release": "Noise: release mode. Every lot and noise draw came from generators seeded by the operating "
    "system's cryptographic randomness, fresh for each draw, each Gaussian coordinate from a sampler hardened "
    "against floating-point attacks (the sum of four draws, halved); nothing stored or exported regenerates it.",
}
SAMPLING = {
    Sampling.POISSON: "Poisson sampling: at every step each example joined the lot independently with probability "
    "q = {q:.4g} (expected lot size {lot:,} of N = {n:,})",
    Sampling.WITHOUT_REPLACEMENT: "fixed-size lots of {lot:,} examples drawn without replacement from N = {n:,}",
    Sampling.SHUFFLE: "shuffle-and-iterate lots of {lot:,}; the ε below is the Poisson-sampling APPROXIMATION "
    "(q = {q:.4g}), not a proven bound",
}


@dataclass(frozen=True, kw_only=True)
class PrivacyStatement:
    epsilon: float
    delta: float
    accountant: str
    lines: tuple[str, ...]

    def text(self) -> str:
        return "\n".join(self.lines)


def privacy_statement(
    *,
    ledger: PrivacyLedger,
    panel: Panel,
    dataset_size: int,
    lot_size: int | None = None,
    sampling: Sampling = Sampling.POISSON,
    noise: str | None = None,
    attack: AttackBound | None = None,
) -> PrivacyStatement:
    """`noise`: the run's noise mode (a key of `NOISE`); None (a plan, no run) says nothing of it. `attack`: the
    run's attack curve (`engine.privacy.tradeoff`), read at 1% false positives after the first line."""
    name, epsilon = panel.tightest()
    delta = panel.delta
    others = ", ".join(
        f"{ACCOUNTANTS[n].title} {epsilon_text(e)}"
        for n, e in sorted(panel.final().items(), key=lambda i: i[1])
        if n != name
    )
    lines = [
        f"Trained with ({epsilon:.3g}, {delta:.3g})-differential privacy, by the {ACCOUNTANTS[name].title} accountant "
        f"(the tightest of those that apply{': ' + others if others else ''}).",
        *([] if attack is None else [attack_sentence(attack)]),
        f"Protected unit: one training example (example-level). Neighbouring datasets differ by "
        f"{ADJACENCY[ledger.neighboring]}; a person with several examples is protected as a group, more weakly.",
    ]
    if lot_size is not None:
        lines.append(
            "Lots: " + SAMPLING[sampling].format(q=lot_size / dataset_size, lot=lot_size, n=dataset_size) + "."
        )
    ratio = delta * dataset_size
    lines.append(
        f"δ = {delta:.3g} is {ratio:.3g} × 1/N (N = {dataset_size:,})"
        + ("." if ratio < 1 else ": WARNING, δ ≥ 1/N permits releasing a whole record.")
    )
    charged = "; ".join(f"{r.count:,} × {r.label}" for r in ledger.releases if r.count)
    lines.append(f"Charged to the budget: {charged or 'nothing'}.")
    rdp = panel.curves.get("rdp")
    if rdp is not None and rdp.order_at_edge:
        lines.append(
            f"WARNING: the best RDP order ({rdp.final_order:g}) is at the edge of the orders searched; the RDP "
            "value may be loose (the reported ε stays a valid bound)."
        )
    for reason_name, reason in panel.not_applicable.items():
        lines.append(f"{ACCOUNTANTS[reason_name].title}: not applicable ({reason}).")
    if noise is not None:
        lines.append(NOISE[noise])
    if noise == "release" and any(isinstance(r.event, dp_event.LaplaceDpEvent) for r in ledger.releases):
        lines.append(
            "Caveat: the Laplace release (the noisy count) is drawn from OS randomness but not by a sampler "
            "hardened against floating-point attacks (Mironov 2012's snapping mechanism is not implemented)."
        )
    lines.append(
        "Not covered: choosing among several runs on the same data. Every run draws its own noise, so "
        "releasing several runs costs their composition (their ledgers composed), more than any one run's ε."
    )
    lines.extend(ledger.notes)
    return PrivacyStatement(epsilon=epsilon, delta=delta, accountant=name, lines=tuple(lines))
