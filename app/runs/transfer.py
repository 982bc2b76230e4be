"""The Runs page's transfer: finished runs exported to a zip, and imported from one."""

import time

import pandas as pd
import streamlit as st

from app import services
from app.common.safe_text import literal
from app.runs.sections import TERMINAL, pick_runs, when
from cache import StoreError
from cache.archive.format import ArchiveError

PRIVATE_DIAGNOSTICS_WARNING = (
    "**Private diagnostics: not covered by ε.** The archive will also hold what was computed on the private "
    "training data and never released: each step's loss, accuracy and size of the lot, the share clipped, "
    "gradient-norm quantiles, realized regret, step timings, each run's duration and exact times, and the error "
    "text of failed runs on uploaded CSVs "
    "(which may quote a cell of the file). No ε bounds what they reveal about the people in "
    "the data. Keep the archive inside the lab; do not publish or share it as differentially private. Its "
    "manifest records that it holds them."
)
RELEASED_ONLY_NOTE = (
    "The archive holds released values only: specs, results, status history and, per step, ε by accountant, "
    "test-set accuracy and loss, and the epoch. Diagnostics computed on the private training data stay here, "
    "and so do the runs' durations (they follow the private lot sizes): its times are floored to the UTC day."
)


def export_form() -> None:
    finished = services.runs_with_status(TERMINAL, limit=1000)
    st.markdown("**Export**: finished, failed and cancelled runs, as a zip another store can import.")
    chosen = pick_runs(
        st.multiselect,
        "Runs to export",
        finished,
        key="runs_export_ids",
        help="The runs to put in the archive (queued and running runs cannot travel).",
    )
    metrics = st.checkbox(
        "Include per-step metrics",
        value=True,
        key="runs_export_metrics",
        help="ε by step for each accountant, test-set accuracy and loss, epoch. Without them the archive holds "
        "specs, results and history only (much smaller).",
    )
    private = st.checkbox(
        "Include private diagnostics (not covered by ε)",
        value=False,
        key="runs_export_private",
        help="Values computed on the private training data that the dashboard shows but never releases (lot loss, "
        "accuracy and size, clip fraction, gradient-norm quantiles, regret, step timings, run durations and exact "
        "times). Off: they stay here, and the archive's times are floored to the UTC day.",
    )
    if private:
        st.warning(PRIVATE_DIAGNOSTICS_WARNING, icon=":material/warning:")
    else:
        st.caption(RELEASED_ONLY_NOTE)
    wanted = (tuple(chosen), metrics, private)
    if st.button(
        "Prepare archive",
        key="runs_export_prepare",
        disabled=not chosen,
        help="Build the zip of the selected runs; a download button appears when it is ready.",
    ):
        try:
            export = services.export_run_archive(
                list(chosen), include_metrics=metrics, include_private_diagnostics=private
            )
            st.session_state["runs_export"] = (wanted, export)
        except (ArchiveError, StoreError) as exc:
            st.error(f"**Nothing exported**: {literal(exc)}", icon=":material/error:")
    prepared = st.session_state.get("runs_export")
    if prepared and prepared[0] == wanted:
        export = prepared[1]
        what = "with private diagnostics" if export.private_diagnostics else "released values only"
        st.download_button(
            f"Download {len(export.run_ids)} run(s), {what} ({len(export.data) / 1e6:,.2f} MB)",
            data=export.data,
            file_name=f"dplab-runs-{time.strftime('%Y%m%d-%H%M%S')}.zip",
            mime="application/zip",
            key="runs_export_download",
            on_click="ignore",
            help="Save the archive; import it on the Runs page of another lab.",
        )


SERVE_HELP = (
    "The archive's results were computed elsewhere. Ticked, its finished runs of this engine version answer "
    "identical submissions here: they are shown as cache hits (marked imported) instead of training here. Only "
    "trust archives you made or whose source you trust. Unticked, they are kept as records only."
)


def import_report_text(report: dict) -> str:
    """What an import did, in one sentence: counts only (the report itself is shown as JSON below it)."""
    imported, hits = len(report["imported"]), len(report["cache_hits"])
    return (
        f"Imported {imported} run(s); skipped {len(report['skipped'])}. {hits} served from the cache for identical "
        f"runs here (marked imported); {imported - hits} kept as records only."
    )


def import_form() -> None:
    st.markdown("**Import**: an archive exported by this lab. Runs already here are skipped, never overwritten.")
    if report := st.session_state.pop("runs_import_report", None):  # shown once, after the import's rerun
        st.success(import_report_text(report), icon=":material/download_done:")
        st.json(report, expanded=False)
    upload = st.file_uploader(
        "Run archive (.zip)",
        type=["zip"],
        key="runs_import_file",
        help="A zip made by Export here or by `python -m engine export`.",
    )
    if upload is None:
        return
    data = upload.getvalue()
    preview = services.preview_run_archive(data)
    if preview.error is not None:
        st.error(
            f"**This archive cannot be imported**: {literal(preview.error.rstrip('.'))}. The store is unchanged.",
            icon=":material/error:",
        )
        return
    by_status = pd.Series(preview.statuses, dtype=str).value_counts().to_dict()
    st.caption(
        f"{len(preview.run_ids)} run(s) ({', '.join(f'{n} {s}' for s, n in by_status.items())}), "
        f"{preview.sweeps} sweep(s), exported {when(preview.created_at)} by engine "
        f"{literal(preview.engine_version)}, {'with' if preview.includes_metrics else 'without'} metrics."
    )
    if preview.private_diagnostics:
        st.warning(
            "**This archive holds private diagnostics**: values computed on its runs' training data that no ε "
            "covers (its exporter opted in, or an older lab exported it when every export carried them, exact run "
            "timings included). Keep it inside the lab.",
            icon=":material/warning:",
        )
    serve = st.checkbox(
        "Serve these results from the cache for identical runs here",
        value=False,
        key="runs_import_serve",
        help=SERVE_HELP,
    )
    if serve:
        st.warning(
            "**Results computed elsewhere**: identical submissions here will be answered by this archive's "
            "finished runs (marked imported) instead of training. Tick this only for an archive you made or "
            "whose source you trust.",
            icon=":material/warning:",
        )
    if st.button(
        f"Import {len(preview.run_ids)} run(s)",
        key="runs_import_confirm",
        help="Add the archive's runs to this store in one transaction: all of them or none.",
    ):
        try:
            report = services.import_run_archive(data, serve_from_cache=serve)
        except (ArchiveError, StoreError) as exc:
            st.error(f"**Nothing imported**: {literal(exc)}. The store is unchanged.", icon=":material/error:")
            return
        st.session_state["runs_import_report"] = report.to_dict()
        st.rerun()  # the counts and tables above include the imported runs
