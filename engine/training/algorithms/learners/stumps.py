"""Decision stumps on a public threshold grid: the finite hypothesis class of the exponential mechanism and the
experts of randomized weighted majority (Dwork & Roth 2014, ch. 11: a class C with |C| = k).

A stump (j, t, s) predicts 1 iff s·(x_j − t) > 0, for a feature j, a threshold t on the grid
`np.linspace(0, 1, K + 2)[1:-1]` (K thresholds strictly inside [0, 1], where every feature lies) and a sign
s ∈ {+1, −1}. The grid is fixed before any data is seen, so the class itself reveals nothing. Stump `i` is
index (s_block, j, m) of an array of shape (2, d, K), s_block 0 for s = +1 and 1 for s = −1.

Nothing builds the N × k matrix of predictions: each example is reduced to two positions per feature on the
grid (how many thresholds lie below x_j, strictly and not), and every count over the class is a histogram or a
prefix sum of those positions: O(N·d + d·K) for the errors of all k = 2·d·K stumps. Comparisons are in float64.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import sparse

ROW_CHUNK = 8192  # rows per chunk: positions and histograms hold at most ROW_CHUNK × d numbers at a time


@dataclass(frozen=True)
class Stump:
    feature: int
    threshold: float
    sign: int  # +1: predict 1 when x_j > t; −1: predict 1 when x_j < t

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.sign * (np.asarray(x[:, self.feature], dtype=np.float64) - self.threshold) > 0


@dataclass(frozen=True)
class Positions:
    """Where each example's features fall on the grid: x_j > t_m ⇔ m < above[:, j]; x_j < t_m ⇔ m ≥ below[:, j]."""

    above: np.ndarray  # (N, d): number of thresholds strictly below x_j
    below: np.ndarray  # (N, d): number of thresholds ≤ x_j (differs from `above` only when x_j is on the grid)

    def __len__(self) -> int:
        return len(self.above)

    def rows(self, index: np.ndarray | slice) -> "Positions":
        return Positions(above=self.above[index], below=self.below[index])


@dataclass(frozen=True)
class Stumps:
    n_features: int
    thresholds: int  # K, per feature

    @property
    def grid(self) -> np.ndarray:
        return np.linspace(0.0, 1.0, self.thresholds + 2)[1:-1]

    @property
    def size(self) -> int:
        """k = |H| = 2·d·K."""
        return 2 * self.n_features * self.thresholds

    def stump(self, index: int) -> Stump:
        block, feature, m = np.unravel_index(index, (2, self.n_features, self.thresholds))
        return Stump(feature=int(feature), threshold=float(self.grid[m]), sign=1 if block == 0 else -1)

    def positions(self, x: np.ndarray) -> Positions:
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"expected features of shape (N, {self.n_features}), got {x.shape}")
        grid, above, below = self.grid, [], []
        for start in range(0, len(x), ROW_CHUNK):
            chunk = np.asarray(x[start : start + ROW_CHUNK], dtype=np.float64)
            above.append(np.searchsorted(grid, chunk, side="left").astype(np.int16))
            below.append(np.searchsorted(grid, chunk, side="right").astype(np.int16))
        empty = np.zeros((0, self.n_features), dtype=np.int16)
        return Positions(
            above=np.concatenate(above) if above else empty, below=np.concatenate(below) if below else empty
        )

    def error_counts(self, positions: Positions, y: np.ndarray) -> np.ndarray:
        """(k,) int64: how many of the examples each stump misclassifies."""
        d, k_per = self.n_features, self.thresholds
        width = k_per + 1  # a position is in 0..K
        hist = {(side, label): np.zeros(d * width, dtype=np.int64) for side in ("above", "below") for label in (0, 1)}
        offsets = np.arange(d, dtype=np.int64) * width
        for start in range(0, len(positions), ROW_CHUNK):
            rows, labels = positions.rows(slice(start, start + ROW_CHUNK)), y[start : start + ROW_CHUNK]
            for side in ("above", "below"):
                for label in (0, 1):
                    cells = getattr(rows, side)[labels == label].astype(np.int64) + offsets
                    hist[side, label] += np.bincount(cells.ravel(), minlength=d * width)
        # at_most[side, label][j, m] = #{examples of `label` with position ≤ m}, m = 0..K−1
        at_most = {key: np.cumsum(h.reshape(d, width), axis=1)[:, :k_per] for key, h in hist.items()}
        total = {label: int(np.sum(y == label)) for label in (0, 1)}
        # s = +1 predicts 1 iff m < above: errs on y = 0 with above > m and on y = 1 with above ≤ m
        plus = (total[0] - at_most["above", 0]) + at_most["above", 1]
        # s = −1 predicts 1 iff m ≥ below: errs on y = 0 with below ≤ m and on y = 1 with below > m
        minus = at_most["below", 0] + (total[1] - at_most["below", 1])
        return np.stack([plus, minus]).reshape(-1)

    def losses(self, positions: Positions, y: np.ndarray) -> np.ndarray:
        """(r, k) bool: whether each stump errs on each of r examples (for a chunk of rounds, r small)."""
        m = np.arange(self.thresholds)
        plus = m[None, None, :] < positions.above[:, :, None]
        minus = m[None, None, :] >= positions.below[:, :, None]
        predicted = np.stack([plus, minus], axis=1).reshape(len(positions), self.size)
        return predicted != (np.asarray(y)[:, None] == 1)

    def voter(self, positions: Positions) -> Callable[[np.ndarray], np.ndarray]:
        """For fixed examples: weights (k,) → (N,) Σ_i weights_i · h_i(x), the weight of the stumps predicting 1.
        Each example picks one cell per feature from a (d, K + 1) table of partial sums, per sign: a sparse
        0/1 matrix of N × 2·d·(K + 1) with 2·d ones per row, built once."""
        width = self.thresholds + 1
        offsets = np.arange(self.n_features) * width
        cells = np.hstack([positions.above + offsets, positions.below + offsets + self.n_features * width])
        n = len(positions)
        picks = sparse.csr_matrix(
            (np.ones(cells.size), cells.ravel(), np.arange(0, cells.size + 1, cells.shape[1])),
            shape=(n, 2 * self.n_features * width),
        )
        zeros = np.zeros((self.n_features, 1))

        def vote(weights: np.ndarray) -> np.ndarray:
            w = np.asarray(weights, dtype=np.float64).reshape(2, self.n_features, self.thresholds)
            # a + stump predicts 1 iff m < above: Σ_{m < b} w₊[j, m]; a − stump iff m ≥ below: Σ_{m ≥ b} w₋[j, m]
            plus_below = np.concatenate([zeros, np.cumsum(w[0], axis=1)], axis=1)
            minus_from = np.concatenate([np.cumsum(w[1][:, ::-1], axis=1)[:, ::-1], zeros], axis=1)
            return picks @ np.concatenate([plus_below.ravel(), minus_from.ravel()])

        return vote
