"""The common result of every accountant: ε(δ) after each queried number of steps."""

import math
from dataclasses import dataclass

import numpy as np

# A composition bound with no finite value is stored as the largest float (JSON and SQLite have no ∞);
# anything this large means "no finite bound".
UNBOUNDED_EPSILON = 1e300


def is_unbounded(epsilon: float) -> bool:
    return not math.isfinite(epsilon) or epsilon >= UNBOUNDED_EPSILON


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
