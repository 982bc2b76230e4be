"""`algorithms`, `datasets`, `models`, `accountants` and `baseline`: what the engine offers (each listing reads its
registry), and the non-private reference."""

import argparse
import time

from cache import Store
from engine.cli.common import emit
from engine.jobs.settings import default_data_dirs
from engine.privacy import describe_accountants
from engine.training import describe_algorithms, load_dataset
from engine.training.algorithms.baselines import sklearn_logistic_regression
from engine.training.datasets import describe_datasets
from engine.training.models.registry import describe_models


def cmd_algorithms(args: argparse.Namespace, store: Store | None) -> None:
    _listing(describe_algorithms(), args.json)


def cmd_datasets(args: argparse.Namespace, store: Store | None) -> None:
    _listing(describe_datasets(), args.json)


def cmd_models(args: argparse.Namespace, store: Store | None) -> None:
    _listing(describe_models(), args.json)


def cmd_accountants(args: argparse.Namespace, store: Store | None) -> None:
    _listing(describe_accountants(), args.json)


def _listing(items: list[dict], as_json: bool) -> None:
    if as_json:
        emit(items)
        return
    width = max(len(i["name"]) for i in items)
    for item in items:
        kind = f"[{item['kind']}] " if "kind" in item else ""
        source = f" ({item['source']})" if item.get("source") else ""
        print(f"{item['name']:<{width}}  {kind}{item['description']}{source}")


def cmd_baseline(args: argparse.Namespace, store: Store | None) -> None:
    data = load_dataset(args.dataset, default_data_dirs())
    started = time.perf_counter()
    result = sklearn_logistic_regression(data)
    emit(
        {
            "dataset": args.dataset,
            "baseline": result.name,
            "test_accuracy": result.test_accuracy,
            "majority_class_accuracy": result.majority_class_accuracy,
            "seconds": time.perf_counter() - started,
            "private": False,
        }
    )


def register(sub: argparse._SubParsersAction) -> None:
    for name, func, help_text in (
        ("algorithms", cmd_algorithms, "the algorithms, preprocessing, models and update rules the engine has"),
        ("datasets", cmd_datasets, "the datasets the engine can load"),
        ("models", cmd_models, "the models a run can train"),
        ("accountants", cmd_accountants, "the privacy accountants every run's ε is computed by"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func, needs_store=False)

    p = sub.add_parser("baseline", help="scikit-learn's non-private logistic regression on a dataset")
    p.add_argument("dataset")
    p.add_argument("--json", action="store_true", help="accepted for uniformity: the output is always JSON")
    p.set_defaults(func=cmd_baseline, needs_store=False)
