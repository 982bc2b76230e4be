"""The run panel: a run's status, progress with ETA and cancel, headline numbers and live charts (accuracy with
its non-private references, ε by accountant, training loss and the private diagnostics), polling the store."""

import time
from functools import partial
from typing import Any

import pandas as pd
import streamlit as st

from app import services
from app.common import charts, report, run_actions, train_baseline
from app.common.attack_view import attack_view
from app.common.audit_note import audit_of, audit_text
from app.common.headline import headline_numbers, is_private, number_text
from app.common.headline import number_or_none as _number_or_none
from app.common.labels import algorithm_name, dataset_label, run_name
from app.common.restart_note import restart_text
from app.common.results import cancelling, time_left_text
from app.common.safe_text import literal, timestamp_text
from cache import RunRecord, RunStatus
from engine.metric_names import EPSILON, is_epsilon_metric
from engine.privacy import ACCOUNTANTS, epsilon_text
from engine.training.config.keys import LEARNER_MODELS

POLL_SECONDS = 1.0  # a live run's charts redraw every second
STARTING_POLL_SECONDS = 0.4  # until its first step is plotted: the wait after pressing Train is the one people feel
FAST_POLL_FOR_S = 4.0  # the fast pace goes on this long after the first point, drawn without a page redraw
STATUS_BADGE = {
    RunStatus.QUEUED: (":material/hourglass_top:", "queued: waiting for a worker"),
    RunStatus.RUNNING: (":material/directions_run:", "training"),
    RunStatus.FINISHED: (":material/check_circle:", "finished"),
    RunStatus.FAILED: (":material/error:", "failed"),
    RunStatus.CANCELLED: (":material/cancel:", "cancelled"),
}
CANCELLING_BADGE = (":material/pending:", "cancelling…")  # from the store's cancel request (every tab sees it)
NONPRIVATE_NOTE = (
    "A non-private run: no ε bounds what its model or its curves reveal about the training data; it is the reference "
    "the private runs are measured against."
)
PRIVATE_NOTE = (
    "Training loss, accuracy on the lot, gradient norms and the fraction clipped are computed on the private "
    "training data (each step's lot): diagnostics for you, computed on private data and **not released**, so "
    "no ε covers them. Test accuracy uses the held-out test set."
)
CHART_HEIGHT = 340
IMPORTED_NOTE = (
    "**Imported from an archive**: this run was not trained here. Its numbers are shown as the archive states "
    "them; they were computed elsewhere."
)


def run_panel(run_id: str, *, from_cache: bool = False) -> None:
    run = services.get_run(run_id)
    if run is None:
        st.warning(f"Run {literal(run_id)} is not in the store.")
        return
    if from_cache:
        st.success(cache_banner(run), icon=":material/bolt:")
    if not run.status.active:
        _run_body(run)
    elif run.progress_step == 0:
        _starting_run(run_id)
    else:
        _live_run(run_id)
    run_actions.actions(run)


def cache_banner(run: RunRecord) -> str:
    """What the Train page says when a submission was answered by a finished identical run."""
    when = timestamp_text(run.finished_at or run.created_at, "%Y-%m-%d %H:%M")
    engine = literal(run.engine_version)
    if run.imported:
        return (
            f"**From the result cache, imported**: this exact configuration is answered by run `{run.id}`, "
            f"imported from an archive (finished {when}, engine {engine}): its results were computed elsewhere "
            "and are shown as the archive states them. Nothing was trained here."
        )
    return (
        f"**From the result cache**: this exact configuration already ran (run `{run.id}`, finished {when}, "
        f"engine {engine}). Nothing was trained again."
    )


@st.fragment(run_every=STARTING_POLL_SECONDS)
def _starting_run(run_id: str) -> None:
    _poll(run_id, until_first_step=True)


@st.fragment(run_every=POLL_SECONDS)
def _live_run(run_id: str) -> None:
    _poll(run_id, until_first_step=False)


def _poll(run_id: str, *, until_first_step: bool) -> None:
    """One tick of a live run's panel. The whole page redraws once when the run ends (to stop polling), and once
    a starting run has been plotting for `FAST_POLL_FOR_S` (to poll at the slower pace from then on): its first
    points are drawn by this fragment at once, never after a whole-page redraw (a second on a busy machine)."""
    run = services.get_run(run_id)
    if run is None:
        return
    _run_body(run)
    if run.progress_step > 0:
        first_drawn = st.session_state.setdefault(f"first-point-at-{run_id}", time.time())
        plotting_for = time.time() - first_drawn
    else:
        plotting_for = 0.0
    if not run.status.active or (until_first_step and plotting_for > FAST_POLL_FOR_S):
        st.rerun()


def _run_body(run: RunRecord) -> None:
    icon, label = CANCELLING_BADGE if cancelling(run) else STATUS_BADGE[run.status]
    spec = run.spec
    st.subheader(f"{icon} {literal(run_name(run))} · {label}", anchor=f"run-{run.id}")  # the id: the heading's anchor
    st.caption(f"Run `{run.id}` · {literal(spec_caption(spec))}")
    if run.imported:
        st.info(IMPORTED_NOTE, icon=":material/move_to_inbox:")
    if run.error:
        st.error(f"Error: {literal(run.error)}")
    total = run.total_steps or 0
    frame = spent_so_far(services.metrics_frame(run.id), run)
    _progress(run, frame, total)
    _headline(run, frame)
    if (audit := audit_of(run.result)) is not None:
        st.info(audit_text(audit, _number_or_none((run.result or {}).get("epsilon"))), icon=":material/fact_check:")
    if isinstance(stack := (run.result or {}).get("stack"), dict) and stack:
        st.info(stack_text(stack, run.engine_version), icon=":material/stacks:")
    if note := restart_text(run):
        st.info(note, icon=":material/restart_alt:")
    stopped = run.status in (RunStatus.CANCELLED, RunStatus.FAILED)  # the x axis ends where it stopped
    _charts(run, frame, max(run.progress_step, 1) if stopped else total)
    _privacy_details(run)


def _charts(run: RunRecord, frame: pd.DataFrame, total: int) -> None:
    """Accuracy and ε side by side, then training loss and the private diagnostics, over steps 0..`total`;
    all in the run's colour."""
    spec, color = run.spec, charts.run_color(run.id)
    references = train_baseline.references(run)
    private = is_private(spec)
    accuracy = charts.run_accuracy_figure(frame, color=color, total_steps=total, references=references, private=private)
    figures = {"acc": accuracy}
    algorithm = _algorithm(spec)
    if private:  # ε by accountant
        figures["eps"] = charts.epsilon_figure(
            frame, total_steps=total, target_epsilon=_number_or_none(spec.get("target_epsilon")), color=color
        )
    if "regret" in frame:
        figures["regret"] = charts.regret_figure(frame, color=color, total_steps=total)
    elif "train_loss" in frame or algorithm not in LEARNER_MODELS:
        figures["loss"] = charts.loss_figure(frame, total_steps=total, color=color, private=private)
    if algorithm in PER_EXAMPLE_GRADIENTS and spec.get("clipping") != "input":  # no per-example gradient
        schedule = spec.get("clip_schedule", {"kind": "constant"})
        constant_c = isinstance(schedule, dict) and schedule.get("kind") == "constant"
        figures["diag"] = charts.private_diagnostics_figure(
            frame,
            color=color,
            total_steps=total,
            clip_norm=_number_or_none(spec.get("clip_norm")) if constant_c else None,
        )
        if algorithm == "aniso_dpsgd":  # what is clipped there is the weighted norm
            figures["diag"].layout.yaxis.title.text = "weighted norm ‖W⁻¹g‖"
    for row in range(0, len(figures), 2):
        for column, (name, figure) in zip(st.columns(2), list(figures.items())[row : row + 2], strict=False):
            figure.update_layout(height=CHART_HEIGHT)
            column.plotly_chart(figure, key=f"{name}-{run.id}")
    st.caption(PRIVATE_NOTE if private else NONPRIVATE_NOTE)
    train_baseline.offer(run, references)


NOISE_CAPTIONS = {
    "reproducible": "lab noise (reproducible from the record: not for publication)",
    "release": "release noise (OS randomness, hardened sampler)",
}
PER_EXAMPLE_GRADIENTS = ("dpsgd", "aniso_dpsgd", "noisy_gd")  # the algorithms whose clipping diagnostics exist


def _whole_text(value: Any) -> str:
    """A count or a seed as it is written (an integer in full); '?' for a value that is not a number."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else number_text(value)


def _algorithm(spec: dict) -> str | None:
    algorithm = spec.get("algorithm")
    return algorithm if isinstance(algorithm, str) else None


def spec_caption(spec: dict) -> str:
    """One line of what a run trained (plain text: escape it before showing it as Markdown). Any field of an
    unexpected type shows as '?'."""
    dataset, model, algorithm = spec.get("dataset"), spec.get("model", "?"), _algorithm(spec)
    parts = [
        dataset_label(dataset),
        model if isinstance(model, str) else "?",
        algorithm_name(algorithm) if isinstance(algorithm, str) else "?",
    ]
    if "clip_norm" in spec:
        parts.append(f"C={number_text(spec['clip_norm'])}")
    if algorithm in LEARNER_MODELS:
        parts += [
            f"{key} {number_text(spec[key])}"
            for key in ("target_epsilon", "thresholds", "rounds", "epochs", "lr")
            if key in spec
        ]
    else:
        parts.append(f"lot {_whole_text(spec['lot_size'])}" if "lot_size" in spec else "full batch")
        parts += [f"{number_text(spec.get('epochs'))} epochs", f"lr {number_text(spec.get('lr'))}"]
    parts.append(f"seed {_whole_text(spec.get('seed'))}")
    if isinstance(noise := spec.get("noise"), str):
        parts.append(NOISE_CAPTIONS.get(noise, f"noise {noise}"))
    return " · ".join(parts)


def _progress(run: RunRecord, frame, total: int) -> None:
    if run.status is RunStatus.QUEUED:
        st.progress(0.0, text="Queued: waiting for a worker (`python -m engine worker`).")
        return
    done = run.progress_step
    fraction = max(0.0, min(1.0, done / total)) if total else 0.0
    text = f"step {done:,} / {total:,}"
    if cancelling(run):
        text += " · cancelling… (the worker stops at its next step and keeps what the steps taken give)"
    elif run.status is RunStatus.RUNNING:
        text += f" · {time_left_text(frame, total, done)}"
    st.progress(fraction, text=text)
    if run.status is RunStatus.RUNNING:
        st.button(  # a callback: it runs even when the next poll interrupts the rerun the click started
            "Cancelling…" if run.cancel_requested else "Cancel run",
            key=f"cancel-{run.id}",
            on_click=services.cancel_run,
            args=(run.id,),
            disabled=run.cancel_requested,
            help="Stop at the next step: the model and ε are those of the steps taken, and the result is kept.",
        )


def _privacy_details(run: RunRecord) -> None:
    """Every accountant's final ε beside the reported one, what that guarantee means for an attacker, and the
    plain-language privacy statement."""
    result = run.result or {}
    epsilons = result.get("epsilons")
    if not isinstance(epsilons, dict) or not epsilons:
        return
    tightest = result.get("accountant")
    numbers = {str(name): value for name, value in epsilons.items() if _number_or_none(value) is not None}
    table = pd.DataFrame(
        [
            {
                "accountant": ACCOUNTANTS[name].title if name in ACCOUNTANTS else name,
                "ε": epsilon_text(eps, ".4g"),
                "reported": "✓ tightest" if name == tightest else "",
                "reference": ACCOUNTANTS[name].citation if name in ACCOUNTANTS else "",
            }
            for name, eps in sorted(numbers.items(), key=lambda item: item[1])
        ],
        columns=["accountant", "ε", "reported", "reference"],
    )
    statement = result.get("privacy_statement")
    lines = statement.splitlines() if isinstance(statement, str) else []
    with st.expander("Privacy statement and every accountant", expanded=run.status is RunStatus.FINISHED):
        st.dataframe(  # full width: the references are long
            table,
            hide_index=True,
            width="stretch",
            column_config={"reference": st.column_config.TextColumn(width="large")},
        )
        attack_view(run, audit_of(result))
        if lines:  # the result's own text (an imported run's is the archive's): shown literally
            st.markdown("\n".join(f"- {literal(line)}" for line in lines))
        st.download_button(
            "Download a report (HTML)",
            data=partial(report.run_report, run, services.metrics_frame(run.id), table),  # built on the click
            file_name=f"dplab-run-{run.id}.html",
            mime="text/html",
            key=f"report-{run.id}",
            icon=":material/description:",
            help="One self-contained page to send a colleague: the configuration, the privacy statement, every "
            "accountant's ε, the test-accuracy and ε charts and the results. Released values only: nothing "
            "computed on the private training data.",
        )


JOINT_BOUND_SINCE = (0, 4)  # engines before 0.4.0 drew the noise of stack members that shared a seed from one stream


def stack_text(stack: dict, engine_version: Any = None) -> str:
    """What training in a vectorized stack means for this run's ε, and what releasing the whole stack costs."""
    members = number_text(stack.get("members"))
    head = (
        f"Trained in a vectorized stack of {members} runs that shared each step's Poisson lot. This run's ε is "
        f"its own; releasing all {members} runs of the stack together costs "
    )
    if "joint_epsilon" not in stack or _version(engine_version) < JOINT_BOUND_SINCE:
        return head + (
            f"more, with no valid bound stored: engine {literal(engine_version)} drew one noise stream for members "
            "that shared a seed, so their models can differ by a noiseless function of the data (ε = ∞)."
        )
    joint, accountant = _number_or_none(stack.get("joint_epsilon")), stack.get("joint_accountant")
    by = ACCOUNTANTS[accountant].label if accountant in ACCOUNTANTS else literal(accountant)
    return head + (
        f"ε = {'?' if joint is None else epsilon_text(joint)} ({by}, δ = {number_text(stack.get('joint_delta'))}): "
        f"each run drew its own noise, so that is {members} Gaussian releases of each shared lot, composed with "
        "every up-front release (DP-PCA)."
    )


def _version(value: Any) -> tuple[int, ...]:
    """An engine version as numbers ('0.3.0' → (0, 3, 0)); () when it is not one (unknown: the oldest)."""
    parts = value.split(".") if isinstance(value, str) else []
    return tuple(int(p) for p in parts) if parts and all(p.isdigit() for p in parts) else ()


def spent_so_far(frame: pd.DataFrame, run: RunRecord) -> pd.DataFrame:
    """Hide accountant points the worker computed ahead of training: a chart shows ε spent, not planned."""
    ahead = frame["step"] > run.progress_step if "step" in frame else []
    columns = [c for c in frame.columns if c != EPSILON and is_epsilon_metric(c)]  # the background curves
    if run.status.active and columns and len(frame):
        frame = frame.copy()
        frame.loc[ahead, columns] = float("nan")
    return frame


def _headline(run: RunRecord, frame) -> None:
    for column, number in zip(st.columns(4), headline_numbers(run, frame), strict=False):
        column.metric(
            number.label, number.value, delta=number.note, delta_color="off", delta_arrow="off", help=number.help
        )
