"""DP-SGD's Gaussian noise drawn one step ahead: the noise of step t depends only on the run's noise stream and
the public σₜCₜ, never on the gradient, so it is drawn while step t's lot is sampled, clipped and summed
(on the CPU in another thread; on a GPU on a side stream), and step t only adds it.

The draws are the very draws of the inline noise stage (`noise.add_gaussian_noise`): the same sampler
(`fill_gaussian_noise`) fills buffers of the same shapes, in the same order, from the same stream, with the
same σₜCₜ, one step at a time; nothing else draws from a run's noise stream. A run trains to the same numbers
with or without drawing ahead (tests/engine/training/test_noise_ahead.py checks it bitwise in one process).
Only the timing changes: the draw leaves the step's critical path (Opacus and JAX Privacy draw inline).

A run that stops early leaves one drawn step unused; it is discarded, never added to anything. Noise smaller
than `AHEAD_MIN_COORDINATES` in all is drawn when the step takes it, on the calling thread: drawing 10k
coordinates takes less time than handing them over between threads (logistic regression on MNIST, B 256:
0.52× of non-private drawn ahead on a 2-core CPU, against 0.68× inline).
"""

import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from torch import Tensor

from engine.training.noise import RandomSource, add_gaussian_noise, fill_gaussian_noise, noise_chunks

AHEAD_MIN_COORDINATES = 1 << 16  # less noise than this per step is drawn inline: a thread handoff costs more


class NoiseOrderError(RuntimeError):
    """Noise was asked for out of step order (the stream is drawn ahead for the next step only), or at another
    standard deviation than the one it was drawn with."""


@functools.cache
def ahead_thread() -> ThreadPoolExecutor:
    """One thread for every run's ahead draws in this process: each run's draws stay in its own step order."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="dp-noise-ahead")


os.register_at_fork(after_in_child=ahead_thread.cache_clear)  # a forked child has none of its parent's threads


class NoiseAhead:
    """The Gaussian noise of steps `first_step`..`last_step` for tensors shaped like `like`, each step drawn as
    soon as the previous one is taken. `std_at(step)` is the step's public standard deviation σₜCₜ."""

    def __init__(
        self,
        like: Sequence[Tensor],
        std_at: Callable[[int], float],
        source: RandomSource,
        *,
        last_step: int,
        first_step: int = 1,
        ahead_from: int = AHEAD_MIN_COORDINATES,
    ):
        self.templates = [(tuple(t.shape), t.dtype, t.device, noise_chunks(t)) for t in like]
        self.ahead = sum(t.numel() for t in like) >= ahead_from  # else each step's draw is made when it is taken
        self.std_at = std_at
        self.source = source
        self.last_step = last_step
        self.workers = torch.get_num_threads()  # the caller's setting; the draw thread would see its own
        device = like[0].device if like else torch.device("cpu")
        self.side_stream = torch.cuda.Stream(device) if device.type == "cuda" and self.ahead else None
        self.next_step = first_step
        self.pending: Future | None = None
        self.cancelled = False
        self.start()

    def start(self) -> None:
        if self.ahead and self.next_step <= self.last_step:
            self.pending = ahead_thread().submit(self.draw, self.next_step)

    def draw(self, step: int) -> tuple[list[Tensor], float, torch.cuda.Event | None]:
        std = self.std_at(step)
        if self.side_stream is None:
            return [self.fill(*template, std) for template in self.templates], std, None
        with torch.cuda.stream(self.side_stream):
            noise = [self.fill(*template, std) for template in self.templates]
            done = torch.cuda.Event()
            done.record(self.side_stream)
        return noise, std, done

    def fill(self, shape, dtype, device, chunks: int, std: float) -> Tensor:
        buffer = torch.empty(shape, dtype=dtype, device=device)
        return fill_gaussian_noise(buffer, std, self.source, chunks=chunks, workers=self.workers)

    def take(self, step: int, std: float | None = None) -> list[Tensor]:
        """Step `step`'s noise (waiting for its draw if it is not done), and the next step's draw started. With
        `std`, the standard deviation the step accounts for: the draw must have been made with it."""
        if step != self.next_step or step > self.last_step or self.cancelled:
            raise NoiseOrderError(f"noise for step {step} asked; the stream is drawn for step {self.next_step} next")
        noise, drawn_std, done = self.pending.result() if self.pending is not None else self.draw(step)
        if std is not None and std != drawn_std:
            raise NoiseOrderError(f"step {step} accounts for noise std {std!r}; it was drawn with {drawn_std!r}")
        if done is not None:  # the side stream's draws finish before the step's stream reads them
            current = torch.cuda.current_stream(noise[0].device)
            current.wait_event(done)
            for n in noise:
                n.record_stream(current)
        self.pending = None
        self.next_step += 1
        self.start()
        return noise

    def add_to(self, grads: list[Tensor], step: int, std: float | None = None) -> list[Tensor]:
        """Add step `step`'s noise in place, as `add_gaussian_noise` would have drawn and added it (`take`)."""
        for g, noise in zip(grads, self.take(step, std), strict=True):
            g.add_(noise)
        return grads

    def cancel(self) -> None:
        """Drop the draw not yet taken (a run that stops early); nothing more is drawn."""
        self.cancelled = True
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None


def step_noise(
    like: Sequence[Tensor], step: int, std: float, source: RandomSource, ahead: NoiseAhead | None
) -> list[Tensor]:
    """Step `step`'s noise at σₜCₜ = `std`, as tensors shaped like `like`: taken from `ahead` (which draws from
    `source`), or drawn now from `source`, the very draws `add_gaussian_noise` would add. For a stage that adds the
    noise itself (`step_graph`)."""
    if ahead is not None:
        return ahead.take(step, std)
    return [fill_gaussian_noise(torch.empty_like(t), std, source, chunks=noise_chunks(t)) for t in like]


def add_step_noise(
    grads: list[Tensor], step: int, std: float, source: RandomSource, ahead: NoiseAhead | None
) -> list[Tensor]:
    """The noise stage of step `step` at σₜCₜ = `std`, in place: drawn ahead by `ahead` (which draws from `source`),
    or drawn now from `source` (`add_gaussian_noise`). The same draws either way."""
    return add_gaussian_noise(grads, std, source) if ahead is None else ahead.add_to(grads, step, std)
