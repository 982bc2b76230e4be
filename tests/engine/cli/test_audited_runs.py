"""An audited run from the command line: `train` reports the audit with the result and `runs` lists ε̂ beside ε."""

import json

from tests.helpers import cli, fast_spec


def test_train_and_runs_report_the_audit(home, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(fast_spec(epochs=1, audit={"canaries": 50, "kind": "input"})))
    trained = cli(home, "train", str(spec))
    result = json.loads(trained.stdout)
    audit = result["audit"]
    assert audit["kind"] == "input" and audit["canaries"] == 50 and audit["epsilon"] <= audit["ceiling"]
    listed = cli(home, "runs").stdout
    assert f"audited ε≥{audit['epsilon']:.3f} (ceiling {audit['ceiling']:.3f})" in listed
