"""The GPU checks' plumbing on a machine without a GPU (CI's): the command refuses to run, and a check that
finds no captured graph fails (the checks themselves run on a lent GPU: docs/bench/gpu-h200.md)."""

import torch

from bench import gpu_check


def test_without_cuda_the_command_says_so_and_exits_2(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    assert not (tmp_path / "gpu.json").exists()


def test_a_graph_check_fails_where_nothing_was_captured(monkeypatch):
    monkeypatch.setattr(gpu_check, "CASES", gpu_check.CASES[:1])  # logistic regression: cheap on a CPU
    records = gpu_check.graph_checks(torch.device("cpu"))  # the CPU runs the graph's body eagerly: no capture
    assert len(records) == 2 and all(r["value"] == 0.0 for r in records)
    assert all("captures 0" in r["compared"] for r in records)
    assert "replay vs eager body 0.00e+00" in records[0]["compared"]  # the body itself: the eager stages' result
