"""The Runs page's export is a browser download: it writes no file on the server, so it cannot reach the store
(`export -o`, which writes one, is `tests/engine/cli/test_malformed_transfer.py`)."""

import io
import zipfile

from tests.apptest_helpers import errors, open_page
from tests.cache.store.test_maintenance import make_run
from tests.engine.cli.test_malformed_inputs import digest
from tests.engine.cli.test_malformed_transfer import snapshot


def test_the_dashboard_export_writes_no_file_on_the_server(home, store):
    """The Runs page's export is a browser download: preparing it leaves the data home's files (names and
    bytes) and the store exactly as they were."""
    run_id = make_run(store)
    at = open_page("runs")
    before, stored = snapshot(home), digest(store.path)
    listing = sorted(p.name for p in home.rglob("*") if not p.name.endswith("-shm"))
    at.multiselect(key="runs_export_ids").set_value([run_id]).run()
    at.button(key="runs_export_prepare").click().run()
    assert not at.exception and errors(at) == []
    assert at.download_button(key="runs_export_download").label.startswith("Download 1 run(s)")
    assert sorted(p.name for p in home.rglob("*") if not p.name.endswith("-shm")) == listing
    assert snapshot(home) == before and digest(store.path) == stored
    assert zipfile.ZipFile(io.BytesIO(at.session_state["runs_export"][1].data)).testzip() is None
