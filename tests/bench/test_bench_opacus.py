"""The Opacus comparison does the same work on both sides, and the memory probe's plumbing works."""

import pytest
import torch

from bench import memory, opacus_compare
from bench.timing import ratio_record

pytest.importorskip("opacus", reason="Opacus is a benchmark-only dependency; make test installs it")
# Opacus' hooks on a first layer whose input needs no gradient: expected, harmless
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")


@pytest.mark.parametrize("label", ["mlp1000", "cnn"])
@pytest.mark.parametrize("mode", opacus_compare.OPACUS_MODES)
def test_engine_clipped_sum_equals_opacus_summed_clipped_gradient(label, mode):
    """Noise 0, same weights, C = median per-example norm: the engine's Σᵢ clip(gᵢ) equals Opacus'
    gradient times its expected batch size (which its mean reduction divides by)."""
    case = next(c for c in opacus_compare.MODELS if c.label == label)
    torch.manual_seed(0)
    base = case.build()
    x, y = opacus_compare.random_batch(case, 32, torch.device("cpu"))
    assert opacus_compare.agreement(base, x, y, mode) < 1e-5


def test_memory_child_reports_what_one_step_adds():
    settings = memory.Settings(batch=64, modes=("bookkeeping",), steps=1, timeout_s=120)
    result = memory.measure_in_subprocess("logreg", "bookkeeping", settings, torch.device("cpu"))
    assert result["baseline_bytes"] > 0
    assert result["step_bytes"] == result["peak_bytes"] - result["baseline_bytes"] >= 0


def test_markdown_tables_name_the_best_opacus_mode():
    prefix = "opacus/mlp1000/b256"
    records = [
        {"name": f"{prefix}/{mode}", "value": value, "unit": "steps/s"}
        for mode, value in [("nonprivate", 100.0), ("bookkeeping", 60.0), ("opacus_ghost", 30.0)]
    ]
    records.append(ratio_record(prefix, "bookkeeping", "nonprivate", [0.6, 0.6, 0.6, 0.6, 0.6]))
    records.append(
        ratio_record(prefix, "bookkeeping", "opacus_ghost", [1.5, 2.0, 2.0, 2.0, 2.5], best_opacus="opacus_ghost")
    )
    table = opacus_compare.markdown(records)
    assert "0.60× ±0%" in table and "unsupported" in table  # hooks etc. not run
    assert "2.00× ±15% ⚠ (ghost)" in table, table  # the self-check flags pairs that disagree by more than ±10%

    mem = [
        {"name": "memory/cnn/b1024/nonprivate", "value": 80.0, "unit": "MB"},
        {"name": "memory/cnn/b1024/bookkeeping", "value": 100.0, "unit": "MB"},
        {"name": "memory/cnn/b1024/bookkeeping_vs_nonprivate", "value": 1.25, "unit": "x"},
    ]
    assert "| cnn/b1024 | 80.0 | 100.0 |" in memory.markdown(mem)
