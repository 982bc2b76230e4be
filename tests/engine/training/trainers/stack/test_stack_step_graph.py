"""A stack's fixed-shape, masked stages (`stacked.step_graph`, captured in a CUDA graph on a GPU) compute what the
eager stacked stages compute for the same lot and noise; the trainer keeps the lots, noise streams and ε of the
eager stack. On the CPU the graph's body runs eagerly (no capture); `bench.gpu_check` checks capture and replay.
Tolerances as in `tests.engine.training.algorithms.test_dpsgd_graph.py` (float64, Higham 2002 §3.1)."""

import pytest
import torch

from engine.training import StackMember, parse_spec, plan_spec, train_stack
from engine.training.algorithms.dpsgd_graph import lot_capacity
from engine.training.models.architectures import build_model
from engine.training.trainers.stack import StackedClipper
from engine.training.trainers.stack import stack_run as stacked_training
from engine.training.trainers.stack.clipping import clipped_sum_in_chunks
from engine.training.trainers.stack.stack_graph import StackStepGraph, stack_graph_for
from tests.engine.training.algorithms.test_dpsgd_graph import sum_tolerance
from tests.helpers import fast_spec


def sigma_spec(sigma: float) -> dict:
    raw = fast_spec(epochs=1, model="mlp", hidden=[16], noise_multiplier=sigma)
    raw.pop("target_epsilon")
    return raw


def stack(name: str, k: int, **kwargs) -> StackedClipper:
    models = []
    for seed in range(k):
        torch.manual_seed(seed)
        models.append(build_model(name, **kwargs).double())
    return StackedClipper(models)


@pytest.mark.parametrize("per_member", [False, True], ids=["shared inputs", "inputs per member"])
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("logreg", dict(n_features=12, n_classes=3)), ("mlp", dict(n_features=12, n_classes=3, hidden=(7,)))],
)
def test_the_padded_masked_stack_stages_equal_the_eager_ones(name, kwargs, per_member):
    clipper = stack(name, 3, **kwargs)
    torch.manual_seed(5)
    x = torch.randn((3, 48, 12) if per_member else (48, 12), dtype=torch.float64) * 3
    y = torch.randint(0, 3, (48,))
    clip_norms, inv_lot, capacity = [0.1, 1.0, 50.0], 1.0 / 20, 40
    graph = StackStepGraph(clipper, x, y, capacity=capacity, per_member=per_member, inv_lot=inv_lot)
    assert not graph.replayed.capture
    for lot in (torch.arange(0, 48, 2), torch.tensor([3, 40, 41]), torch.arange(8, 48)):
        noise = [[torch.randn_like(clipper.params[n][0]) for n in clipper.names] for _ in range(3)]
        got = graph.run(x, y, lot, clip_norms, noise)
        assert (
            graph.rows.x.narrow(graph.rows.axis, len(lot), capacity - len(lot)).abs().sum().item() == 0.0
        )  # padding: zeros
        rows = x[:, lot] if per_member else x[lot]
        eager = clipped_sum_in_chunks(clipper, rows, y[lot], clip_norms, None, per_member=per_member)
        for i, n in enumerate(clipper.names):
            expected = (eager.grads[n] + torch.stack([noise[k][i] for k in range(3)])) * inv_lot
            assert (got.grads[n] - expected).abs().max().item() <= sum_tolerance(capacity, 50.0, inv_lot)
        assert got.norms.shape == eager.norms.shape == (3, len(lot))
        torch.testing.assert_close(got.norms, eager.norms, rtol=1e-13, atol=0.0)
        assert torch.equal(got.clipped, eager.clipped) and torch.equal(got.correct, eager.correct)
        torch.testing.assert_close(got.loss_sum, eager.loss_sum, rtol=1e-13, atol=0.0)


def test_no_graph_off_a_gpu_or_when_the_lot_is_split():
    clipper = stack("logreg", 2, n_features=12, n_classes=3)
    x, y = torch.randn(48, 12, dtype=torch.float64), torch.randint(0, 3, (48,))
    common = dict(per_member=False, n_train=48, sampling_rate=0.25, lot_size=12, physical_batch_size=None)
    assert stack_graph_for(clipper, x, y, **common) is None
    if torch.cuda.is_available():
        cuda = stack("logreg", 2, n_features=12, n_classes=3)
        cuda.params = {n: p.cuda() for n, p in cuda.params.items()}
        made = stack_graph_for(cuda, x.cuda(), y.cuda(), **common)
        assert made is not None and made.rows.capacity == lot_capacity(48, 0.25)
        assert stack_graph_for(cuda, x.cuda(), y.cuda(), **{**common, "physical_batch_size": 8}) is None


@pytest.mark.parametrize("pca", [False, True], ids=["shared inputs", "DP-PCA inputs per member"])
def test_a_stack_trained_through_the_graph_body_keeps_its_lots_noise_and_epsilon(monkeypatch, pca):
    """`train_stack` with a `StackStepGraph` (its body run eagerly on the CPU) against the eager stages: the same lot
    sizes and ε for every member at every step and the same first-step losses; a member that leaves gets the
    members left a new graph, over their own inputs when each member has its own DP-PCA projection."""
    extra = [dict(pca_dims=16, pca_noise=4.0 * (k + 1)) if pca else {} for k in range(3)]
    specs = [parse_spec({**sigma_spec(sigma), **e}) for sigma, e in zip((1.0, 2.0, 3.0), extra, strict=True)]
    members = [StackMember(spec=s, plan=plan_spec(s)) for s in specs]
    calls = {"n": 0}

    def stop_second() -> bool:
        calls["n"] += 1
        return calls["n"] == 4

    eager: list[list] = [[], [], []]
    train_stack(members, on_step=[e.append for e in eager], should_stop=[None, stop_second, None])
    made, runs = [], []

    def on_cpu(clipper, x, y, *, per_member, n_train, sampling_rate, lot_size, physical_batch_size):
        capacity = lot_capacity(n_train, sampling_rate)
        made.append(StackStepGraph(clipper, x, y, capacity=capacity, per_member=per_member, inv_lot=1.0 / lot_size))
        return made[-1]

    monkeypatch.setattr(stacked_training, "stack_graph_for", on_cpu)
    real_run = StackStepGraph.run
    monkeypatch.setattr(StackStepGraph, "run", lambda self, *a: runs.append(1) or real_run(self, *a))
    calls["n"] = 0
    graphed: list[list] = [[], [], []]
    results = train_stack(members, on_step=[g.append for g in graphed], should_stop=[None, stop_second, None])
    steps = members[0].plan.steps
    assert [r.steps for r in results] == [steps, 4, steps]
    assert len(made) == 2 and len(runs) == steps  # a new graph when the second member left
    assert [g.per_member for g in made] == [pca, pca]
    if pca:
        assert [g.rows.x.shape[0] for g in made] == [3, 2]  # each graph over the inputs of the members it trains
    for mine, theirs in zip(graphed, eager, strict=True):
        assert [r.lot_size for r in mine] == [r.lot_size for r in theirs]
        assert [r.epsilon for r in mine] == [r.epsilon for r in theirs]
        assert mine[1].train_loss == pytest.approx(theirs[1].train_loss, rel=2 * 64 * 2.0**-24)
