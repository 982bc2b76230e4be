"""Private hyperparameter search, and what releasing the best run of a sweep costs.

A grid spec with `"search": {"distribution": ..., "mean": μ, "shape": η}` is a **private search** (Papernot &
Steinke 2022; `engine.privacy.selection`): instead of every grid point, it trains K trials, K drawn from the
distribution with mean μ, each a configuration drawn uniformly from the grid with a random seed, and the best
by final test accuracy is the one to release. Its ε covers that release alone (model and score), however many
trials ran. The draws come from OS randomness and are not reproducible on purpose.

For any sweep, `sweep_privacy` states both costs side by side: releasing the best of every run a fixed grid
trains (plain composition of all of them: whoever picked the best looked at every one) and releasing the best
of a private search over the same configurations.
"""

import dataclasses
import functools
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from engine.privacy import ACCOUNTANTS, PrivacyError, epsilon_text
from engine.privacy.selection import (
    MAX_MEAN,
    SearchEpsilon,
    TrialCount,
    TrialDistribution,
    composition_epsilon,
    search_epsilon,
)
from engine.training import SpecError, parse_spec, plan_spec

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
    them), and as a private search over the same configurations."""

    delta: float
    runs: int  # runs a fixed grid trains: configurations × seeds
    composition_epsilon: float
    composition_accountant: str
    search: SearchEpsilon
    searching: bool  # the sweep is a private search (else `search` is what one would cost)

    @property
    def headline_epsilon(self) -> float:
        return self.search.epsilon if self.searching else self.composition_epsilon

    @property
    def headline_delta(self) -> float:
        return self.search.delta if self.searching else self.delta

    def to_dict(self) -> dict[str, Any]:
        """The numbers, ∞ as JSON's Infinity (no bound)."""
        trials = self.search.trials
        return {
            "searching": self.searching,
            "epsilon": self.headline_epsilon,
            "delta": self.headline_delta,
            "fixed_grid": {
                "runs": self.runs,
                "epsilon": self.composition_epsilon,
                "delta": self.delta,
                "accountant": self.composition_accountant,
            },
            "private_search": {
                "distribution": trials.distribution.value,
                "mean": trials.mean,
                "shape": trials.shape,
                "configurations": self.search.configurations,
                "epsilon": self.search.epsilon,
                "delta": self.search.delta,
            },
        }

    def sentence(self) -> str:
        search = self.search
        searched = (
            f"the best of a private search ({search.trials.describe()} over {search.configurations} "
            f"configuration{'s' * (search.configurations != 1)})"
        )
        fixed = f"the best of a fixed grid of {self.runs} run{'s' * (self.runs != 1)}"
        search_text = f"ε = {epsilon_text(search.epsilon)} at δ = {search.delta:.3g}"
        accountant = ACCOUNTANTS[name].short if (name := self.composition_accountant) in ACCOUNTANTS else name
        fixed_text = f"ε = {epsilon_text(self.composition_epsilon)} at δ = {self.delta:.3g}"
        if self.searching:
            return (
                f"Releasing {searched} costs {search_text} (Papernot & Steinke 2022), however many trials run; "
                f"releasing {fixed} would cost {fixed_text} (composition of every run, {accountant})."
            )
        return (
            f"Releasing {fixed} costs {fixed_text} (composition of every run, {accountant}): "
            f"choosing the best looks at all of them. A private search ({search.trials.describe()}) would cost "
            f"{search_text}."
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


def planned(specs: Sequence[Mapping[str, Any]]) -> list:
    """The plan of each raw spec, planned once per distinct spec up to its seed (ε depends on no seed)."""
    return [
        plan_of(json.dumps({k: v for k, v in spec.items() if k != "seed"}, sort_keys=True, default=str))
        for spec in specs
    ]


@functools.lru_cache(maxsize=512)
def plan_of(spec_json: str):
    """A raw spec's plan (JSON text without its seed, the cache key): calibrating σ for a target ε takes ~1 s."""
    return plan_spec(parse_spec(json.loads(spec_json) | {"seed": 0}))


def ledgers_of(specs: Sequence[Mapping[str, Any]]) -> tuple[list, float]:
    """Each raw spec's planned ledger (None: not private) and the smallest δ among them (1e-5 when none is
    private: every ε is then ∞ whatever δ)."""
    plans = planned(specs)
    deltas = [plan.delta for plan in plans if plan.private and plan.delta]
    return [plan.ledger() if plan.private else None for plan in plans], min(deltas) if deltas else 1e-5


def trials_composition(specs: Sequence[Mapping[str, Any]]) -> tuple[str, float, float]:
    """(accountant, ε, δ) of releasing every one of these runs: what a search whose trials did not all run costs."""
    ledgers, delta = ledgers_of(specs)
    accountant, epsilon = composition_epsilon(ledgers, delta=delta)
    return accountant, float(epsilon), delta


def sweep_privacy(
    configurations: Sequence[dict[str, Any]], *, seeds: int, trials: TrialCount | None = None
) -> SweepPrivacy:
    """The two costs for `configurations` (raw run specs, one per grid point) trained `seeds` times each in a
    fixed grid; `trials`: the sweep is that private search. The ledgers are the planned ones (every step the
    plan allows; a run that stops early spent less). δ is the smallest δ of the configurations."""
    ledgers, delta = ledgers_of(configurations)
    accountant, composed = composition_epsilon([lg for lg in ledgers for _ in range(seeds)], delta=delta)
    return SweepPrivacy(
        delta=delta,
        runs=len(configurations) * seeds,
        composition_epsilon=float(composed),
        composition_accountant=accountant,
        search=(
            search_epsilon(ledgers, trials, delta=delta)
            if trials is not None
            else suggested_search(len(configurations) * seeds, ledgers, delta=delta)
        ),
        searching=trials is not None,
    )
