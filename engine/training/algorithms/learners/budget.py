"""How each textbook learner (seed 004, Dwork & Roth ch. 11) spends a target ε: the parameter of its mechanism
and the DP event of one step, from public numbers only. Pure functions; the ledger built from these events is
what every accountant bounds, so the ε shown is never the theorem's arithmetic alone.

- Exponential mechanism over a finite class (D&R Thm 3.10; private PAC learning, Kasiviswanathan et al. 2008):
  score −(training errors) has sensitivity 1 and is monotone under adding or removing one example (every score
  moves the same way), so sampling ∝ exp(ε·score) is ε-DP (McSherry & Talwar 2007): one ε-DP release, the whole
  budget spent on the one draw.
- SQ learning through Laplace noise (Blum, Dwork, McSherry, Nissim 2005; D&R §11.1): each statistical query
  Σₓ φ(x, y) with φ ∈ [0, 1] has sensitivity 1, answered with Laplace noise of scale 1/ε_q; T iterations of d
  queries at ε_q = ε/(T·d) compose (pure ε, D&R Thm 3.16) to ε. Answers are divided by the public N.
- Randomized weighted majority, private by D&R Thm 11.2: with η = ε/√(32 T ln(1/δ)), each round's choice is an
  exponential mechanism over cumulative losses whose change under a changed round is ≤ 1, so each round is
  2η-DP, and advanced composition over T rounds gives (ε, δ). Neighbouring streams differ in one round (one
  training example replaced by another).
"""

import math

from dp_accounting import dp_event

from engine.privacy import PureDpEvent, exponential_mechanism_event, laplace_event


def expmech_event(target_epsilon: float) -> dp_event.DpEvent:
    return exponential_mechanism_event(epsilon=target_epsilon)


def sq_query_epsilon(*, target_epsilon: float, iterations: int, queries_per_iteration: int) -> float:
    """ε_q of one statistical query when T·d queries share ε by pure composition."""
    return target_epsilon / (iterations * queries_per_iteration)


def sq_step_event(*, query_epsilon: float, queries_per_iteration: int) -> dp_event.DpEvent:
    """One iteration: d sum queries of sensitivity 1, each with Laplace noise of scale 1/ε_q."""
    return dp_event.SelfComposedDpEvent(laplace_event(scale=1.0 / query_epsilon), queries_per_iteration)


def rwm_eta(*, target_epsilon: float, rounds: int, delta: float) -> float:
    """D&R Thm 11.2's learning rate: η = ε / √(32 T ln(1/δ))."""
    return target_epsilon / math.sqrt(32.0 * rounds * math.log(1.0 / delta))


def rwm_round_event(eta: float) -> dp_event.DpEvent:
    """One round's choice: an exponential mechanism with score sensitivity 1 at rate η, so 2η-DP."""
    return PureDpEvent(epsilon=2.0 * eta)
