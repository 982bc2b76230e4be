"""The audit suite's noise-only optimum: simulated audits with nothing but the noise at the canaries' coordinates."""

from bench.audit import noise_only_optimum
from engine.privacy.auditing import audit_ceiling
from tests.helpers import fast_spec


def test_the_noise_only_optimum_is_a_sorted_list_of_audits_within_the_ceiling():
    raw = fast_spec(epochs=1, target_epsilon=50.0)
    found = noise_only_optimum(raw, 100, repeats=2)
    assert len(found) == 2 and found == sorted(found)
    assert all(0.0 <= e <= audit_ceiling(100, delta=raw["delta"]) for e in found)
