"""The common result of every accountant: ε(δ) after each queried number of steps."""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

# A bound with no finite value is ∞ (`math.inf`; JSON writes it `Infinity`). Records made before the naive and
# advanced composition curves kept ∞ held the largest float (1.8e308) in its place: anything this large means
# "no finite bound".
UNBOUNDED_EPSILON = 1e300


def is_unbounded(epsilon: float) -> bool:
    return not math.isfinite(epsilon) or epsilon >= UNBOUNDED_EPSILON


def unbounded_as_inf(value: Any) -> Any:
    """An ε as records hold it now: ∞ for an older record's largest-float stand-in; anything else as it is."""
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return math.inf if is_number and value >= UNBOUNDED_EPSILON else value


def is_epsilon_name(name: str) -> bool:
    """Whether a result field or metric holds an ε (`epsilon`, `epsilon_naive`, `joint_epsilon`, ...)."""
    return name.startswith("epsilon") or name.startswith("joint_epsilon")


def epsilons_as_inf(node: Any) -> Any:
    """A result (a copy) with every ε field at any depth, and every value of an `epsilons` object, read by
    `unbounded_as_inf`: what pages and commands show, and exports carry, for records of any engine."""
    if isinstance(node, Mapping):
        return {
            k: (
                {n: unbounded_as_inf(e) for n, e in v.items()}
                if k == "epsilons" and isinstance(v, Mapping)
                else unbounded_as_inf(v)
                if isinstance(k, str) and is_epsilon_name(k)
                else epsilons_as_inf(v)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [epsilons_as_inf(v) for v in node]
    return node


def epsilon_text(epsilon: float, spec: str = ".3g") -> str:
    """ε as people read it: ∞ where there is no finite bound."""
    return "∞" if is_unbounded(epsilon) else format(epsilon, spec)


@dataclass(frozen=True, kw_only=True)
class EpsilonCurve:
    accountant: str
    delta: float
    steps: np.ndarray  # step counts queried (0 = only the up-front releases)
    epsilons: np.ndarray  # a valid upper bound on ε(δ) after each of them
    best_orders: np.ndarray | None = None  # RDP only: the order attaining each ε
    order_edges: tuple[float, float] | None = None  # RDP only: the smallest and largest order searched

    @property
    def final_epsilon(self) -> float:
        return float(self.epsilons[-1]) if len(self.epsilons) else 0.0

    @property
    def final_order(self) -> float:
        return float(self.best_orders[-1]) if self.best_orders is not None and len(self.best_orders) else float("nan")

    @property
    def order_at_edge(self) -> bool:
        """True when the final best RDP order is the smallest or largest searched: widen the orders."""
        return self.order_edges is not None and self.final_order in self.order_edges
