"""CSV uploads (`csv:PATH`): a declared schema, public-only encoding, errors naming file, line and column."""

import copy
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from engine.training.datasets import (
    RARE_LEVEL_ROWS,
    CsvSchema,
    CsvSchemaError,
    DatasetError,
    csv_dataset_info,
    csv_schema_suggestion,
    dataset_info,
    file_sha256,
    infer_csv_schema,
    load_csv,
    load_dataset,
    parse_csv_schema,
)
from engine.training.datasets import tabular_csv as tabular_csv_module

SCHEMA = {
    "target": "income",
    "classes": ["<=50K", ">50K"],
    "numeric": {"age": [17, 90], "hours-per-week": [1, 99]},
    "categorical": {"sex": ["Female", "Male"], "workclass": ["Private", "State-gov"]},
    "test_fraction": 0.2,
}
HEADER = "age,workclass,sex,hours-per-week,notes,income"
ROWS = [
    "39,State-gov,Male,40,hello,<=50K",
    "50,Private,Female,13,,>50K",
    "17,Self-emp,Male,99,x,<=50K",  # a category not declared: all zeros
    "90,,Female,1,y,>50K",  # an empty categorical cell: all zeros
    "28,Private,Male,40,z,<=50K",
]


def write(tmp_path: Path, lines: list[str], name: str = "upload.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def upload(tmp_path: Path, rows: list[str] = ROWS, name: str = "upload.csv") -> Path:
    return write(tmp_path, [HEADER, *rows], name)


def schema(**changes) -> CsvSchema:
    return parse_csv_schema(SCHEMA | changes)


def encoded_rows(path: Path, parsed: CsvSchema) -> dict[int, np.ndarray]:
    """Features by the row's age (unique in these files), whatever split the row landed in."""
    data = load_csv(path, parsed)
    x = np.vstack([data.x_train, data.x_test])
    return {round(float(row[0]) * 73 + 17): row for row in x}


# ---------------------------------------------------------------- the schema


def test_the_example_schema_parses_and_round_trips():
    parsed = parse_csv_schema(SCHEMA)
    assert parsed.target == "income" and parsed.classes == ("<=50K", ">50K")
    assert parsed.numeric == (("age", 17.0, 90.0), ("hours-per-week", 1.0, 99.0))
    assert parsed.categorical == (("sex", ("Female", "Male")), ("workclass", ("Private", "State-gov")))
    assert parsed.n_features == 6 and parsed.test_fraction == 0.2
    assert parsed.feature_names == [
        "age",
        "hours-per-week",
        "sex=Female",
        "sex=Male",
        "workclass=Private",
        "workclass=State-gov",
    ]
    assert parse_csv_schema(json.loads(json.dumps(parsed.to_dict()))) == parsed
    without_fraction = {k: v for k, v in SCHEMA.items() if k != "test_fraction"}
    assert parse_csv_schema(without_fraction).test_fraction == 0.2


def changed(path: str, value) -> dict:
    raw = copy.deepcopy(SCHEMA)
    *parents, last = path.split(".")[1:]
    node = raw
    for key in parents:
        node = node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return raw


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        (["not", "an", "object"], "schema", "expected an object"),
        (SCHEMA | {"weights": {}}, "schema.weights", "unknown key; allowed keys: target, classes"),
        (changed("schema.target", KeyError), "schema.target", "required"),
        (changed("schema.target", ""), "schema.target", "non-empty string"),
        (changed("schema.target", 3), "schema.target", "non-empty string"),
        (changed("schema.classes", KeyError), "schema.classes", "required"),
        (changed("schema.classes", ["only"]), "schema.classes", "at least 2 class values"),
        (changed("schema.classes", "<=50K,>50K"), "schema.classes", "expected a list"),
        (changed("schema.classes", ["a", "a"]), "schema.classes[1]", "listed twice"),
        (changed("schema.classes", ["a", 1]), "schema.classes[1]", "non-empty string"),
        (changed("schema.numeric.age", [90, 17]), "schema.numeric.age", r"\[low, high\], finite numbers with low <"),
        (changed("schema.numeric.age", [17, 17]), "schema.numeric.age", "low < high"),
        (changed("schema.numeric.age", [0, float("inf")]), "schema.numeric.age", "finite"),
        (changed("schema.numeric.age", [float("nan"), 1]), "schema.numeric.age", "finite"),
        (changed("schema.numeric.age", [False, True]), "schema.numeric.age", "finite numbers"),
        (changed("schema.numeric.age", ["17", "90"]), "schema.numeric.age", "finite numbers"),
        (changed("schema.numeric.age", [17]), "schema.numeric.age", r"\[low, high\]"),
        (changed("schema.numeric.age", None), "schema.numeric.age", r"\[low, high\]"),
        (changed("schema.numeric", [["age", 17, 90]]), "schema.numeric", "expected an object"),
        (changed("schema.categorical.sex", []), "schema.categorical.sex", "at least 1 categories"),
        (changed("schema.categorical.sex", ["F", "F"]), "schema.categorical.sex[1]", "listed twice"),
        (changed("schema.categorical.sex", ["F", ""]), "schema.categorical.sex[1]", "non-empty string"),
        (changed("schema.categorical.sex", "Female"), "schema.categorical.sex", "expected a list"),
        (changed("schema.categorical.income", ["a"]), "schema.categorical.income", "already declared as schema.target"),
        (changed("schema.categorical.age", ["a"]), "schema.categorical.age", "already declared as schema.numeric.age"),
        (SCHEMA | {"numeric": {}, "categorical": {}}, "schema", "at least one feature column"),
        (changed("schema.test_fraction", 0), "schema.test_fraction", r"a number in \(0, 0\.9\]"),
        (changed("schema.test_fraction", 0.95), "schema.test_fraction", r"\(0, 0\.9\]"),
        (changed("schema.test_fraction", "0.2"), "schema.test_fraction", r"\(0, 0\.9\]"),
        (changed("schema.test_fraction", True), "schema.test_fraction", r"\(0, 0\.9\]"),
        (changed("schema.categorical.zip", [str(i) for i in range(20_000)]), "schema", "more than the limit"),
    ],
)
def test_invalid_schemas_name_the_field(raw, field, message):
    with pytest.raises(CsvSchemaError, match=message) as caught:
        parse_csv_schema(raw)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert isinstance(caught.value, ValueError)


# ---------------------------------------------------------------- encoding


def test_values_are_clipped_to_declared_bounds_and_one_hot_encoded(tmp_path):
    rows = encoded_rows(upload(tmp_path), schema())
    np.testing.assert_allclose(rows[39], [(39 - 17) / 73, (40 - 1) / 98, 0, 1, 0, 1], rtol=1e-6)
    np.testing.assert_allclose(rows[50], [(50 - 17) / 73, (13 - 1) / 98, 1, 0, 1, 0], rtol=1e-6)
    np.testing.assert_allclose(rows[17], [0, 1, 0, 1, 0, 0], atol=1e-7)  # Self-emp is not declared: zeros
    np.testing.assert_allclose(rows[90], [1, 0, 1, 0, 0, 0], atol=1e-7)  # an empty workclass: zeros


def test_a_row_outside_the_bounds_is_clipped_and_moves_no_other_row(tmp_path):
    def all_rows(path: Path) -> list[tuple[float, ...]]:
        data = load_csv(path, schema())
        return sorted(map(tuple, np.vstack([data.x_train, data.x_test]).tolist()))

    base = all_rows(upload(tmp_path, name="base.csv"))
    extreme = "40000,Private,Male,-7,q,>50K"  # age clips to 90 → 1.0, hours to 1 → 0.0
    more = all_rows(upload(tmp_path, [*ROWS, extreme], name="more.csv"))
    assert more == sorted([*base, (1.0, 0.0, 0.0, 1.0, 1.0, 0.0)])


def test_labels_dtypes_and_the_public_split(tmp_path):
    rows = [f"{17 + i},Private,Male,40,,{'>50K' if i % 3 == 0 else '<=50K'}" for i in range(50)]
    parsed = schema(test_fraction=0.3)
    data = load_csv(upload(tmp_path, rows), parsed)
    assert data.x_train.shape == (35, 6) and data.x_test.shape == (15, 6) and data.n_classes == 2
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int64 and data.image_shape is None
    ages = np.round(np.concatenate([data.x_train[:, 0], data.x_test[:, 0]]) * 73 + 17).astype(int)
    labels = np.concatenate([data.y_train, data.y_test])
    assert sorted(ages.tolist()) == list(range(17, 67))
    assert labels.tolist() == [int((age - 17) % 3 == 0) for age in ages]
    # The split depends only on the number of rows: other content, same positions in the test split.
    other = load_csv(upload(tmp_path, [r.replace("Male", "Female") for r in rows], name="other.csv"), parsed)
    np.testing.assert_array_equal(other.x_test[:, 0], data.x_test[:, 0])
    again = load_csv(tmp_path / "upload.csv", parsed)
    np.testing.assert_array_equal(again.x_train, data.x_train)


def test_csv_syntax_quotes_bom_crlf_blank_lines_and_spaces(tmp_path):
    path = tmp_path / "excel.csv"
    text = "\ufeffage , workclass,sex,hours-per-week,notes,income\r\n\r\n"
    text += ' 39 ,"State-gov", Male ,40,"a, ""quoted""\nnote",<=50K\r\n'
    path.write_bytes(text.encode("utf-8") + b"50,Private,Female,13,,>50K\r\n" * 4)
    data = load_csv(path, schema())
    assert len(data.x_train) + len(data.x_test) == 5
    rows = np.vstack([data.x_train, data.x_test])
    assert any(np.allclose(r, [(39 - 17) / 73, (40 - 1) / 98, 0, 1, 0, 1]) for r in rows)


def test_dataset_info_and_load_dataset_for_csv_names(tmp_path):
    path = upload(tmp_path)
    name = f"csv:{path}"
    info = dataset_info(name, schema=SCHEMA)  # a raw mapping is validated on the way
    assert (info.name, info.n_train, info.n_test, info.n_classes, info.n_features) == (name, 4, 1, 2, 6)
    assert info.source == "your upload" and info.image_shape is None and "\n" not in info.description
    assert csv_dataset_info(path, schema()).n_train == 4
    data = load_dataset(name, schema=schema())
    assert data.name == name and data.x_train.shape == (4, 6)
    with pytest.raises(DatasetError, match="needs a schema"):
        load_dataset(name)
    with pytest.raises(CsvSchemaError):
        dataset_info(name, schema={"target": "income"})
    with pytest.raises(DatasetError, match="give the CSV file's path"):
        dataset_info("csv:", schema=SCHEMA)
    with pytest.raises(DatasetError, match=r"missing\.csv: cannot read the CSV file"):
        dataset_info(f"csv:{tmp_path / 'missing.csv'}", schema=SCHEMA)


def test_file_sha256(tmp_path):
    path = upload(tmp_path)
    assert file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert file_sha256(str(path)) == file_sha256(path)


# ---------------------------------------------------------------- malformed files and cells


def test_declared_columns_must_exist_in_the_header(tmp_path):
    path = upload(tmp_path)
    with pytest.raises(DatasetError, match=r"upload\.csv: no column 'race' in the header"):
        csv_dataset_info(path, schema(categorical={"race": ["White"]}))
    with pytest.raises(DatasetError, match=r"upload\.csv: no column 'label' in the header"):
        load_csv(path, schema(target="label"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", r"the file is empty"),
        (b"\n\n", r"the file is empty"),
        ((HEADER + "\n").encode(), r"a header but no data rows"),
        ((HEADER + "\n" + ROWS[0] + "\n39,Private\n").encode(), r"line 3 has 2 fields, expected 6"),
        ((HEADER + "\n" + ROWS[0] + "\n").encode() + b"39,Priv\xe9,Male,40,,<=50K\n", r"line 3 is not valid UTF-8"),
        (b"age,sex,age,income\n1,Male,2,<=50K\n", r"line 1: duplicate column name 'age' in the header \(columns 1 and"),
        ((HEADER + "\n" + ROWS[0] + '\n39,"Private,Male,40,,<=50K\n').encode(), r"line 3: malformed CSV"),
        ((HEADER + "\n" + ROWS[0] + "\n").encode(), r"1 data rows are too few for a train and a test split"),
    ],
)
def test_malformed_files_name_the_file_and_the_problem(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(DatasetError, match=rf"bad\.csv: .*{message}"):
        csv_dataset_info(path, schema())
    with pytest.raises(DatasetError, match=rf"bad\.csv: .*{message}"):
        load_csv(path, schema())


def test_files_over_the_size_limit_are_refused(tmp_path, monkeypatch):
    assert tabular_csv_module.MAX_CSV_BYTES == 200_000_000
    path = upload(tmp_path)
    monkeypatch.setattr(tabular_csv_module, "MAX_CSV_BYTES", 100)
    with pytest.raises(DatasetError, match=r"upload\.csv: the file has \d+ bytes, more than the limit of 100"):
        load_csv(path, schema())
    with pytest.raises(DatasetError, match="more than the limit"):
        infer_csv_schema(path, "income")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("39,Private,Male,,x,<=50K", r"line 3, column 'hours-per-week': the numeric cell is empty"),
        ("39,Private,Male,forty,x,<=50K", r"line 3, column 'hours-per-week': the numeric cell holds 'forty'"),
        ("nan,Private,Male,40,x,<=50K", r"line 3, column 'age': the numeric cell holds 'nan', not a finite number"),
        ("39,Private,Male,40,x,>50K.", r"line 3: target value '>50K\.' is not one of the declared classes"),
        ("39,Private,Male,40,x,", r"line 3: target value '' is not one of the declared classes"),
    ],
)
def test_bad_cells_name_file_line_and_column(tmp_path, row, message):
    path = upload(tmp_path, [ROWS[0], row, *ROWS[1:]])
    with pytest.raises(DatasetError, match=rf"upload\.csv: {message}"):
        load_csv(path, schema())


# ---------------------------------------------------------------- the suggested schema


def test_infer_suggests_numeric_and_categorical_columns_without_bounds(tmp_path):
    rows = [
        f"{20 + i},{'Private' if i % 2 else 'State-gov'},Male,{i % 7 + 1},note {i},{'>50K' if i % 2 else '<=50K'}"
        for i in range(30)
    ]
    rows.append("55,,Female,3,,<=50K")
    suggestion = infer_csv_schema(upload(tmp_path, rows), "income")
    assert suggestion == {
        "target": "income",
        "classes": ["<=50K", ">50K"],
        "numeric": {"age": [None, None], "hours-per-week": [None, None]},
        "categorical": {"workclass": ["Private", "State-gov"], "sex": ["Male"]},
        "test_fraction": 0.2,
    }  # 'notes' has 30 distinct free-text values: left out; 'Female' is one row's: withheld
    with pytest.raises(CsvSchemaError, match=r"schema\.numeric\.age"):
        parse_csv_schema(suggestion)  # the user must declare the bounds
    suggestion["numeric"] = {"age": [17, 90], "hours-per-week": [1, 99]}
    assert parse_csv_schema(suggestion).n_features == 5
    wide = csv_schema_suggestion(tmp_path / "upload.csv", "income", max_categories=40)
    assert "notes" not in wide.schema["categorical"] and wide.withheld_levels == {"sex": 1, "notes": 30}
    every = infer_csv_schema(tmp_path / "upload.csv", "income", max_categories=40, min_rows=1)  # no threshold
    assert every["categorical"]["notes"][:2] == ["note 0", "note 1"]
    assert every["categorical"]["sex"] == ["Female", "Male"]


def test_infer_orders_numeric_labels_numerically_and_checks_the_target(tmp_path):
    path = write(tmp_path, ["x,y,code", *[f"{i},{i % 11},{'A' if i % 2 else ''}" for i in range(40)]])
    suggestion = infer_csv_schema(path, "y", min_rows=1)
    assert suggestion["classes"] == [str(i) for i in range(11)]
    assert suggestion["numeric"] == {"x": [None, None]}
    assert suggestion["categorical"] == {"code": ["A"]}  # empty cells: not numeric, not a category
    assert infer_csv_schema(path, "y")["classes"] == []  # 3 or 4 rows per class: all withheld at the default 10
    with pytest.raises(DatasetError, match=r"upload\.csv: the target column 'x' has more than 20 distinct values"):
        infer_csv_schema(path, "x")
    with pytest.raises(DatasetError, match=r"upload\.csv: no column 'label' in the header"):
        infer_csv_schema(path, "label")
    constant = write(tmp_path, ["x,y", "1,a", "2,a"], name="constant.csv")
    with pytest.raises(DatasetError, match="fewer than 2 distinct"):
        infer_csv_schema(constant, "y")
    with pytest.raises(ValueError, match="min_rows must be an integer ≥ 1"):
        infer_csv_schema(path, "y", min_rows=0)


def test_rare_classes_and_levels_are_withheld_from_the_suggestion_and_counted(tmp_path):
    """A value fewer than RARE_LEVEL_ROWS rows have is never suggested (it would travel into every spec and
    export and single those rows out); one exactly that many rows have is."""
    assert RARE_LEVEL_ROWS == 10
    countries = ["France"] * 12 + ["Germany"] * 10 + ["Liechtenstein"] * 9 + ["Vatican"]  # 32 rows
    labels = ["low"] * 20 + ["high"] * 10 + ["unique-label", "other-label"]
    badges = [f"badge-{i % 4}" for i in range(32)]  # 8 rows each: every level rare
    rows = [f"{i},{c},{b},{y}" for i, (c, b, y) in enumerate(zip(countries, badges, labels, strict=True))]
    path = write(tmp_path, ["id,country,badge,label", *rows])
    found = csv_schema_suggestion(path, "label")
    assert found.schema["classes"] == ["high", "low"] and found.withheld_classes == 2
    assert found.schema["categorical"] == {"country": ["France", "Germany"]}  # badge: every level withheld
    assert found.withheld_levels == {"country": 2, "badge": 4} and found.min_rows == 10
    shown = json.dumps(found.schema)
    for rare in ("Liechtenstein", "Vatican", "unique-label", "other-label", "badge-"):
        assert rare not in shown, rare
    assert found.schema == infer_csv_schema(path, "label")
    lower = csv_schema_suggestion(path, "label", min_rows=9)  # Liechtenstein's 9 rows now reach the threshold
    assert lower.schema["categorical"]["country"] == ["France", "Germany", "Liechtenstein"]
    assert lower.withheld_levels == {"country": 1, "badge": 4}
