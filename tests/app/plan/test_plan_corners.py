"""The Plan page at the corners of its inputs answers within the hang bound: every example in every lot (q = 1,
the most epochs, the smallest σ) is the Gaussian mechanism composed T times, exact in closed form; and the most
steps it plans (10⁷, q = 1e-5 at 100 epochs) at the smallest σ bounds the PLD's work instead of running away."""

import math
import time

from dp_accounting.gaussian_mechanism import get_epsilon_gaussian

from tests.app.plan.test_plan_page import plan_with
from tests.apptest_helpers import error_text, metrics, open_page

HANG_BOUND_S = 120.0
SMALLEST_SIGMA = 0.3  # the Plan page's σ input
MOST_EPOCHS = 100


def plan_corner(rate: float):
    at = open_page("plan")
    started = time.monotonic()
    at = plan_with(
        at,
        [
            ("radio", "plan_lots", "Sampling rate q"),
            ("number_input", "plan_q", rate),
            ("slider", "plan_epochs", MOST_EPOCHS),
            ("radio", "plan_mode", "Noise multiplier σ"),
            ("number_input", "plan_sigma", SMALLEST_SIGMA),
        ],
    )
    assert time.monotonic() - started < HANG_BOUND_S
    assert not at.exception and not error_text(at), error_text(at)
    return at


def test_sampling_rate_one_is_the_exact_gaussian_composition(home):
    shown = metrics(plan_corner(1.0))
    steps = MOST_EPOCHS  # an epoch is one step when every example is in every lot
    assert shown["Steps T"] == f"{steps:,}"
    exact = get_epsilon_gaussian(SMALLEST_SIGMA / math.sqrt(steps), 1e-5)
    assert shown["ε, tightest bound"] == f"{exact:.3f}"


def test_the_most_steps_at_the_smallest_sigma_answers(home):
    shown = metrics(plan_corner(1e-5))
    assert shown["Steps T"] == f"{10**7:,}"
    assert math.isfinite(float(shown["ε, tightest bound"]))
    assert float(shown["ε, tightest bound"]) <= float(shown["ε by RDP"])
