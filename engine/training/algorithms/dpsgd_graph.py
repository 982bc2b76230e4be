"""DP-SGD's clip → noise → 1/L stages over a fixed-shape Poisson lot, captured once in a CUDA graph and replayed
every step: on a GPU a small model's step is bound by kernel launches and Python, not arithmetic, and a replay
launches the whole chain at once (PyTorch's "whole network capture", `torch.cuda.graphs`).

A graph has fixed shapes; a Poisson lot has a random size. So the lot is padded: its rows go to the first n of
`capacity` static rows, the rest are zeros, and a 0/1 row mask multiplies every clip factor
(`BookKeepingClipper.clipped_sum(row_mask=...)`), so a padding row adds exactly 0 to the clipped sum and nothing to
the loss or the count of right answers. The mechanism is unchanged: the same lot (sampled outside the graph from
the run's sampling stream), the same clipped sum up to the order of float additions, the same noise (drawn
outside the graph from the run's noise stream, by `NoiseAhead` or inline, and copied into the graph's input
buffer: the draws are bit for bit those of the eager step), the same public 1/L. A lot larger than `capacity`
(probability below 1e-4 a step, `lot_capacity`) runs the eager stages instead; nothing is truncated, so the
accounting is untouched. Padding is zeros, never left-over rows of an earlier lot.

The optimizer's update stays outside the graph (an optimizer's hyper-parameters, learning-rate schedules
included, stay Python floats); it reads the graph's output gradients as `.grad`. A graph is captured for one
clipping threshold: a clipping schedule recaptures when C changes (once an epoch at most).

On the CPU the same fixed-shape body runs eagerly, call by call (`Replayed.capture` False): that is how the tests check
it against the eager stages without a GPU. The trainer uses a graph on CUDA only (`step_graph_for`).
"""

import math
from collections.abc import Callable
from typing import Generic, TypeVar

import torch
from torch import Tensor

from engine.training.clipping import BookKeepingClipper, ClippedSum

OVERFLOW_SIGMAS = 4.0  # capacity = mean + 4 standard deviations of the lot size: P(overflow) ≲ 3e-5 (normal tail)
K = TypeVar("K")
T = TypeVar("T")
WARMUP_CALLS = 2  # eager calls on a side stream before capture (cuBLAS handles, autograd's first-use setup)


def lot_capacity(n_train: int, sampling_rate: float) -> int:
    """Static rows for a Poisson lot of N = `n_train` examples at rate q: the mean qN plus `OVERFLOW_SIGMAS` of
    the binomial's standard deviation √(Nq(1−q)), plus 1, rounded up to a multiple of 8, and at most N."""
    mean = n_train * sampling_rate
    sd = math.sqrt(n_train * sampling_rate * (1.0 - sampling_rate))
    rows = math.ceil(mean + OVERFLOW_SIGMAS * sd + 1.0)
    return min(n_train, 8 * math.ceil(rows / 8))


class PaddedLot:
    """Static rows for a lot of at most `capacity` rows of `x` (rows along `axis`: 0 for (N, ...) inputs, 1 for one
    (K, N, ...) input per stack member) and `y`: the lot's rows first, zeros after them, and the 0/1 row mask."""

    def __init__(self, x: Tensor, y: Tensor, *, capacity: int, mask_dtype: torch.dtype, axis: int = 0):
        shape = list(x.shape)
        shape[axis] = capacity
        self.capacity, self.axis = capacity, axis
        self.x = torch.zeros(shape, dtype=x.dtype, device=x.device)
        self.y = torch.zeros(capacity, dtype=y.dtype, device=y.device)
        self.mask = torch.zeros(capacity, dtype=mask_dtype, device=x.device)
        self.positions = torch.arange(capacity, device=x.device)

    def fits(self, lot_size: int) -> bool:
        return lot_size <= self.capacity

    def load(self, x: Tensor, y: Tensor, lot: Tensor) -> int:
        """The lot's rows into the static rows, zeros after them, and the mask: 1.0 for its rows, 0.0 for padding.
        Returns the lot's size n."""
        n = int(lot.numel())
        for static, source, axis in ((self.x, x, self.axis), (self.y, y, 0)):
            static.narrow(axis, 0, n).copy_(source.index_select(axis, lot))
            static.narrow(axis, n, self.capacity - n).zero_()
        torch.lt(self.positions, n, out=self.mask)
        return n


class Replayed(Generic[K, T]):
    """`body(key)` run through a CUDA graph captured on first use and again whenever `key` changes (a new clipping
    threshold); off a GPU (or with `capture` False) run eagerly, call by call."""

    def __init__(self, body: Callable[[K], T], device: torch.device):
        self.body = body
        self.device = device
        self.capture = device.type == "cuda"
        self.key: K | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: T | None = None
        self.captures = 0  # how many times a graph was captured

    def __call__(self, key: K) -> T:
        if not self.capture:
            return self.body(key)
        if self.outputs is None or key != self.key:
            self.graph = self.outputs = None  # the old graph's memory goes before the new one is captured
            self.graph, self.outputs = capture_graph(lambda: self.body(key), self.device)
            self.key = key
            self.captures += 1
        self.graph.replay()
        return self.outputs


class StepGraph:
    """The clip → noise → 1/L stages of a DP-SGD step on `capacity` static rows shaped like `x`'s, for `clipper`
    (book-keeping: every stage of it is capturable), scaled by the public `inv_lot` = 1/L."""

    def __init__(self, clipper: BookKeepingClipper, x: Tensor, y: Tensor, *, capacity: int, inv_lot: float):
        self.clipper = clipper
        self.inv_lot = inv_lot
        self.rows = PaddedLot(x, y, capacity=capacity, mask_dtype=clipper.params[0].dtype)
        self.noise = [torch.zeros_like(p) for p in clipper.params]
        self.replayed = Replayed(self.body, x.device)

    def fits(self, lot_size: int) -> bool:
        return self.rows.fits(lot_size)

    def body(self, thresholds: float | tuple[float, ...]) -> ClippedSum:
        """What the graph runs: the static rows' masked clipped sum, plus the static noise, times 1/L."""
        clipped = self.clipper.clipped_sum(self.rows.x, self.rows.y, thresholds, row_mask=self.rows.mask)
        for g, noise in zip(clipped.grads, self.noise, strict=True):
            g.add_(noise).mul_(self.inv_lot)
        return clipped

    def run(
        self, x: Tensor, y: Tensor, lot: Tensor, thresholds: float | tuple[float, ...], noise: list[Tensor]
    ) -> ClippedSum:
        """The step's update (noisy clipped sum times 1/L) in `grads`, and the lot's diagnostics, for a lot that
        `fits`; the graph is captured on first use and whenever the threshold changes."""
        n = self.rows.load(x, y, lot)
        for static, drawn in zip(self.noise, noise, strict=True):
            static.copy_(drawn)
        out = self.replayed(thresholds)
        return ClippedSum(
            grads=out.grads, norms=out.norms[:n], loss_sum=out.loss_sum, clipped=out.clipped[:n], correct=out.correct
        )


def capture_graph(body: Callable[[], T], device: torch.device) -> tuple[torch.cuda.CUDAGraph, T]:
    """`body` warmed up on a side stream (`WARMUP_CALLS`), then captured (`torch.cuda.graph`): the graph, and the
    static outputs that each replay rewrites."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(WARMUP_CALLS):
            body()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # thread-local: the noise of the next step may be drawn meanwhile on another thread (`NoiseAhead`)
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        outputs = body()
    return graph, outputs


def step_graph_for(
    clipper: object, x: Tensor, y: Tensor, *, n_train: int, sampling_rate: float, lot_size: int, physical_batch_size
) -> StepGraph | None:
    """A `StepGraph` where one pays and applies: a CUDA device, the book-keeping clipper, and a lot capacity that
    fits the physical batch size (else the lot is split, which the eager stages do)."""
    if x.device.type != "cuda" or not isinstance(clipper, BookKeepingClipper) or not clipper.layers:
        return None
    capacity = lot_capacity(n_train, sampling_rate)
    if physical_batch_size is not None and capacity > physical_batch_size:
        return None
    return StepGraph(clipper, x, y, capacity=capacity, inv_lot=1.0 / lot_size)
