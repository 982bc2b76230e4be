"""Export and import of runs: round trips, the result cache across stores, engine versions, and
malformed archives that are refused with a clear error and leave the store exactly as it was."""

import io
import json
import math
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache import RunStatus, Store, StoreError
from cache.archive import format as archive_module
from cache.archive.format import ArchiveError
from cache.archive.reader import read_archive
from engine import ENGINE_VERSION
from engine.jobs.submission import submit
from engine.jobs.transfer import export_runs, import_runs, prepare_export
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec
from tests.cache.store.test_maintenance import cli_json, dump, make_run, run_cli
from tests.helpers import edit_json, fast_spec, rezip, unzip

RUN_FIELDS = (
    "cache_key",
    "spec",
    "engine_version",
    "status",
    "created_at",
    "started_at",
    "finished_at",
    "total_steps",
    "progress_step",
    "plan",
    "result",
    "error",
    "attempts",
)


@pytest.fixture
def source(tmp_path) -> Store:
    return Store(tmp_path / "source" / "runs.sqlite3")


def populated(store: Store) -> dict[str, str]:
    """Finished, failed and cancelled runs, a sweep of two of them, and a queued run."""
    ids = {
        "finished": make_run(store),
        "failed": make_run(store, RunStatus.FAILED, seed=1),
        "cancelled": make_run(store, RunStatus.CANCELLED, seed=2),
        "other": make_run(store, seed=3, steps=2),
    }
    ids["sweep"], _ = store.create_sweep(
        spec={"name": "σ", "grid": {"seed": [0, 3]}},
        name="σ",
        members=[({"seed": 0}, ids["finished"]), ({"seed": 3}, ids["other"])],
    )
    ids["queued"] = make_run(store, RunStatus.QUEUED, seed=4)
    return ids


def assert_same_runs(a: Store, b: Store, run_ids) -> None:
    for run_id in run_ids:
        left, right = a.get_run(run_id), b.get_run(run_id)
        for name in RUN_FIELDS:
            assert getattr(left, name) == getattr(right, name), (run_id, name)
        assert a.events(run_id) == b.events(run_id) and a.metrics(run_id) == b.metrics(run_id)
        assert right.imported and right.worker is None


# ---------------------------------------------------------------------------------------- round trips


def test_round_trip_gives_identical_runs_metrics_events_and_sweeps(source, store):
    """With the private diagnostics opted in, everything travels (by default they stay: test_export_privacy.py)."""
    ids = populated(source)
    export = prepare_export(source, all_runs=True, include_private_diagnostics=True)
    assert export.private_diagnostics and read_archive(export.data).private_diagnostics
    assert export.left_out == ((ids["queued"], "queued: only finished, failed and cancelled runs are exported"),)
    assert set(export.run_ids) == {ids[k] for k in ("finished", "failed", "cancelled", "other")}
    report = import_runs(store, export.data, serve_from_cache=True)
    assert set(report.imported) == set(export.run_ids) and report.skipped == () and report.not_cached == ()
    assert set(report.cache_hits) == {ids["finished"], ids["other"]} and report.sweeps_added == (ids["sweep"],)
    assert report.metric_rows == sum(len(source.metrics(i)) for i in export.run_ids)
    assert_same_runs(source, store, export.run_ids)
    assert store.get_run(ids["finished"]).result["epsilons"]["naive"] == math.inf
    original, copy = source.get_sweep(ids["sweep"]), store.get_sweep(ids["sweep"])
    assert (copy.name, copy.spec, copy.run_ids, copy.points, copy.created_at) == (
        original.name,
        original.spec,
        original.run_ids,
        original.points,
        original.created_at,
    )
    assert submit(store, parse_spec(fast_spec())).cached and store.integrity_ok()


def test_the_names_users_gave_their_runs_travel_with_them(source, store):
    ids = populated(source)
    source.set_run_name(ids["finished"], "my baseline")
    data = export_runs(source, all_runs=True)
    runs = {run["id"]: run for run in json.loads(unzip(data)["runs.json"])}
    assert runs[ids["finished"]]["name"] == "my baseline" and "name" not in runs[ids["failed"]]
    import_runs(store, data)
    assert store.run_names() == {ids["finished"]: "my baseline"}
    too_long = edit_json("runs.json", lambda rows: [rows[0] | {"name": "x" * 81}, *rows[1:]])(data)
    with pytest.raises(ArchiveError, match="name"):
        import_runs(Store(source.path.parent.parent / "third.sqlite3"), too_long)


def test_reimport_is_idempotent(source, store):
    populated(source)
    data = export_runs(source, all_runs=True)
    first = import_runs(store, data)
    before = dump(store)
    again = import_runs(store, data)
    assert again.imported == () and again.metric_rows == 0 and again.sweeps_added == ()
    assert {i for i, _ in again.skipped} == set(first.imported)
    assert {why for _, why in again.skipped} == {"already in the store"} and dump(store) == before


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny run trained by a worker, and its export."""
    store = Store(tmp_path_factory.mktemp("trained") / "runs.sqlite3")
    submission = submit(store, parse_spec(fast_spec(epochs=1)))
    run = Worker(store, data_dirs=[]).run_one()
    assert run.id == submission.run_id and run.status is RunStatus.FINISHED
    return store, run.id, export_runs(store, [run.id], include_private_diagnostics=True)


def test_a_trained_run_imported_elsewhere_is_a_cache_hit(trained, store):
    source, run_id, data = trained
    assert import_runs(store, data, serve_from_cache=True).cache_hits == (run_id,)
    assert_same_runs(source, store, [run_id])
    answer = submit(store, parse_spec(fast_spec(epochs=1)))
    assert answer.cached and answer.run_id == run_id
    assert not submit(store, parse_spec(fast_spec(epochs=1, seed=1))).cached


def test_a_run_of_another_engine_version_is_kept_but_never_a_cache_hit(source, store):
    old = make_run(source, engine_version="0.1.0")
    report = import_runs(store, export_runs(source, [old]))
    assert report.imported == (old,) and report.cache_hits == ()
    assert report.not_cached == ((old, f"made by engine version 0.1.0, this is {ENGINE_VERSION}"),)
    run = store.get_run(old)
    assert run.engine_version == "0.1.0" and run.cache_key.startswith("0.1.0:") and run.status is RunStatus.FINISHED
    assert not submit(store, parse_spec(fast_spec())).cached


def rewrite_runs(data: bytes, change: Callable[[dict], None]) -> bytes:
    members = unzip(data)
    runs = json.loads(members["runs.json"])
    for run in runs:
        change(run)
    members["runs.json"] = json.dumps(runs).encode()
    return rezip(members)


def test_cache_keys_in_an_archive_are_not_trusted(source, store):
    run_id = make_run(source)
    current_key = source.get_run(run_id).cache_key
    data = export_runs(source, [run_id])

    def forge_old(run):  # claims an old engine but carries a current key: must not poison the cache
        run["engine_version"] = "0.0.9"

    import_runs(store, rewrite_runs(data, forge_old))
    assert store.get_run(run_id).cache_key == f"0.0.9:{current_key}"
    assert not submit(store, parse_spec(fast_spec())).cached

    def wrong_key_short_spec(run):  # a wrong key and a spec without its defaults: both recomputed
        run["cache_key"] = "0" * 64
        run["spec"] = fast_spec()

    fresh = Store(Path(store.path).with_name("fresh.sqlite3"))
    import_runs(fresh, rewrite_runs(data, wrong_key_short_spec), serve_from_cache=True)
    assert fresh.get_run(run_id).cache_key == current_key
    assert fresh.get_run(run_id).spec == source.get_run(run_id).spec
    assert submit(fresh, parse_spec(fast_spec())).run_id == run_id


CSV_SCHEMA = {
    "target": "income",
    "classes": ["<=50K", ">50K"],
    "numeric": {"age": [17, 90]},
    "categorical": {"sex": ["Female", "Male"]},
    "test_fraction": 0.2,
}
CSV_LINES = ["age,sex,income", "39,Male,<=50K", "50,Female,>50K", "17,Male,<=50K", "90,Female,>50K", "28,Male,<=50K"]


def test_a_csv_run_is_imported_as_a_record_and_no_local_file_is_read(source, store, tmp_path, monkeypatch):
    upload = tmp_path / "upload.csv"
    upload.write_text("\n".join(CSV_LINES) + "\n")
    run_id = make_run(source, dataset=f"csv:{upload}", schema=CSV_SCHEMA, lot_size=2)
    data = export_runs(source, [run_id])
    monkeypatch.setattr("engine.jobs.transfer.parse_spec", None)  # never called for it
    report = import_runs(store, data)
    assert report.imported == (run_id,) and report.cache_hits == ()
    assert report.not_cached == ((run_id, "trained on an uploaded CSV file, which an import never reads"),)
    assert store.get_run(run_id).cache_key.startswith("unverified:")


def test_export_selection_metrics_and_sources(source, store, tmp_path):
    ids = populated(source)
    by_sweep = prepare_export(source, sweep_id=ids["sweep"])
    assert set(by_sweep.run_ids) == {ids["finished"], ids["other"]} and by_sweep.sweep_ids == (ids["sweep"],)
    by_id = prepare_export(source, [ids["failed"], ids["queued"]], include_metrics=False)
    assert by_id.run_ids == (ids["failed"],) and by_id.sweep_ids == () and by_id.left_out[0][0] == ids["queued"]
    assert not any(n.startswith("metrics/") for n in unzip(by_id.data))
    assert read_archive(by_id.data).includes_metrics is False
    with pytest.raises(ArchiveError, match=rf"no finished, failed or cancelled run to export \({ids['queued']}"):
        prepare_export(source, [ids["queued"]])
    with pytest.raises(StoreError, match="no run with id 'nope'"):
        prepare_export(source, ["nope"])
    with pytest.raises(StoreError, match="no sweep with id 'nope'"):
        prepare_export(source, sweep_id="nope")
    path = by_sweep.save(tmp_path / "sweep.zip")
    for src in (path, str(path), io.BytesIO(path.read_bytes()), bytearray(path.read_bytes())):
        assert read_archive(src).runs == read_archive(by_sweep.data).runs
    report = import_runs(store, path)
    released = [row for row in source.metrics(ids["finished"]) if row[1] != "train_loss"]  # the default export's
    assert len(report.imported) == 2 and store.metrics(ids["finished"]) == released
    assert import_runs(store, by_id.data).metric_rows == 0 and store.metrics(ids["failed"]) == []


def test_export_refuses_a_run_it_could_not_import_back(source):
    run_id = make_run(source, RunStatus.QUEUED)
    source.claim_next("w")
    source.finish(run_id, status=RunStatus.FINISHED, result={"test_loss": float("nan")})
    with pytest.raises(ArchiveError, match="NaN"):
        export_runs(source, [run_id])


# ---------------------------------------------------------------------------------------- malformed archives


def edit_member(name: str, new: bytes | None = None, replace: tuple[bytes, bytes] | None = None):
    def edit(data: bytes) -> bytes:
        members = unzip(data)
        if replace is not None:
            assert replace[0] in members[name]
            members[name] = members[name].replace(*replace, 1)
        elif new is None:
            del members[name]
        else:
            members[name] = new
        return rezip(members)

    return edit


def metrics_name(data: bytes) -> str:
    return next(n for n in unzip(data) if n.startswith("metrics/"))


def edit_csv(line: str) -> Callable[[bytes], bytes]:
    return lambda data: edit_member(metrics_name(data), (unzip(data)[metrics_name(data)].decode() + line).encode())(
        data
    )


def patch_central(offset: int, fmt: str, value: int) -> Callable[[bytes], bytes]:
    """Overwrite a field of the first central directory entry (declared size, flags, ...)."""

    def edit(data: bytes) -> bytes:
        at = data.index(b"PK\x01\x02") + offset
        return data[:at] + struct.pack(fmt, value) + data[at + struct.calcsize(fmt) :]

    return edit


def first_run(change: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    def edit(runs):
        change(runs[0])

    return edit_json("runs.json", edit)


def set_field(key: str, value) -> Callable[[bytes], bytes]:
    return first_run(lambda run: run.__setitem__(key, value))


MALFORMED = {
    "not a zip": (lambda d: b"definitely not a zip file", "not a readable zip archive"),
    "empty file": (lambda d: b"", "the file is empty"),
    "truncated zip": (lambda d: d[: len(d) // 2], "not a readable zip archive"),
    "missing manifest": (edit_member("manifest.json"), "manifest.json: missing"),
    "missing runs": (edit_member("runs.json"), "runs.json: missing"),
    "wrong format": (edit_json("manifest.json", lambda m: m.update(format="other")), "format must be 'dplab-runs'"),
    "newer version": (edit_json("manifest.json", lambda m: m.update(format_version=2)), r"format_version 2 \(written"),
    "run count": (edit_json("manifest.json", lambda m: m.update(run_count=9)), "run_count is 9 but the archive holds"),
    "diagnostics flag": (
        edit_json("manifest.json", lambda m: m.update(private_diagnostics="no")),
        "manifest.json: private_diagnostics: must be true or false",
    ),
    "manifest field": (edit_json("manifest.json", lambda m: m.update(private=False)), "unknown field 'private'"),
    "bad json": (edit_member("runs.json", b'[{"id": '), r"runs.json: not valid JSON \(Expecting value"),
    "not utf-8": (edit_member("runs.json", b'["\xff"]'), "runs.json: not UTF-8"),
    "repeated key": (edit_member("manifest.json", b'{"format": 1, "format": 2}'), "repeats the key"),
    "runs not a list": (edit_member("runs.json", b"{}"), "runs.json: runs: must be a list"),
    "NaN in result": (
        edit_member("runs.json", replace=(b'"test_loss": 0.3', b'"test_loss": NaN')),
        r"result\.test_loss: NaN is not allowed",
    ),
    "infinite spec": (
        edit_member("runs.json", replace=(b'"lr": 2.0', b'"lr": Infinity')),
        r"spec\.lr: Infinity is not allowed here",
    ),
    "unknown status": (set_field("status", "paused"), r"status: must be one of finished, failed, cancelled .*'paused'"),
    "active status": (set_field("status", "running"), "queued and running runs are not archived"),
    "unsafe run id": (set_field("id", "../etc"), r"id: must be 1 to 64 letters"),
    "string step": (set_field("progress_step", "5"), r"progress_step: must be an integer in \[0, 2\^53\); got '5'"),
    "bool attempts": (set_field("attempts", True), "attempts: must be an integer"),
    "negative time": (set_field("created_at", -1), "created_at: must be a finite number >= 0"),
    "result a list": (set_field("result", [1, 2]), "result: must be an object; got a list"),
    "bad event": (first_run(lambda r: r["events"][0].update(status="zombie")), r"events\[0\]: status: must be one of"),
    "event order": (first_run(lambda r: r["events"].reverse()), "seq must increase"),
    "unknown field": (set_field("pickle", "x"), "unknown field 'pickle'"),
    "missing field": (first_run(lambda r: r.pop("result")), "missing field 'result'"),
    "surrogate": (set_field("error", "\ud800"), "unpaired surrogate"),
    "deep spec": (first_run(lambda r: r["spec"].update(deep=json.loads("[" * 80 + "]" * 80))), "nested more than 64"),
    "duplicate run ids": (edit_json("runs.json", lambda runs: [runs[0], runs[0]]), "appears more than once"),
    "spec invalid now": (
        first_run(lambda r: r["spec"].update(epochs=0)),
        r"run \w+: spec field 'epochs' does not validate",
    ),
    "traversal member": (lambda d: rezip({**unzip(d), "../evil.json": b"{}"}), r"unexpected member '../evil.json'"),
    "traversal metrics": (lambda d: rezip({**unzip(d), "metrics/../../x.csv": b""}), "unexpected member"),
    "absolute member": (lambda d: rezip({**unzip(d), "/etc/passwd": b""}), "unexpected member '/etc/passwd'"),
    "pickle member": (lambda d: rezip({**unzip(d), "runs.pkl": b"\x80\x04."}), "unexpected member 'runs.pkl'"),
    "duplicate member": (lambda d: rezip([*unzip(d).items(), ("runs.json", b"[]")]), "runs.json: appears twice"),
    "metrics of unknown run": (
        lambda d: rezip({**unzip(d), "metrics/ffff.csv": b"step,name,value\n"}),
        "metrics for run 'ffff', which is not in runs.json",
    ),
    "csv short row": (edit_csv("7,epsilon\n"), r"line \d+: expected 3 fields"),
    "csv bad value": (edit_csv("7,epsilon,lots\n"), "value must be a number; got 'lots'"),
    "csv NaN": (edit_csv("7,epsilon,nan\n"), "value is NaN"),
    "csv float step": (edit_csv("7.5,epsilon,1\n"), "step must be an integer"),
    "csv repeated row": (edit_csv("0,epsilon,1\n"), "comes after step"),
    "NaN timestamp": (set_field("finished_at", math.nan), "finished_at: must be a finite number >= 0; got nan"),
    "csv header": (lambda d: edit_member(metrics_name(d), b"a,b,c\n")(d), "the header must be step,name,value"),
    "huge declared size": (patch_central(24, "<I", 2**32 - 1), "declare .* bytes uncompressed; at most"),
    "lying small size": (patch_central(24, "<I", 3), "not a readable zip archive|holds"),
    "encrypted": (patch_central(8, "<H", 0x1), "encrypted"),
    "bzip2": (lambda d: rezip(unzip(d), zipfile.ZIP_BZIP2), "compression method 12"),
    "sweep unknown run": (
        edit_json("sweeps.json", lambda s: s[0]["members"][0].update(run_id="abc")),
        "run 'abc' is not in runs.json",
    ),
    "sweep empty": (edit_json("sweeps.json", lambda s: s[0].update(members=[])), "members is empty"),
}


@pytest.fixture
def good_archive(source) -> bytes:
    ids = populated(source)
    return export_runs(source, [ids["finished"], ids["failed"]], sweep_id=ids["sweep"])


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_archive_is_refused_and_changes_nothing(case, good_archive, store):
    make_run(store, seed=42)  # the store already holds a run
    before = dump(store)
    corrupt, message = MALFORMED[case]
    with pytest.raises(ArchiveError, match=message):
        import_runs(store, corrupt(good_archive))
    assert dump(store) == before


def test_a_zip_bomb_is_refused_before_it_is_inflated(good_archive, store, monkeypatch):
    monkeypatch.setattr(archive_module, "MAX_TOTAL_BYTES", 2**20)
    bomb = rezip({**unzip(good_archive), "sweeps.json": b" " * 4 * 2**20})
    assert len(bomb) < 50_000
    before = dump(store)
    with pytest.raises(ArchiveError, match="bytes uncompressed; at most 1048576"):
        import_runs(store, bomb)
    assert dump(store) == before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2000))
def test_arbitrary_bytes_never_crash_the_import(store, data):
    before = dump(store)
    with pytest.raises(ArchiveError):
        import_runs(store, data)
    assert dump(store) == before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.integers(min_value=0), byte=st.integers(min_value=0, max_value=255))
def test_a_damaged_archive_is_refused_or_read_whole(good_archive, at, byte):
    data = bytearray(good_archive)
    data[at % len(data)] = byte
    try:
        archive = read_archive(bytes(data))
    except ArchiveError:
        return
    assert len(archive.runs) == 3


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(archive_module.RUN_FIELDS)), value=JSON)
def test_any_value_in_any_run_field_is_refused_cleanly_or_imported(good_archive, store, field, value):
    try:
        data = rewrite_runs(good_archive, lambda run: run.__setitem__(field, value))
    except ValueError:  # json cannot write it (a surrogate)
        return
    before = dump(store)
    try:
        import_runs(store, data)
    except ArchiveError:
        assert dump(store) == before


# ---------------------------------------------------------------------------------------- the commands


def test_export_and_import_commands(source, store, capsys, tmp_path, monkeypatch):
    ids = populated(store)  # the CLI's store: DPLAB_HOME
    target = tmp_path / "out.zip"
    code, out = cli_json(capsys, "export", ids["finished"], ids["queued"], "-o", str(target))
    assert code == 0 and out["runs"] == [ids["finished"]] and out["path"] == str(target) and target.is_file()
    assert out["left_out"] == [
        {"id": ids["queued"], "reason": "queued: only finished, failed and cancelled runs are exported"}
    ]
    code, text, _ = run_cli(capsys, "export", "--all", "-o", str(target), "--force")  # replaces the first
    assert code == 0 and "exported 4 run(s) and 1 sweep(s) to" in text and f"left out {ids['queued']}" in text
    code, out = cli_json(capsys, "import", str(target))
    assert code == 0 and out["imported"] == [] and len(out["skipped"]) == 4
    monkeypatch.setenv("DPLAB_HOME", str(tmp_path / "elsewhere"))
    code, out = cli_json(capsys, "import", str(target))
    assert code == 0 and len(out["imported"]) == 4 and out["archive"]["engine_version"] == ENGINE_VERSION
    code, text, _ = run_cli(capsys, "import", str(target))
    assert code == 0 and "imported 0 run(s)" in text and "skipped" in text


def test_store_commands_fail_with_status_2_and_change_nothing(store, capsys, tmp_path):
    ids = populated(store)
    before = dump(store)
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"PK\x03\x04 not really")
    cases = [
        (["import", str(bad)], "bad.zip: not a readable zip archive"),
        (["import", str(tmp_path / "missing.zip")], "missing.zip: cannot read run archive (No such file"),
        (["export", "-o", str(tmp_path / "x.zip")], "give run ids, --sweep ID or --all"),
        (["export", ids["queued"], "-o", str(tmp_path / "x.zip")], "no finished, failed or cancelled run"),
        (["export", "--all", ids["failed"], "-o", str(tmp_path / "x.zip")], "give it alone"),
        (["export", ids["failed"], "-o", str(tmp_path / "no" / "dir" / "x.zip")], "cannot write"),
        (["export", "nope", "-o", str(tmp_path / "x.zip")], "no run with id 'nope'"),
        (["export", ids["failed"]], "required: -o/--output"),
    ]
    for args, message in cases:
        code, out = cli_json(capsys, *args)
        assert code == 2 and message in out["error"], (args, out)
    assert dump(store) == before and not (tmp_path / "x.zip").exists()


# ---------------------------------------------------------------------------------------- memory


@pytest.mark.slow
def test_an_import_streams_in_memory_that_does_not_grow_with_the_archive(tmp_path):
    """Python's peak allocation while importing an archive of 10 runs × 11 steps and one of 60 runs × 201 steps
    (110 times the metric rows). Streaming holds one run, one chunk of text and one batch of rows: the larger may
    need at most one more batch of `METRIC_BATCH` rows (each a tuple of four, ~200 bytes) and one more
    decompressed chunk (1 MiB of bytes and its text) than the smaller. Holding the rows would take 110 times as
    much (~20 MB more); the reader of the previous version allocated the archive's 512 MiB limit up front."""
    import tracemalloc

    from bench.archive import synthetic_archive
    from cache.archive.zip_members import CHUNK_CHARACTERS
    from cache.store.metrics import METRIC_BATCH

    peaks = []
    for runs, steps in ((10, 10), (60, 200)):
        path = tmp_path / f"{runs}.zip"
        synthetic_archive(path, runs=runs, steps=steps)
        store = Store(tmp_path / f"store-{runs}" / "runs.sqlite3")
        tracemalloc.start()
        try:
            assert len(import_runs(store, path).imported) == runs
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert len(store.metrics(f"r{runs - 1:011d}")) == (steps + 1) * 10
    allowance = METRIC_BATCH * 200 + 2 * CHUNK_CHARACTERS
    assert peaks[1] < peaks[0] + allowance, f"{peaks[1] / 1e6:.1f} MB against {peaks[0] / 1e6:.1f} MB"
