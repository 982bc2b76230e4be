"""Benchmark harness for the DP-SGD engine: `python -m bench [--quick] [--json PATH]` from the repo root.

Suites return figures as plain records — `name`, `value`, `unit`, and for ratios `numerator` and
`denominator` (the names of the two figures compared) — which `__main__` prints as a markdown table
and optionally writes as a JSON list.
"""
