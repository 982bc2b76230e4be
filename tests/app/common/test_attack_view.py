"""What a finished private run's ε means for an attacker, in its run panel: the curve of the highest TPR any
membership-inference attack reaches at each FPR with the audit's ε̂ curve, and the sentence read at 1% false
positives, in the panel and in the privacy statement; nothing of it for a non-private run. A run stored before
runs kept the curve gets it computed from its stored configuration."""

import json
import sqlite3
from contextlib import closing

from app.common.safe_text import unescape
from engine.jobs.submission import submit
from engine.jobs.workers.worker import Worker
from engine.privacy.tradeoff import ACCUSED, AttackBound, attack_sentence
from engine.training import parse_spec
from tests.apptest_helpers import chart_specs, open_page
from tests.helpers import fast_spec

TITLE = "What ε means for an attacker"


def attack_charts(at) -> list[dict]:
    return [spec for spec in chart_specs(at) if spec["layout"]["title"]["text"] == TITLE]


def open_run(run_id: str):
    at = open_page("runs")
    at.selectbox(key="open_run").set_value(run_id).run()
    assert not at.exception, at.exception
    return at


def markdown_text(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_a_private_runs_panel_shows_the_curve_with_its_audit_and_the_sentence(home, store):
    private = submit(store, parse_spec(fast_spec(epochs=2, audit={"canaries": 100, "kind": "gradient"}))).run_id
    nonprivate = {"dataset": "digits", "model": "logreg", "algorithm": "nonprivate", "epochs": 1, "lot_size": 64}
    nonprivate |= {"lr": 0.5, "seed": 0}
    baseline = submit(store, parse_spec(nonprivate)).run_id
    worker = Worker(store, data_dirs=[])
    worker.run_one()
    worker.run_one()
    result = store.get_run(private).result
    bound = AttackBound.from_dict(result["attack_bound"])
    sentence = attack_sentence(bound)
    assert sentence in result["privacy_statement"]

    at = open_run(private)
    [chart] = attack_charts(at)
    traces = {trace["name"]: trace for trace in chart["data"]}
    curve = next(t for name, t in traces.items() if name.startswith("highest any attack can reach (PLD)"))
    assert curve["x"] == list(bound.fpr) and curve["y"] == list(bound.tpr)
    assert "random guess" in traces
    [audit] = [t for name, t in traces.items() if name.startswith("audit's lower bound ε̂")]
    assert audit["y"][0] >= 0 and max(audit["y"]) <= 1
    [point] = [t for name, t in traces.items() if name.startswith("at 1% false positives")]
    assert point["x"] == [ACCUSED] and point["y"] == [bound.tpr_at(ACCUSED)]
    shown = markdown_text(at)
    assert f"**{sentence}**" in shown  # beside the chart
    assert f"- {sentence}" in unescape(shown)  # and in the privacy statement's list
    assert "Dashed: the audit's ε̂" in " ".join(c.value for c in at.caption)

    at = open_run(baseline)
    assert not attack_charts(at)
    assert "wrongly accuses 1% of non-members" not in markdown_text(at)


def test_a_run_stored_without_the_curve_gets_it_from_its_configuration(home, store):
    run_id = submit(store, parse_spec(fast_spec(epochs=2))).run_id
    Worker(store, data_dirs=[]).run_one()
    result = store.get_run(run_id).result
    stored = result.pop("attack_bound")
    with closing(sqlite3.connect(home / "runs.sqlite3")) as db, db:
        db.execute("UPDATE runs SET result_json = ? WHERE id = ?", (json.dumps(result), run_id))
    assert "attack_bound" not in store.get_run(run_id).result

    at = open_run(run_id)
    [chart] = attack_charts(at)
    curve = next(t for t in chart["data"] if t["name"].startswith("highest any attack can reach"))
    assert curve["x"] == stored["fpr"] and curve["y"] == stored["tpr"]  # the same computation, from the plan
    assert "Computed now from the run's stored configuration" in " ".join(c.value for c in at.caption)
    assert f"**{attack_sentence(AttackBound.from_dict(stored))}**" in markdown_text(at)
