"""DP-PCA input projection (Abadi et al. 2016, §4): normalize every input to unit L2
norm, release the covariance A = Σᵢ xᵢxᵢᵀ of the normalized inputs with symmetric Gaussian noise, and project
all inputs (as they are, not normalized: the authors' code does the same) on the top k
eigenvectors of the noisy A.

Privacy: adding or removing one unit-norm x changes A by xxᵀ, whose Frobenius norm is ‖x‖² = 1, and
the upper triangle (diagonal included) that is actually released has L2 norm ≤ 1. Noise N(0, σ_p²)
on each upper-triangle entry, mirrored below, is therefore one Gaussian release with noise
multiplier σ_p (`dp_pca_event`), charged once, up front, by the plan's ledger. The eigenvectors
and the projection of any input are post-processing.
"""

import torch
from torch import Tensor

from engine.training.noise import RandomSource, fill_gaussian_noise


def normalize_rows(x: Tensor) -> Tensor:
    """Every row scaled to unit L2 norm (an all-zero row stays zero)."""
    return x / torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp(min=1e-12)


def symmetric_gaussian(d: int, std: float, generator: RandomSource) -> Tensor:
    """A symmetric d×d matrix whose upper triangle (with the diagonal) is i.i.d. N(0, std²), drawn by the run's
    stream (`noise`: hardened in release mode)."""
    noise = fill_gaussian_noise(torch.empty(d, d, dtype=torch.float64), std, generator)
    upper = torch.triu(noise)
    return upper + torch.triu(noise, diagonal=1).T


def pca_projection(x_unit: Tensor, dims: int, *, noise_multiplier: float | None, generator: RandomSource) -> Tensor:
    """The d×k matrix of the top-k eigenvectors of Σᵢ xᵢxᵢᵀ (+ symmetric noise of std σ_p if private)."""
    x64 = x_unit.to(torch.float64).cpu()
    covariance = x64.T @ x64
    if noise_multiplier is not None:
        covariance += symmetric_gaussian(covariance.shape[0], noise_multiplier, generator)
    _, vectors = torch.linalg.eigh(covariance)  # ascending eigenvalues
    return vectors[:, -dims:].flip(1).to(x_unit.dtype)


def project(x: Tensor, projection: Tensor) -> Tensor:
    """Project the inputs as they are (as Abadi et al.'s code does: the unit normalization is only for
    the covariance's sensitivity). Post-processing of the released projection; ‖result‖ ≤ ‖x‖."""
    return x @ projection.to(device=x.device, dtype=x.dtype)
