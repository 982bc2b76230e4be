"""`epsilon` and `calibrate` at the corners of every documented range: each input is refused up front with a
named error (exit status 2, one line on stderr naming the argument), or answered within the hang bound with
a number checked against a closed form or dp-accounting, and nothing on stderr (the libraries' warnings never
reach it). Used to hang, run out of memory, or flood stderr: sampling rate 1 with 10⁷ steps (the PLD of 10⁷
Gaussian steps took 12 GB), a subnormal sampling rate (90 lines of absl warnings, then an internal error), the
composition theorems at σ = 0.05 (a 3.7-million-point PLD per step), and PLD at 10⁷ subsampled steps.
"""

import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from dp_accounting import dp_event
from dp_accounting.gaussian_mechanism import get_epsilon_gaussian, get_sigma_gaussian
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from engine.cli import main

HANG_BOUND_S = 60.0
ROOT = Path(__file__).resolve().parents[3]
DELTA = 1e-5


def gdp_epsilon(*, sigma: float, steps: int, delta: float = DELTA) -> float:
    """ε(δ) of `steps` Gaussian releases at noise multiplier σ: one Gaussian with σ/√T (Dong, Roth & Su 2019),
    by dp-accounting's exact Gaussian profile (Balle & Wang 2018)."""
    return get_epsilon_gaussian(sigma / math.sqrt(steps), delta)


def zcdp_epsilon(*, sigma: float, steps: int, delta: float = DELTA) -> float:
    rho = steps / (2 * sigma**2)
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def library_rdp(*, rate: float, sigma: float, steps: int, delta: float = DELTA) -> float:
    event = dp_event.PoissonSampledDpEvent(rate, dp_event.GaussianDpEvent(sigma))
    return rdp_privacy_accountant.RdpAccountant().compose(event, steps).get_epsilon(delta)


def library_pld(*, rate: float, sigma: float, steps: int, interval: float = 1e-4, delta: float = DELTA) -> float:
    event = dp_event.PoissonSampledDpEvent(rate, dp_event.GaussianDpEvent(sigma))
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=interval)
    return accountant.compose(event, steps).get_epsilon(delta)


def close(value: float, exact: float, *, rtol: float = 1e-9) -> bool:
    """Within a relative `rtol` and never below: every ε here is an upper bound."""
    return exact <= value <= exact * (1 + rtol) + 1e-12


def words(line: str) -> list[str]:
    return line.split()


def epsilon_argv(rate: str, steps: str, sigma: str, *extra: str, delta: str = "1e-5") -> list[str]:
    return ["epsilon", "--sampling-rate", rate, "--steps", steps, "--delta", delta, "--noise-multiplier", sigma, *extra]


def calibrate_argv(rate: str, steps: str, epsilon: str, *extra: str, delta: str = "1e-5") -> list[str]:
    return ["calibrate", "--sampling-rate", rate, "--steps", steps, "--delta", delta, "--epsilon", epsilon, *extra]


Check = Callable[[dict], bool]

# Inputs inside every documented range: a bounded answer, checked.
ANSWERED: dict[str, tuple[list[str], Check]] = {
    "q = 1, 10⁷ steps, σ = 0.05, PLD: exact Gaussian composition": (
        epsilon_argv("1", "10000000", "0.05", "--accountant", "pld"),
        lambda r: close(r["epsilon"], gdp_epsilon(sigma=0.05, steps=10**7)),
    ),
    "q = 1, 10⁷ steps, σ = 500, PLD": (
        epsilon_argv("1", "10000000", "500", "--accountant", "pld"),
        lambda r: close(r["epsilon"], gdp_epsilon(sigma=500, steps=10**7)),
    ),
    "q = 1, 10⁷ steps, σ = 0.05, every accountant: PLD's exact ε is the tightest": (
        epsilon_argv("1", "10000000", "0.05", "--all"),
        lambda r: r["accountant"] == "pld" and close(r["epsilon"], gdp_epsilon(sigma=0.05, steps=10**7)),
    ),
    "q = 1, 10⁷ steps, σ = 500, every accountant": (
        epsilon_argv("1", "10000000", "500", "--all"),
        lambda r: (
            close(r["epsilon"], gdp_epsilon(sigma=500, steps=10**7))
            and close(r["epsilons"]["zcdp"], zcdp_epsilon(sigma=500, steps=10**7))
        ),
    ),
    "q = 1, 10⁷ steps, zCDP applies (no subsampling)": (
        epsilon_argv("1", "10000000", "0.05", "--accountant", "zcdp"),
        lambda r: close(r["epsilon"], zcdp_epsilon(sigma=0.05, steps=10**7)),
    ),
    "q = 1, 10⁷ steps, naive composition": (
        epsilon_argv("1", "10000000", "500", "--accountant", "naive"),
        lambda r: r["epsilon"] >= gdp_epsilon(sigma=500, steps=10**7),
    ),
    "q = 1, 10⁷ steps, advanced composition": (
        epsilon_argv("1", "10000000", "0.05", "--accountant", "advanced"),
        lambda r: r["epsilon"] >= gdp_epsilon(sigma=0.05, steps=10**7),
    ),
    "q = 1, 10⁷ steps, RDP is dp-accounting's": (
        epsilon_argv("1", "10000000", "0.05", "--accountant", "rdp"),
        lambda r: math.isclose(r["epsilon"], library_rdp(rate=1.0, sigma=0.05, steps=10**7), rel_tol=1e-9),
    ),
    "q = 1, 10 steps, PLD agrees with dp-accounting's PLD to its interval": (
        epsilon_argv("1", "10", "1", "--accountant", "pld"),
        lambda r: r["epsilon"] <= library_pld(rate=1.0, sigma=1.0, steps=10) <= r["epsilon"] + 1e-4 + 1e-9,
    ),
    "q = 1, 1 step at the smallest σ, PLD": (
        epsilon_argv("1", "1", "0.05", "--accountant", "pld"),
        lambda r: close(r["epsilon"], gdp_epsilon(sigma=0.05, steps=1)),
    ),
    "q = 1 from --dataset-size 1 --lot-size 1 and the most epochs (10⁶)": (
        words("epsilon --dataset-size 1 --lot-size 1 --epochs 1000000 --delta 1e-5 --noise-multiplier 0.05")
        + words("--accountant pld"),
        lambda r: r["steps"] == 10**6 and close(r["epsilon"], gdp_epsilon(sigma=0.05, steps=10**6)),
    ),
    "q = 1 at the smallest δ (5e-324)": (
        epsilon_argv("1", "100", "1", "--accountant", "pld", delta="5e-324"),
        lambda r: close(r["epsilon"], gdp_epsilon(sigma=1.0, steps=100, delta=5e-324)),
    ),
    "q = 1 at δ just below 1": (
        epsilon_argv("1", "1", "0.05", "--accountant", "pld", delta="0.999999"),
        lambda r: close(r["epsilon"], gdp_epsilon(sigma=0.05, steps=1, delta=0.999999)),
    ),
    "a subnormal sampling rate (1e-310), RDP: accounted at 1e-9, a valid bound": (
        epsilon_argv("1e-310", "1000", "0.05", "--accountant", "rdp"),
        lambda r: r["epsilon"] == library_rdp(rate=1e-9, sigma=0.05, steps=1000),
    ),
    "the smallest subnormal sampling rate (5e-324), every accountant": (
        epsilon_argv("5e-324", "10000000", "0.05"),
        lambda r: 0 <= r["epsilon"] <= library_rdp(rate=1e-9, sigma=0.05, steps=10**7),
    ),
    "sampling rate 1e-9 from the largest dataset, 10⁷ steps, PLD": (
        words("epsilon --dataset-size 1000000000 --lot-size 1 --steps 10000000 --delta 1e-5 --noise-multiplier 500")
        + words("--accountant pld"),
        lambda r: r["epsilon"] == 0.0,  # q·T = 0.01 and σ = 500: no privacy loss beyond δ
    ),
    "σ = 0.05 at q = 1e-9, one step, naive composition (was a 70 s PLD)": (
        epsilon_argv("1e-9", "1", "0.05", "--accountant", "naive"),
        lambda r: r["epsilon"] >= library_pld(rate=1e-9, sigma=0.05, steps=1, interval=1e-2),
    ),
    "σ = 0.05 at q = 0.5, one step, advanced composition": (
        epsilon_argv("0.5", "1", "0.05", "--accountant", "advanced"),
        lambda r: r["epsilon"] >= library_pld(rate=0.5, sigma=0.05, steps=1, interval=1e-2),
    ),
    "q = 0.5, 10⁷ steps, σ = 0.05, PLD (was 190 GB): a coarse bound, never below one step's": (
        epsilon_argv("0.5", "10000000", "0.05", "--accountant", "pld"),
        lambda r: library_pld(rate=0.5, sigma=0.05, steps=1, interval=1e-2) <= r["epsilon"] < math.inf,
    ),
    "q = 0.01, 10⁷ steps, σ = 1, PLD": (
        epsilon_argv("0.01", "10000000", "1", "--accountant", "pld"),
        lambda r: 0 < r["epsilon"] <= library_rdp(rate=0.01, sigma=1.0, steps=10**7),
    ),
    "q = 0.01, 10⁷ steps at δ = 1e-300, every accountant": (
        epsilon_argv("0.01", "10000000", "2", delta="1e-300"),
        lambda r: 0 < r["epsilon"] <= library_rdp(rate=0.01, sigma=2.0, steps=10**7, delta=1e-300),
    ),
    "calibrate at q = 1, 10⁷ steps, ε = 100, PLD: the exact Gaussian σ": (
        calibrate_argv("1", "10000000", "100", "--accountant", "pld"),
        lambda r: (
            math.isclose(r["noise_multiplier"], math.sqrt(10**7) * get_sigma_gaussian(100, DELTA), rel_tol=2e-4)
            and gdp_epsilon(sigma=r["noise_multiplier"], steps=10**7) <= 100 * (1 + 1e-9)
        ),
    ),
    "calibrate at q = 1, one step, ε = 1, every accountant": (
        calibrate_argv("1", "1", "1", "--all"),
        lambda r: math.isclose(r["noise_multiplier"], get_sigma_gaussian(1, DELTA), rel_tol=2e-4),
    ),
    "calibrate --all at q = 1, 10⁷ steps, ε = 100: the accountants that cannot reach it say so": (
        calibrate_argv("1", "10000000", "100", "--all"),
        lambda r: (
            r["accountant"] == "pld"
            and math.isclose(r["noise_multiplier"], math.sqrt(10**7) * get_sigma_gaussian(100, DELTA), rel_tol=2e-4)
            and "unreachable" in r["not_applicable"]["naive"]
        ),
    ),
    "calibrate at q = 1, 10⁷ steps, ε = 100, zCDP: its closed form": (
        calibrate_argv("1", "10000000", "100", "--accountant", "zcdp"),
        lambda r: (
            zcdp_epsilon(sigma=r["noise_multiplier"], steps=10**7) <= 100
            and zcdp_epsilon(sigma=r["noise_multiplier"] * (1 - 2e-4), steps=10**7) > 100
        ),
    ),
    "calibrate at a subnormal sampling rate: σ from the rate 1e-9": (
        calibrate_argv("1e-310", "1000", "1", "--accountant", "rdp"),
        lambda r: library_rdp(rate=1e-9, sigma=r["noise_multiplier"], steps=1000) <= 1,
    ),
    "calibrate at q = 1e-9, one step, ε = 100, PLD: the smallest σ suffices": (
        calibrate_argv("1e-9", "1", "100", "--accountant", "pld"),
        lambda r: r["noise_multiplier"] == 0.05,
    ),
}

# Inputs outside a documented range, or that no accountant can answer: a named error.
REFUSED: dict[str, tuple[list[str], str]] = {
    "negative subnormal sampling rate": (
        ["epsilon", "--sampling-rate=-1e-310", "--steps", "10", "--delta", "1e-5", "--noise-multiplier", "1"],
        "--sampling-rate: must be a number in (0, 1]",
    ),
    "sampling rate just above 1": (epsilon_argv("1.0000001", "10", "1"), "--sampling-rate: must be a number in (0, 1]"),
    "σ just below 0.05": (epsilon_argv("1", "10", "0.0499"), "--noise-multiplier: must be a number in [0.05, 500]"),
    "σ just above 500": (epsilon_argv("1", "10", "500.01"), "--noise-multiplier: must be a number in [0.05, 500]"),
    "δ = 0": (epsilon_argv("1", "10", "1", delta="0"), "--delta: must be a number in (0, 1)"),
    "δ = 1": (epsilon_argv("1", "10", "1", delta="1"), "--delta: must be a number in (0, 1)"),
    "10⁷ + 1 steps": (epsilon_argv("1", "10000001", "1"), "--steps: must be an integer in [1, 10000000]"),
    "10⁷ epochs at q = 1e-9 are 10¹⁶ steps": (
        ["epsilon", "--sampling-rate", "1e-9", "--epochs", "10000000", "--delta", "1e-5", "--noise-multiplier", "1"],
        "--epochs: must be a number in (0, 1e+06]",
    ),
    "10⁶ epochs at q = 1e-310": (
        ["epsilon", "--sampling-rate", "1e-310", "--epochs", "1000000", "--delta", "1e-5", "--noise-multiplier", "1"],
        "--steps must be an integer in [1, 10000000]",
    ),
    "target ε just below 0.01": (calibrate_argv("1", "10", "0.0099"), "--epsilon: must be a number in [0.01, 100]"),
    "calibrate ε = 0.01 over 10⁷ unsampled steps: unreachable": (
        calibrate_argv("1", "10000000", "0.01", "--accountant", "pld"),
        "unreachable",
    ),
    "calibrate ε = 0.01 over 10⁷ steps at q = 0.5 by RDP: unreachable": (
        calibrate_argv("0.5", "10000000", "0.01", "--accountant", "rdp"),
        "unreachable",
    ),
    "zCDP at a sampling rate below 1": (
        epsilon_argv("0.5", "10000000", "0.05", "--accountant", "zcdp"),
        "no accountant applies: zCDP does not capture amplification by subsampling",
    ),
    "the optimal composition of pure releases, for Gaussian steps": (
        calibrate_argv("1", "10000000", "100", "--accountant", "optimal_pure"),
        "no accountant applies",
    ),
}


def run_command(argv: list[str], capsys) -> tuple[int, str, list[str]]:
    started = time.monotonic()
    status = main(argv)
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert elapsed < HANG_BOUND_S, f"{argv} took {elapsed:.0f} s"
    return status, out, err.splitlines()


def test_the_corners_cover_at_least_30_inputs():
    assert len(ANSWERED) + len(REFUSED) >= 30


@pytest.mark.parametrize("case", list(ANSWERED))
def test_a_corner_inside_the_ranges_is_answered_in_bounded_time_and_checked(case, capsys):
    argv, check = ANSWERED[case]
    status, out, err = run_command(argv, capsys)
    assert status == 0 and err == [], err
    result = json.loads(out)
    assert check(result), result


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_corner_outside_the_ranges_is_a_named_error(case, capsys):
    argv, mention = REFUSED[case]
    status, out, err = run_command(argv, capsys)
    assert status == 2 and out == ""
    assert len(err) == 1 and err[0].startswith("error: ") and mention in err[0], err


def engine_process(argv: list[str], *, memory_bytes: int | None = None) -> subprocess.CompletedProcess:
    def limit_memory() -> None:
        if memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "engine", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=HANG_BOUND_S,
        preexec_fn=limit_memory,
        check=False,
    )


def test_a_subnormal_sampling_rate_prints_the_answer_and_no_library_warning():
    done = engine_process(epsilon_argv("1e-310", "1000", "0.05"))
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    assert json.loads(done.stdout)["sampling_rate"] == 1e-310


def test_ten_million_unsampled_steps_fit_in_2_gb():
    done = engine_process(epsilon_argv("1", "10000000", "0.05"), memory_bytes=2 << 30)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    assert close(json.loads(done.stdout)["epsilon"], gdp_epsilon(sigma=0.05, steps=10**7))
