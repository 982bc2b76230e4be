"""Where a run's private randomness comes from: the one home of the rule (lots, Gaussian noise, DP-PCA's noise,
noisy GD's Laplace count and the textbook learners' draws).

Two modes (the spec's `noise`):

- **reproducible** (the lab's default): every stream is a generator seeded by SHA-256 of the run's whole
  canonical spec (`RunSpec.canonical_json`, seed included) and a purpose label, so the same spec trains to the
  same numbers (the result cache relies on it), while two distinct runs, or two members of a vectorized stack,
  never share a stream: a spec that differs in anything (learning rate, C, σ, seed, ...) draws other noise.
  Anyone holding the run record regenerates that noise, so such a model is not to be published as
  differentially private. DP-PCA's stream is keyed by the identity of the PCA release itself (data, features,
  pca_dims, pca_noise, seed: `pca_release_identity`), so runs that agree on it make one and the same release
  (a stack computes it once and its joint ledger charges it once).
- **release**: every draw comes from a generator seeded from the operating system's cryptographic randomness
  (`secrets`), fresh for each lot, each tensor (each chunk of a large one) and each up-front release; nothing
  stored or exported regenerates it. Each Gaussian coordinate is drawn as Opacus' secure mode draws it
  (Holohan & Braghin 2021, §5.1 with n = 2: (z₁ + z₂ + z₃ + z₄)/2 of four N(0, σ²) draws, after throwing one
  draw away), which defeats the floating-point attacks on a single naive Gaussian sample.

Model initialization is public (`torch.manual_seed(spec.seed)`) and is not drawn here. The random crops and
flips of augmentation multiplicity (`engine.training.augmentation`) are public too, but are drawn from a stream
here ("augmentation") so that a lab-mode run repeats them exactly.
"""

import functools
import hashlib
import json
import secrets
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

from engine.training.config.keys import NOISE_MODES
from engine.training.config.spec import RunSpec

REPRODUCIBLE, RELEASE = NOISE_MODES
PURPOSES = ("sampling", "noise", "pca", "count", "shuffle", "augmentation")
ON_HOST = frozenset({"pca", "count"})  # DP-PCA and the noisy count draw on the CPU (small, once per run)
PCA_RELEASE_KEYS = ("dataset", "schema", "data_sha256", "features", "pca_dims", "pca_noise", "seed")
DOMAIN = b"dplab noise stream v1"
PARALLEL_NOISE_MIN = 1 << 16  # coordinates per chunk; a smaller tensor is one draw
MAX_NOISE_CHUNKS = 64
HARDENED_DRAWS = 4  # Holohan & Braghin's 2n draws with n = 2, as Opacus' secure mode


# ------------------------------------------------------------------------------------ stream derivation


def stream_digest(identity: str, purpose: str) -> bytes:
    """SHA-256 of (domain, purpose, identity): the seed material of one purpose's stream of one identity."""
    return hashlib.sha256(b"\0".join([DOMAIN, purpose.encode(), identity.encode()])).digest()


def stream_seed(identity: str, purpose: str) -> int:
    """A 64-bit generator seed for `purpose` of `identity` (a canonical JSON text)."""
    return int.from_bytes(stream_digest(identity, purpose)[:8], "big")


def noise_mode(spec: RunSpec) -> str:
    return spec.noise or REPRODUCIBLE


def pca_release_identity(spec: RunSpec) -> str:
    """What DP-PCA's release is a function of: the data, the features, k, σ_p and the seed (canonical JSON)."""
    whole = spec.to_dict()
    return json.dumps({k: whole[k] for k in PCA_RELEASE_KEYS if k in whole}, sort_keys=True, separators=(",", ":"))


def stream_identity(spec: RunSpec, purpose: str) -> str:
    return pca_release_identity(spec) if purpose == "pca" else spec.canonical_json()


def noise_stream_key(spec: RunSpec) -> int | None:
    """The seed of a run's Gaussian noise stream; None in release mode (fresh OS randomness, shared with no one)."""
    return stream_seed(stream_identity(spec, "noise"), "noise") if noise_mode(spec) == REPRODUCIBLE else None


def learner_rng(spec: RunSpec, label: str) -> np.random.Generator:
    """A textbook learner's randomness (they run in the lab mode only): from its whole spec and a label."""
    digest = stream_digest(spec.canonical_json(), f"learner:{label}")
    return np.random.default_rng(np.random.SeedSequence(int.from_bytes(digest, "big")))


# ------------------------------------------------------------------------------------ the two kinds of stream


class SeededStream:
    """Lab mode: one generator, seeded once, drawn from in order; plain Gaussian draws."""

    hardened = False

    def __init__(self, generator: torch.Generator):
        self.seeded = generator

    @property
    def seed(self) -> int:
        return self.seeded.initial_seed()

    def generator(self) -> torch.Generator:
        return self.seeded

    def chunk_seeds(self, chunks: int) -> list[int]:
        return torch.randint(0, 2**62, (chunks,), generator=self.seeded, device=self.seeded.device).tolist()

    def normal_(self, buffer: Tensor, std: float, generator: torch.Generator) -> Tensor:
        return buffer.normal_(0.0, std, generator=generator)


class OsStream:
    """Release mode: a fresh generator seeded from the OS's cryptographic randomness at every call (each lot,
    tensor, chunk, release); hardened Gaussian draws. Its seeds live only inside the draw."""

    hardened = True

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)

    def generator(self) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(secrets.randbits(64))

    def chunk_seeds(self, chunks: int) -> list[int]:
        return [secrets.randbits(64) for _ in range(chunks)]

    def normal_(self, buffer: Tensor, std: float, generator: torch.Generator) -> Tensor:
        return hardened_normal_(buffer, std, generator)


Stream = SeededStream | OsStream
RandomSource = Stream | torch.Generator  # a bare generator is a lab-mode stream (tests, benches)


def as_stream(source: RandomSource) -> Stream:
    return SeededStream(source) if isinstance(source, torch.Generator) else source


def random_streams(spec: RunSpec, device: torch.device) -> dict[str, Stream]:
    """One stream per purpose (`PURPOSES`) for the run `spec`, in its noise mode."""
    out: dict[str, Stream] = {}
    for purpose in PURPOSES:
        where = torch.device("cpu") if purpose in ON_HOST else torch.device(device)
        if noise_mode(spec) == RELEASE:
            out[purpose] = OsStream(where)
        else:
            seed = stream_seed(stream_identity(spec, purpose), purpose)
            out[purpose] = SeededStream(torch.Generator(device=where).manual_seed(seed))
    return out


# ------------------------------------------------------------------------------------ the samplers


def hardened_normal_(buffer: Tensor, std: float, generator: torch.Generator) -> Tensor:
    """N(0, std²) in every coordinate of `buffer` as (z₁ + z₂ + z₃ + z₄)/2, zᵢ ~ N(0, std²) (Holohan & Braghin
    2021 §5.1, Opacus' `_generate_noise(secure_mode=True)`): the attack needs 2^(53·3) work instead of 2^53."""
    torch.empty(1, dtype=buffer.dtype, device=buffer.device).normal_(0.0, std, generator=generator)  # thrown away
    buffer.normal_(0.0, std, generator=generator)
    draw = torch.empty_like(buffer)
    for _ in range(HARDENED_DRAWS - 1):
        buffer.add_(draw.normal_(0.0, std, generator=generator))
    return buffer.mul_(0.5)


def sample_poisson_lot(n: int, rate: float, source: RandomSource, device: torch.device) -> Tensor:
    """Indices of a lot in which each of n examples is included independently with probability `rate`."""
    generator = as_stream(source).generator()
    return torch.nonzero(torch.rand(n, generator=generator, device=device) < rate).squeeze(1)


def add_gaussian_noise(grads: list[Tensor], std: float, source: RandomSource) -> list[Tensor]:
    """Add N(0, std²) to every coordinate, in place (one noise buffer per tensor, no other temporaries), the
    tensors in order from one stream: DP-SGD's noise stage drawn inline (`noise_ahead` draws the same a step
    ahead)."""
    for g in grads:
        noise = torch.empty_like(g)
        fill_gaussian_noise(noise, std, source, chunks=noise_chunks(g))
        g.add_(noise)
    return grads


def fill_gaussian_noise(
    buffer: Tensor, std: float, source: RandomSource, *, chunks: int | None = None, workers: int | None = None
) -> Tensor:
    """Overwrite a contiguous `buffer` with N(0, std²) draws: the very draws `add_gaussian_noise` adds to a
    tensor of its shape from the same stream state.

    torch's CPU sampler runs on one thread (~7 ms for 800k coordinates here), so a large CPU tensor is drawn
    in chunks of at least `PARALLEL_NOISE_MIN` coordinates, each from its own generator (lab mode: seeded by
    the stream; release mode: by the OS): still i.i.d. Gaussian. The chunks depend on the tensor's size only,
    never on the number of threads, so the lab's draws are the same function of the spec on every machine;
    the chunks are drawn on up to `workers` threads at once (default `torch.get_num_threads()`)."""
    stream = as_stream(source)
    chunks = noise_chunks(buffer) if chunks is None else chunks
    if chunks == 1:
        return stream.normal_(buffer, std, stream.generator())
    seeds = stream.chunk_seeds(chunks)
    parts = buffer.view(-1).chunk(chunks)

    def draw(k: int) -> None:
        stream.normal_(parts[k], std, torch.Generator().manual_seed(seeds[k]))

    workers = min(chunks, torch.get_num_threads() if workers is None else workers)
    if workers == 1:
        for k in range(chunks):
            draw(k)
    else:
        list(noise_pool(workers).map(draw, range(chunks)))
    return buffer


def noise_chunks(g: Tensor) -> int:
    """How many chunks `fill_gaussian_noise` draws a tensor in: a function of its size (and device) alone."""
    if g.device.type != "cpu" or g.numel() < 2 * PARALLEL_NOISE_MIN or not g.is_contiguous():
        return 1
    return min(MAX_NOISE_CHUNKS, g.numel() // PARALLEL_NOISE_MIN)


@functools.cache
def noise_pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dp-noise")


def uniform(source: RandomSource) -> float:
    """One float64 uniform in [0, 1) (the noisy count's Laplace draw)."""
    return float(torch.rand((), generator=as_stream(source).generator(), dtype=torch.float64))


__all__ = [
    "PURPOSES",
    "RELEASE",
    "REPRODUCIBLE",
    "OsStream",
    "RandomSource",
    "SeededStream",
    "Stream",
    "add_gaussian_noise",
    "as_stream",
    "fill_gaussian_noise",
    "hardened_normal_",
    "learner_rng",
    "noise_mode",
    "noise_stream_key",
    "pca_release_identity",
    "random_streams",
    "sample_poisson_lot",
    "stream_seed",
    "uniform",
]
