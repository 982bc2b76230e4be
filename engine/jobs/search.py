"""Private hyperparameter search, and what releasing the best run of a sweep costs.

A grid spec with `"search": {"distribution": ..., "mean": μ, "shape": η}` is a **private search** (Papernot &
Steinke 2022; `engine.privacy.selection`): instead of every grid point, it trains K trials, K drawn from the
distribution with mean μ, each a configuration drawn uniformly from the grid with a random seed, and the best
by final test accuracy is the one to release. Its ε covers that release alone (model and score), however many
trials ran. The draws come from OS randomness and are not reproducible on purpose.

For any sweep, `sweep_privacy` states the costs side by side: releasing the best of every run a fixed grid
trains (the composition of all of them, whoever picked the best looked at every one; a vectorized stack's members
by their joint ledger, `engine.jobs.release`), the same grid trained every point separately, and releasing the best
of a private search over the same configurations (for a search whose trials were drawn, the smaller of its bound
and the composition of the trials drawn).
"""

import dataclasses
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from engine.jobs.release import RunToRelease, planned, release_delta, release_epsilon
from engine.privacy import ACCOUNTANTS, PrivacyError, epsilon_text
from engine.privacy.selection import MAX_MEAN, SearchEpsilon, TrialCount, TrialDistribution, search_epsilon
from engine.training import SpecError

SEARCH_KEYS = ("distribution", "mean", "shape")
SEED_RANGE = 2**31  # a trial's seed: uniform on [0, SEED_RANGE)
DEFAULT_SHAPE = 0.5  # the truncated negative binomial's η when none is given


def parse_search(raw: Any) -> TrialCount:
    """The trial count a grid spec's `search` asks for (`SpecError` naming the field)."""
    if not isinstance(raw, Mapping):
        raise SpecError("search", "must be a JSON object: {distribution, mean[, shape]}")
    unknown = sorted(set(raw) - set(SEARCH_KEYS))
    if unknown:
        raise SpecError(f"search.{unknown[0]}", f"unknown key; allowed keys: {', '.join(SEARCH_KEYS)}")
    names = [d.value for d in TrialDistribution]
    if raw.get("distribution") not in names:
        raise SpecError(
            "search.distribution", f"must be one of {', '.join(names)}; got {raw.get('distribution')!r:.80}"
        )
    distribution = TrialDistribution(raw["distribution"])
    shape = raw.get("shape")
    if distribution is TrialDistribution.NEGATIVE_BINOMIAL and shape is None:
        shape = DEFAULT_SHAPE
    try:  # the ranges live with the trial count
        return TrialCount(distribution=distribution, mean=raw.get("mean"), shape=shape)
    except PrivacyError as exc:
        field = "search.shape" if str(exc).startswith("shape") else "search.mean"
        raise SpecError(field, str(exc)) from None


def draw_trials(configurations: Sequence[dict[str, Any]], trials: TrialCount) -> list[dict[str, Any]]:
    """K trials (K from `trials`), each one of `configurations` drawn uniformly with a fresh seed; OS randomness.
    Two trials never share a seed, so none trains the same run as another."""
    count = trials.sample()
    seeds: set[int] = set()
    while len(seeds) < count:
        seeds.add(secrets.randbelow(SEED_RANGE))
    order = sorted(seeds, key=lambda _: secrets.randbits(64))
    return [dict(configurations[secrets.randbelow(len(configurations))]) | {"seed": seed} for seed in order]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepPrivacy:
    """What releasing the best run of a sweep costs: by composition of every run of the fixed grid (`runs` of
    them, a stack's members by their joint ledger: they shared every lot), the same grid trained every point
    separately, and as a private search over the same configurations; for a search whose trials were drawn, also
    the composition of the drawn trials (K is drawn independently of the data, so the smaller bound holds)."""

    delta: float
    runs: int  # runs a fixed grid trains: configurations × seeds
    composition_epsilon: float  # the fixed grid as it trains (stacks included)
    composition_accountant: str
    separate_epsilon: float  # the fixed grid with every point trained alone
    separate_accountant: str
    stacks: int  # stacks of two runs or more in the fixed grid
    search: SearchEpsilon
    searching: bool  # the sweep is a private search (else `search` is what one would cost)
    drawn_epsilon: float | None = None  # a search after its draw: the composition of the trials drawn
    drawn_trials: int | None = None

    @property
    def drawn_is_tighter(self) -> bool:
        return self.searching and self.drawn_epsilon is not None and self.drawn_epsilon < self.search.epsilon

    @property
    def headline_epsilon(self) -> float:
        if self.searching:
            return self.drawn_epsilon if self.drawn_is_tighter else self.search.epsilon
        return self.composition_epsilon

    @property
    def headline_delta(self) -> float:
        return self.search.delta if self.searching and not self.drawn_is_tighter else self.delta

    def to_dict(self) -> dict[str, Any]:
        """The numbers, ∞ as JSON's Infinity (no bound)."""
        trials = self.search.trials
        return {
            "searching": self.searching,
            "epsilon": self.headline_epsilon,
            "delta": self.headline_delta,
            "fixed_grid": {
                "runs": self.runs,
                "stacks": self.stacks,
                "epsilon": self.composition_epsilon,
                "delta": self.delta,
                "accountant": self.composition_accountant,
                "separately": {"epsilon": self.separate_epsilon, "accountant": self.separate_accountant},
            },
            "private_search": {
                "distribution": trials.distribution.value,
                "mean": trials.mean,
                "shape": trials.shape,
                "configurations": self.search.configurations,
                "epsilon": self.search.epsilon,
                "delta": self.search.delta,
                **(
                    {"drawn_trials": self.drawn_trials, "drawn_epsilon": self.drawn_epsilon}
                    if self.drawn_epsilon is not None
                    else {}
                ),
            },
        }

    def fixed_text(self) -> str:
        """The fixed grid's cost (composition of every run, a stack by its members' joint ledger)."""
        accountant = self.accountant_title(self.composition_accountant)
        cost = f"ε = {epsilon_text(self.composition_epsilon)} at δ = {self.delta:.3g}"
        return f"{cost} (composition of every run, {accountant})"

    def stacks_text(self) -> str:
        """What the grid's stacks add over training every point separately ("" without stacks)."""
        if not self.stacks:
            return ""
        which = "Its vectorized stack" if self.stacks == 1 else f"Each of its {self.stacks} vectorized stacks"
        return (
            f" {which} shared every Poisson lot among its members, so it is charged its members' joint ledger; "
            f"trained every point separately, the same grid would cost ε = {epsilon_text(self.separate_epsilon)}."
        )

    @staticmethod
    def accountant_title(name: str) -> str:
        return ACCOUNTANTS[name].label if name in ACCOUNTANTS else name

    def sentence(self) -> str:
        search = self.search
        searched = (
            f"the best of a private search ({search.trials.describe()} over {search.configurations} "
            f"configuration{'s' * (search.configurations != 1)})"
        )
        fixed = f"the best of a fixed grid of {self.runs} run{'s' * (self.runs != 1)}"
        search_text = f"ε = {epsilon_text(search.epsilon)} at δ = {search.delta:.3g}"
        if self.searching:
            drawn = ""
            if self.drawn_epsilon is not None:
                drawn = (
                    f" The {self.drawn_trials} trial{'s' * (self.drawn_trials != 1)} drawn compose to "
                    f"ε = {epsilon_text(self.drawn_epsilon)} at δ = {self.delta:.3g}"
                    + (
                        " (K was drawn independently of the data, so this smaller bound holds too)."
                        if self.drawn_is_tighter
                        else "."
                    )
                )
            return (
                f"Releasing {searched} costs {search_text} (Papernot & Steinke 2022), however many trials run; "
                f"releasing {fixed} would cost {self.fixed_text()}.{drawn}"
            )
        return (
            f"Releasing {fixed} costs {self.fixed_text()}: choosing the best looks at all of them.{self.stacks_text()} "
            f"A private search ({search.trials.describe()}) would cost {search_text}."
        )


def suggested_search(runs: int, ledgers: Sequence, *, delta: float) -> SearchEpsilon:
    """The private search offered instead of a fixed grid of `runs`: as many trials on average (at most
    `MAX_MEAN`), with the cheapest of the distributions that allow that mean (the negative binomial at
    η = `DEFAULT_SHAPE`)."""
    mean = float(min(max(runs, 1), MAX_MEAN))
    options = []
    for distribution in TrialDistribution:
        shape = DEFAULT_SHAPE if distribution is TrialDistribution.NEGATIVE_BINOMIAL else None
        try:
            options.append(TrialCount(distribution=distribution, mean=mean, shape=shape))
        except PrivacyError:  # its tail passes the trial cap too often at this mean
            continue
    return min((search_epsilon(ledgers, option, delta=delta) for option in options), key=lambda found: found.epsilon)


def trials_composition(runs: Sequence[RunToRelease]) -> tuple[str, float, float]:
    """(accountant, ε, δ) of releasing every one of these runs: what a search whose trials did not all run costs."""
    found = release_epsilon(runs)
    return found.accountant, found.epsilon, found.delta


def sweep_privacy(
    configurations: Sequence[dict[str, Any]],
    grid: Sequence[RunToRelease],
    *,
    trials: TrialCount | None = None,
    drawn: Sequence[RunToRelease] | None = None,
) -> SweepPrivacy:
    """The costs for `configurations` (raw run specs, one per grid point): `grid`, the runs of the fixed grid
    (each with the stack it trains in); `trials`: the sweep is that private search, and `drawn` its trials once
    drawn. The ledgers are the planned ones (every step the plan allows; a run that stops early spent less). δ is
    the smallest δ of the configurations."""
    points = [RunToRelease(spec=spec) for spec in configurations]
    ledgers, delta = [planned(spec).ledger() for spec in configurations], release_delta(points)
    stacked = release_epsilon(grid, delta=delta)
    apart = [dataclasses.replace(run, stack=None) for run in grid]
    alone = release_epsilon(apart, delta=delta) if stacked.stacks else stacked  # no stack: the same ledgers
    composed = release_epsilon(drawn, delta=delta) if trials is not None and drawn else None
    return SweepPrivacy(
        delta=delta,
        runs=len(grid),
        composition_epsilon=stacked.epsilon,
        composition_accountant=stacked.accountant,
        separate_epsilon=alone.epsilon,
        separate_accountant=alone.accountant,
        stacks=stacked.stacks,
        search=(
            search_epsilon(ledgers, trials, delta=delta)
            if trials is not None
            else suggested_search(len(grid), ledgers, delta=delta)
        ),
        searching=trials is not None,
        drawn_epsilon=composed.epsilon if composed is not None else None,
        drawn_trials=len(drawn) if composed is not None else None,
    )
