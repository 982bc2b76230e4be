"""The Data page's CSV upload form: preview the file, declare its schema column by column, save it.

Widget keys start with `data_`; a new file or a new target column resets the declarations (the
suggestion they start from depends on both).
"""

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app import services
from app.common.safe_text import code, literal
from app.services.uploads import (
    DEFAULT_TEST_FRACTION,
    MAX_TEST_FRACTION,
    ROLES,
    ColumnChoice,
    Inspection,
    SavedUpload,
    Suggestion,
    UploadError,
    build_schema,
    default_choice,
    default_target,
    lines,
    schema_problems,
)
from engine.training.datasets import MAX_CSV_BYTES, CsvSchemaError

UPLOAD_LIMIT_MB = math.ceil(MAX_CSV_BYTES / 2**20)  # Streamlit counts MiB; the exact byte limit is checked too
# The declarations' widget keys (prefixes): reset when the file or the target column changes.
DECLARATION_KEYS = (
    "data_classes",
    "data_role::",
    "data_low::",
    "data_high::",
    "data_categories::",
    "data_test_fraction",
    "data_label",
    "data_save_pressed",
)
SAVE_PRESSED = "data_save_pressed"  # Save was pressed for this file and target: problems show as errors from then on
BOUNDS_NOTE = (
    "Declare each numeric column's **bounds** from public knowledge (a human age lies in [0, 120], a "
    "percentage in [0, 100]). They are never computed from your file: the smallest and largest value of a "
    "private column are themselves private (the oldest person's exact age), so taking them from the data "
    "would leak it outside the privacy guarantee. Values outside the bounds are clipped, then scaled to [0, 1]."
)
# A numeric column's two bounds, by their key prefix: the side (in the label) and the extreme (in the tooltip).
BOUND_WORDS = {"low": ("lower", "smallest"), "high": ("upper", "largest")}
PREVIEW_NOTE = (
    "The preview and the suggested classes and categories come from your private file. They are shown only "
    "to you, to help you declare the schema; nothing is saved until you press **Save dataset**."
)
LEVELS_WARNING = (
    "**Read from your private file: the suggested classes and categories.** What you save travels into every "
    "run spec, every export and the model's one-hot layout, where anyone who sees them reads them, and a value "
    "that only a few rows have identifies those rows. So a class or category seen in fewer than {k} rows is "
    "not suggested ({withheld} withheld from this file). Add one yourself only if it is public knowledge (a "
    "published code list, say): a category not declared encodes as all zeros, a class not declared stops the "
    "save at its first row."
)


def upload_form() -> None:
    """The uploader, and for a usable file the preview and schema editor; saving keeps the file and schema."""
    upload = st.file_uploader(
        f"CSV file (UTF-8 with a header row, at most {MAX_CSV_BYTES / 2**20:,.0f} MB)",  # MiB, as Streamlit says
        type=["csv"],
        key="data_upload",
        max_upload_size=UPLOAD_LIMIT_MB,
        help="A comma-separated file whose first row names the columns; one row per person or record.",
    )
    if upload is None:
        _saved_message()
        st.info("Choose a CSV file to preview it and declare its schema.")
        return
    data = upload.getvalue()
    inspection = services.inspect_csv_upload(upload.name, data)
    if inspection.error is not None:
        st.error(
            f"**This file cannot be used**: {literal(inspection.error.rstrip('.'))}. Nothing was saved.",
            icon=":material/error:",
        )
        return
    _reset_when_changed("data_for_file", inspection.sha256, ("data_saved", "data_target", *DECLARATION_KEYS))
    _saved_message()
    _preview(inspection)
    target = _target(inspection)
    suggestion = services.suggest_csv_schema(upload.name, data, target)
    if suggestion.error is not None:
        st.error(
            f"**Target column “{literal(target)}”**: {literal(suggestion.error.rstrip('.'))}. Choose another target "
            "column.",
            icon=":material/error:",
        )
        return
    raw = _schema_editor(inspection, target, suggestion)
    problems = schema_problems(raw)
    if st.session_state.get(SAVE_PRESSED):  # the user asked to save: what stops it, in red
        for problem in problems:
            st.error(literal(problem), icon=":material/error:")
    elif problems:  # still being filled in: what is left to declare, not an error yet
        st.caption("Before saving:\n" + "\n".join(f"- {literal(problem)}" for problem in problems))
    label = st.text_input(
        "Name",
        value=f"{Path(upload.name).stem} → {target}",
        key="data_label",
        help="How the dataset is listed here and on the Train page.",
    )
    if (
        st.button(
            "Save dataset",
            type="primary",
            key="data_save",
            on_click=_press_save,  # before the rerun: the problems above show in red in it
            help="Check every cell against the schema, then keep the file and schema under the data home.",
        )
        and not problems
    ):
        _save(upload.name, data, raw, label)


def _press_save() -> None:
    st.session_state[SAVE_PRESSED] = True


def _saved_message() -> None:
    saved = st.session_state.get("data_saved")
    if saved:
        st.success(
            f"Saved **{literal(saved['label'])}**: choose it as the dataset on the Train page, where it is listed as "
            f"*{literal(saved['label'])} (your upload)*. The schema you declared:",
            icon=":material/check_circle:",
        )
        st.code(json.dumps(saved["schema"], indent=1, ensure_ascii=False), language="json")


def _reset_when_changed(marker: str, value: Any, prefixes: tuple[str, ...]) -> None:
    """Forget the state of the widgets whose keys start with `prefixes` when `value` (the file, the target)
    changes: their defaults come from a suggestion for that file and target."""
    if st.session_state.get(marker) == value:
        return
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(prefixes)]:
        del st.session_state[key]
    st.session_state[marker] = value


def _preview(inspection: Inspection) -> None:
    st.markdown(
        f"**{literal(inspection.file_name)}**: {inspection.n_rows:,} data rows, {len(inspection.header)} columns, "
        f"{inspection.size:,} bytes."
    )
    names = [name or f"(column {i + 1}, unnamed)" for i, name in enumerate(inspection.header)]
    st.dataframe(pd.DataFrame(list(inspection.preview), columns=names), hide_index=True, width="stretch")
    st.caption(PREVIEW_NOTE)


def _target(inspection: Inspection) -> str:
    named = [name for name in inspection.header if name]
    target = st.selectbox(
        "Target column",
        named,
        index=named.index(default_target(named)),
        key="data_target",
        help="The label to predict: a column with a few distinct values (the classes).",
    )
    _reset_when_changed("data_for_target", target, DECLARATION_KEYS)
    return target


def _schema_editor(inspection: Inspection, target: str, found: Suggestion) -> dict[str, Any]:
    """One declaration per column, starting from the engine's suggestion; returns the raw schema."""
    suggestion, k = found.schema or {}, found.min_rows
    withheld = found.withheld_classes + sum(found.withheld_levels.values())
    st.warning(LEVELS_WARNING.format(k=k, withheld=withheld), icon=":material/warning:")
    classes = st.text_area(
        "Classes (one per line)",
        value="\n".join(suggestion.get("classes", [])),
        key="data_classes",
        height=110,
        help="Every value the target column takes; a row with any other value is an error. Suggested from your "
        f"private file: the values at least {k} rows have.",
    )
    if found.withheld_classes:
        st.caption(
            f"{found.withheld_classes} class value(s) seen in fewer than {k} rows withheld: declare them only if "
            "they are public knowledge (otherwise saving stops at their rows; remove those rows from the file)."
        )
    st.markdown("**Feature columns**")
    st.caption(BOUNDS_NOTE)
    rare = found.withheld_levels
    columns = {
        name: _column(name, default_choice(name, suggestion), suggestion, withheld=rare.get(name, 0), k=k)
        for name in inspection.header
        if name and name != target
    }
    test_fraction = st.number_input(
        "Test fraction",
        min_value=0.01,
        max_value=MAX_TEST_FRACTION,
        value=DEFAULT_TEST_FRACTION,
        step=0.05,
        key="data_test_fraction",
        help="The share of rows held out for testing, by a fixed public permutation.",
    )
    return build_schema(target=target, classes=lines(classes), columns=columns, test_fraction=test_fraction)


def _column(name: str, default: ColumnChoice, suggestion: dict[str, Any], *, withheld: int, k: int) -> ColumnChoice:
    numeric_ok = name in suggestion.get("numeric", {})
    roles = ROLES if numeric_ok else tuple(r for r in ROLES if r != "numeric")
    role_column, first, second = st.columns([2, 2, 2])
    role = role_column.selectbox(
        code(name),
        roles,
        index=roles.index(default.role),
        key=f"data_role::{name}",
        help="Numeric: scaled by declared bounds; categorical: one-hot over declared categories; ignored: left out."
        + ("" if numeric_ok else " Not numeric: some cells are empty or not numbers."),
    )
    if role == "numeric":
        return ColumnChoice(role=role, low=_bound(first, name, "low"), high=_bound(second, name, "high"))
    if role == "categorical":
        text = first.text_area(
            f"{literal(name)}: categories (one per line)",
            value="\n".join(default.categories),
            key=f"data_categories::{name}",
            height=110,
            help="The values to one-hot encode; any other value (or an empty cell) encodes as all zeros. Suggested "
            f"from your private file: the values at least {k} rows have.",
        )
        categories = tuple(lines(text))
        rare = f"; {withheld} rare level(s) withheld (fewer than {k} rows each)" if withheld else ""
        second.caption(f"{len(categories)} one-hot feature(s){rare}")
        return ColumnChoice(role=role, categories=categories)
    return ColumnChoice()


def _bound(column: DeltaGenerator, name: str, end: str) -> float | None:
    """The declared bound of numeric column `name` at `end` ("low" or "high"); None until it is given."""
    side, extreme = BOUND_WORDS[end]
    return column.number_input(
        f"{literal(name)}: {side} bound",
        value=None,
        format="%g",
        key=f"data_{end}::{name}",
        help=f"The {extreme} value this column can take, from public knowledge.",
    )


def _save(file_name: str, data: bytes, raw: dict[str, Any], label: str) -> None:
    try:
        with st.spinner("Checking every row against the schema…"):
            saved = services.save_csv_upload(file_name, data, raw, label)
    except (UploadError, CsvSchemaError) as exc:
        st.error(f"**Not saved**: {literal(exc)}", icon=":material/error:")
        return
    st.session_state["data_saved"] = {"label": saved.label, "schema": saved.schema}  # never its path or hash
    st.rerun()  # the datasets table above lists it now


def saved_uploads() -> None:
    """The saved uploads, each deletable (after a confirmation); runs trained on one keep their records."""
    saved = services.saved_uploads()
    if not saved:
        return
    with st.expander(f"Your saved uploads ({len(saved)})"):
        st.dataframe(
            [
                {"name": u.label, "file": u.file_name, "rows": u.n_train + u.n_test, "size": services.size_text(u.size)}
                for u in saved
            ],
            hide_index=True,
            width="stretch",
        )
        by_sidecar = {str(u.sidecar): u for u in saved}
        chosen = st.selectbox(
            "Upload to delete",
            list(by_sidecar),
            format_func=lambda s: by_sidecar[s].label,
            key="data_delete_choice",
            help="The saved file and its schema; runs trained on it keep their records and results.",
        )
        sure = st.checkbox(
            "Yes, delete it", key="data_delete_confirm", help="Deleting cannot be undone: upload the file again."
        )
        st.button(
            "Delete upload",
            key="data_delete",
            disabled=not sure,
            on_click=_delete,
            args=(by_sidecar[chosen],),
            help="Delete the chosen upload now.",
        )


def _delete(upload: SavedUpload) -> None:
    services.delete_saved_upload(upload)
    st.session_state["data_delete_confirm"] = False
