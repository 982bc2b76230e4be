"""An audited DP-SGD run (`audit` in its spec): its canaries are examples like any other (the plan and ε are the
unaudited run's), their membership comes from OS randomness and is never stored, and the audit catches a broken
mechanism while never (beyond its stated false-failure rate) claiming more than an honest run's ε."""

import json

import numpy as np
import pytest
import scipy.stats
import torch

from engine.training import SpecError, parse_spec, plan_spec, stack_key, train
from engine.training.canaries import GradientCanaries, InputCanaries
from engine.training.config.examples import digits_demo_spec


def audited(eps: float, kind: str = "gradient", canaries: int = 600, **changes) -> dict:
    return digits_demo_spec(target_epsilon=eps, audit={"canaries": canaries, "kind": kind}, **changes)


def test_an_audited_run_has_the_plan_and_epsilon_of_the_same_run_without_canaries():
    plain, with_canaries = parse_spec(digits_demo_spec()), parse_spec(audited(3.0))
    assert plan_spec(with_canaries).ledger() == plan_spec(plain).ledger()
    assert with_canaries.to_dict()["audit"] == {"canaries": 600, "kind": "gradient"}  # part of the run's identity
    result = train(parse_spec(audited(3.0, canaries=100)))
    assert result.epsilon == train(plain).epsilon
    audit = result.audit
    assert set(audit) == {"kind", "canaries", "guesses", "correct", "epsilon", "ceiling", "confidence", "delta"}
    assert audit["canaries"] == 100 and audit["delta"] == 1e-5 and 0 <= audit["epsilon"] <= audit["ceiling"]
    stored = json.loads(json.dumps(result.to_dict()))
    assert not any(isinstance(v, list) and len(v) == 100 for v in [*stored.values(), *audit.values()])  # no bits
    assert "Audited with 100 gradient canaries" in stored["privacy_statement"]


def test_membership_comes_from_the_os_so_two_runs_of_one_spec_differ():
    params = [torch.zeros(10, 64), torch.zeros(10)]
    draws = [GradientCanaries(params, canaries=200, seed=0).members for _ in range(2)]
    assert not np.array_equal(*draws)
    assert abs(draws[0].mean() - 0.5) < 0.2
    again = [GradientCanaries(params, canaries=200, seed=0).where[0][2] for _ in range(2)]
    assert torch.equal(*again)  # the coordinates are public: from the seed


def test_a_gradient_canary_joins_the_lots_it_is_sampled_into_with_norm_c():
    params = [torch.zeros(4, 5)]
    canaries = GradientCanaries(params, canaries=20, seed=1)
    grads = [torch.zeros(4, 5)]
    canaries.insert(grads, rate=1.0, magnitude=2.0)  # every canary that is in joins this lot
    flat = grads[0].view(-1)
    _, which, index = canaries.where[0]
    inside = torch.from_numpy(canaries.members)[which]
    assert torch.equal(flat[index].abs(), inside.float() * 2.0)
    assert int((flat != 0).sum()) == int(inside.sum())  # nothing else touched
    with pytest.raises(SpecError, match=r"audit: canaries must be an integer in \[10, 20\] for this model"):
        GradientCanaries(params, canaries=21, seed=1)


def test_input_canaries_that_are_in_extend_the_training_set():
    canaries = InputCanaries(canaries=50, n_features=64, n_classes=10, seed=3, device=torch.device("cpu"))
    x, y = torch.zeros(7, 64), torch.zeros(7, dtype=torch.long)
    x2, y2 = canaries.training_set(x, y)
    assert len(x2) == len(y2) == 7 + int(canaries.members.sum())
    assert torch.equal(x2[7:], canaries.inputs[torch.from_numpy(canaries.members)])


def test_bad_audit_options_name_the_field():
    for bad, message in [
        ({"canaries": 5}, r"audit: canaries must be an integer in \[10, 100,000\]"),
        ({"canaries": 100, "kind": "loud"}, "audit: kind must be one of gradient, input"),
        (7, "audit: must be an object"),
    ]:
        with pytest.raises(SpecError, match=message):
            parse_spec(digits_demo_spec(audit=bad))
    with pytest.raises(SpecError, match="audit: does not apply to algorithm 'noisy_gd'"):
        parse_spec({"algorithm": "noisy_gd", "audit": {"canaries": 100}})


def test_an_audited_run_trains_alone():
    assert stack_key(parse_spec(audited(3.0))) is None and stack_key(parse_spec(digits_demo_spec())) is not None


@pytest.mark.slow
def test_honest_runs_never_show_more_than_their_epsilon():
    """8 honest audited runs: each may show ε̂ > ε with probability at most 5% (the audit's confidence); the test
    fails only if more do than the 99.9% quantile of Binomial(8, 0.05): a false-failure rate below 1e-3."""
    allowed = int(scipy.stats.binom.ppf(1 - 1e-3, 8, 0.05))
    above = 0
    for seed in range(8):
        result = train(parse_spec(audited(1.0, seed=seed, epochs=5)))
        above += result.audit["epsilon"] > result.epsilon
    assert above <= allowed, (above, allowed)
