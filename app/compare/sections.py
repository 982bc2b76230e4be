"""The Compare page's sections: filters and the run selection, overlaid curves, the frontier, the table
with its CSV download, and deleting runs behind a confirmation."""

import streamlit as st

from app import services
from app.common import charts
from app.common.labels import dataset_label, run_name, short_labels
from app.common.run_deletion import deletion_controls
from app.common.safe_text import literal
from app.common.train_baseline import majority_floor
from app.compare import frames
from cache import RunRecord
from engine.privacy import epsilon_text

MAX_LISTED = 2000
FILTER_HELP = {
    "Dataset": "Only runs trained on these datasets (none chosen: every dataset).",
    "Model": "Only runs of these models (none chosen: every model).",
    "Algorithm": "Only runs of these training algorithms (none chosen: every algorithm).",
    "Status": "Only runs in these states (none chosen: every state).",
}
X_AXES = {"epoch": "epochs", "step": "steps"}
PNG_NOTE = "To save a chart as PNG, hover it and click the camera icon (“Download plot as PNG”) in its toolbar."
CURVES_NOTE = (
    "Test accuracy is measured on the held-out test set. The ε curves are the RDP accountant's bound at every "
    "step (an upper bound on the ε spent so far); the table's `epsilon` is the tightest accountant at the end of "
    "the run, which can be lower."
)


def notice() -> None:
    """The outcome of the last delete (its button's callback runs before the page)."""
    kind, message = st.session_state.pop("compare_notice", (None, None))
    if kind == "success":
        st.success(message, icon=":material/delete:")
    elif kind == "error":
        st.error(message)


def select_runs(runs: list[RunRecord]) -> list[RunRecord]:
    """Filters, then the multiselect of the runs they let through; the chosen runs, in the order chosen."""
    by_id = {run.id: run for run in runs}
    options = frames.filter_options(runs)
    chosen = {}
    for column, name in zip(st.columns(len(options)), options, strict=True):
        chosen[name] = column.multiselect(
            name, options[name], key=f"compare_filter_{name.lower()}", placeholder="all", help=FILTER_HELP[name]
        )
    matching = frames.filter_runs(runs, chosen)
    if not matching:
        st.warning("No run matches these filters: remove a value from one of them.")
    before = st.session_state.get("compare_runs", [])
    kept = [run_id for run_id in before if run_id in by_id]  # selected runs stay selectable when filters change
    if kept != before:
        st.session_state["compare_runs"] = kept  # runs deleted since
    selected = st.multiselect(
        "Runs to compare",
        list(dict.fromkeys([*(run.id for run in matching), *kept])),
        format_func=lambda run_id: frames.run_label(by_id[run_id]),
        key="compare_runs",
        placeholder="choose runs",
        help="The runs to overlay and tabulate, newest first; each keeps its colour on every chart.",
    )
    return [by_id[run_id] for run_id in selected]


def curves(runs: list[RunRecord]) -> None:
    x = st.radio(
        "Curves against",
        list(X_AXES),
        format_func=X_AXES.get,
        key="compare_x",
        horizontal=True,
        help="Epochs compare runs with different lot sizes fairly; steps show the updates actually taken.",
    )
    curves, names = {run.id: services.metrics_frame(run.id) for run in runs}, short_labels(runs)
    accuracy = charts.runs_overlay_figure(
        curves, "test_accuracy", title="Test accuracy", y_title="accuracy", x=x, names=names
    )
    epsilon = charts.runs_overlay_figure(
        curves, "epsilon", title="Cumulative ε spent (RDP)", y_title="ε", x=x, names=names
    )
    left, right = st.columns(2)
    left.plotly_chart(accuracy, key="compare-accuracy", config=charts.png_config("compare-test-accuracy"))
    right.plotly_chart(epsilon, key="compare-epsilon", config=charts.png_config("compare-epsilon"))
    st.caption(f"{CURVES_NOTE} {PNG_NOTE}")


def frontier(runs: list[RunRecord]) -> None:
    points = frames.frontier_points(runs)
    missing = len(runs) - len(points)
    if points.empty:
        st.info("None of the selected runs has a result with a finite ε yet, so there is no frontier to draw.")
        return
    st.plotly_chart(
        charts.runs_frontier_figure(points, short_labels(runs), references=references(runs)),
        key="compare-frontier",
        config=charts.png_config("compare-frontier"),
    )
    st.caption(
        "x: the ε each run spent (tightest accountant over the steps it took); y: its final test accuracy."
        + (
            " A bar reaching left from a marker runs from the run's audited lower bound ε̂ (95% confidence, from its "
            "canaries) to its ε: the true ε lies in between."
            if points["audited"].notna().any()
            else ""
        )
        + (f" {missing} selected run(s) without a result or without a finite ε are not shown." if missing else "")
        + " Dashed grey lines: the accuracy of always answering the majority class (the floor) and of a finished "
        "non-private run of the same data and model, where the store has one." + " " + PNG_NOTE
    )


def references(runs: list[RunRecord]) -> list[tuple[str, float]]:
    """(label, accuracy) of the frontier's reference lines: per dataset of the selected runs, the majority class's
    accuracy (a registered dataset whose files are here), and per model trained on it, the newest finished
    non-private run of that data and model in the store. Each label names its dataset when several are shown."""
    datasets = list(dict.fromkeys(run.spec.get("dataset") for run in runs if isinstance(run.spec.get("dataset"), str)))
    named = len(datasets) > 1
    found: dict[str, float] = {}
    for run in runs:
        if (baseline := services.nonprivate_baseline(run.spec)) is None:
            continue
        where = f" ({dataset_label(run.spec.get('dataset'))}/{run.spec.get('model', '?')})" if named else ""
        found.setdefault(baseline.label + where, baseline.test_accuracy)
    for dataset in datasets:
        if (floor := majority_floor(dataset)) is not None:
            found.setdefault(floor[0] + (f" ({dataset_label(dataset)})" if named else ""), floor[1])
    return list(found.items())


def release_together(runs: list[RunRecord]) -> None:
    """What releasing the selected runs together (or the best of them, picked by looking at all) costs."""
    found = services.release_together(services.runs_json(runs))
    if isinstance(found, str):
        st.warning(f"What releasing these runs together costs cannot be said: {literal(found)}")
        return
    st.metric(
        "ε of releasing these runs together",
        epsilon_text(found.epsilon),
        help=f"At δ = {found.delta:.3g}, by {found.accountant}: also the cost of releasing the best of them, "
        "picked by looking at them all.",
    )
    shared = [run for run in runs if run.stack_id is not None and sum(r.stack_id == run.stack_id for r in runs) > 1]
    st.caption(
        "Every run drew its own noise, so releasing several costs their ledgers composed, more than any one's ε."
        + (
            f" {len(shared)} of the selected runs trained in {found.stacks} vectorized stack"
            f"{'s' * (found.stacks != 1)} and shared every Poisson lot with their stack mates: each stack is charged "
            "its released members' joint ledger (one Gaussian mechanism per shared lot at σ_joint = (Σ σₖ⁻²)^−½), "
            "which costs more than runs trained apart."
            if found.stacks
            else ""
        )
    )


def table(runs: list[RunRecord]) -> None:
    frame = frames.comparison_table(runs)
    differ = st.toggle(
        "Only the columns that differ",
        key="compare_differ",
        help="Hide the settings and results that are the same for every selected run (the CSV keeps them all).",
    )
    shown = frames.differing_columns(frame) if differ else frame
    st.dataframe(frames.epsilons_as_text(shown), hide_index=True, width="stretch")
    st.download_button(
        "Download the table (CSV)",
        data=frames.table_csv(frame),
        file_name="dplab-runs.csv",
        mime="text/csv",
        key="compare_csv",
        on_click="ignore",
        icon=":material/download:",
        help="Every hyperparameter and result of the selected runs, one row per run.",
    )


def delete(runs: list[RunRecord]) -> None:
    deletion_controls(
        [run.id for run in runs],
        page="compare",
        names={run.id: run_name(run) for run in runs},
        notice_key="compare_notice",
        export_hint="export the runs from the Runs page first if you may need them.",
        after=_forget_deleted,
    )


def _forget_deleted(run_ids: list[str]) -> None:
    st.session_state["compare_runs"] = [i for i in st.session_state.get("compare_runs", []) if i not in run_ids]
