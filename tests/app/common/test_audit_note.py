"""An audited run on the dashboard: the run panel shows its ε̂ beside the reported ε as an interval, the guesses
behind it and the ceiling its canaries could reach; a malformed audit in an imported record is left out."""

import pytest

from app.common.audit_note import audit_of, audit_text
from engine.jobs.submission import submit
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec
from tests.apptest_helpers import open_page
from tests.helpers import fast_spec

AUDIT = {"kind": "gradient", "canaries": 200, "guesses": 160, "correct": 124, "epsilon": 0.793, "ceiling": 3.52}
AUDIT |= {"confidence": 0.95, "delta": 1e-5}


def test_the_note_reads_as_an_interval_with_its_ceiling():
    text = audit_text(AUDIT, 2.736)
    assert text.startswith("**Audited**: 0.793 ≤ true ε ≤ 2.736 (95% confidence for the lower end, δ = 1e-05).")
    assert "124 of 160 guesses about 200 gradient canaries (white-box) were right" in text
    assert "at most ε̂ = 3.520 (the audit's ceiling)" in text


@pytest.mark.parametrize(
    "result", [None, {}, {"audit": "high"}, {"audit": AUDIT | {"epsilon": "3"}}, {"audit": {"canaries": 10}}]
)
def test_a_malformed_or_missing_audit_is_not_shown(result):
    assert audit_of(result) is None
    assert audit_of({"audit": AUDIT}) == AUDIT


def test_the_run_panel_shows_an_audited_runs_interval(home, store):
    spec = parse_spec(fast_spec(epochs=2, audit={"canaries": 100, "kind": "gradient"}))
    run_id = submit(store, spec).run_id
    Worker(store, data_dirs=[]).run_one()
    run = store.get_run(run_id)
    assert run.result["audit"]["canaries"] == 100
    at = open_page("runs")
    assert at.selectbox(key="open_run").value == run_id
    [note] = [i.value for i in at.info if i.value.startswith("**Audited**")]
    assert f"≤ true ε ≤ {run.result['epsilon']:.3f}" in note and "100 canaries can show at most" in note
    assert "Audited with 100 gradient canaries" in run.result["privacy_statement"]
