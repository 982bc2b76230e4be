"""The fixed-shape, masked DP-SGD stages a CUDA graph captures (`step_graph`) compute the eager stages' update
and diagnostics for the same lot and noise. On the CPU the graph's body runs eagerly (no capture), which is what
these tests check; the capture and replay themselves are checked on a GPU by `bench.gpu_check`.

Tolerances (float64): each coordinate of a clipped sum adds at most `capacity` terms of size ≤ C; two summation
orders of them differ by at most 2·γ_cap·cap·C with γ_k = k·u/(1 − k·u) (Higham 2002, §3.1), u = 2⁻⁵³; the noise
add and the 1/L scale round both sides alike to within 2u of the result."""

import math

import pytest
import torch
from scipy import stats

from engine.training import parse_spec, plan_spec, train
from engine.training.algorithms import dpsgd
from engine.training.algorithms.dpsgd import clip_and_accumulate, dpsgd_step
from engine.training.algorithms.dpsgd_graph import StepGraph, lot_capacity, step_graph_for
from engine.training.clipping import BookKeepingClipper, MaterializedClipper, per_layer_thresholds
from engine.training.models.architectures import build_model
from engine.training.noise import add_gaussian_noise
from tests.engine.training.algorithms.test_dpsgd import make_plan
from tests.helpers import fast_spec

U64 = 2.0**-53
MODELS = [
    ("logreg", {}, 12),
    ("mlp", {"hidden": (7,)}, 12),
    ("cnn", {"image_shape": (1, 28, 28)}, 784),
]


def gamma(k: int) -> float:
    return k * U64 / (1 - k * U64)


def sum_tolerance(capacity: int, clip_norm: float, inv_lot: float) -> float:
    return (2 * gamma(capacity) * capacity * clip_norm + 4 * U64 * (capacity * clip_norm + 10.0)) * inv_lot


def problem(name: str, options: dict, n_features: int, rows: int = 48, seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(name, n_features=n_features, n_classes=3, **options).double()
    x = torch.randn(rows, n_features, dtype=torch.float64)
    y = torch.randint(0, 3, (rows,))
    return model, x, y


def drawn_noise(params, std: float, seed: int) -> list[torch.Tensor]:
    return add_gaussian_noise([torch.zeros_like(p) for p in params], std, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("per_layer", [False, True], ids=["flat", "per layer"])
@pytest.mark.parametrize(("name", "options", "n_features"), MODELS, ids=[m[0] for m in MODELS])
def test_the_padded_masked_stages_equal_the_eager_stages(name, options, n_features, per_layer):
    model, x, y = problem(name, options, n_features)
    clipper = BookKeepingClipper(model)
    clip_norm, inv_lot, capacity = 0.8, 1.0 / 20, 40
    thresholds = per_layer_thresholds(clip_norm, len(clipper.layers)) if per_layer else clip_norm
    graph = StepGraph(clipper, x, y, capacity=capacity, inv_lot=inv_lot)
    assert not graph.replayed.capture  # the CPU runs the body eagerly
    for seed, lot in enumerate([torch.arange(0, 48, 2), torch.tensor([3, 40, 41, 7]), torch.arange(8, 48)]):
        noise = drawn_noise(clipper.params, 1.3, seed)
        got = graph.run(x, y, lot, thresholds, [n.clone() for n in noise])
        eager = clip_and_accumulate(clipper, x[lot], y[lot], thresholds, None)
        expected = [(g + n) * inv_lot for g, n in zip(eager.grads, noise, strict=True)]
        tolerance = sum_tolerance(capacity, clip_norm, inv_lot)
        for a, b in zip(got.grads, expected, strict=True):
            assert (a - b).abs().max().item() <= tolerance
        assert got.norms.shape == (len(lot),) and got.clipped.shape == (len(lot),)
        torch.testing.assert_close(got.norms, eager.norms, rtol=8 * gamma(n_features * 3), atol=0.0)
        assert torch.equal(got.clipped, eager.clipped)
        torch.testing.assert_close(got.loss_sum, eager.loss_sum, rtol=2 * gamma(capacity), atol=0.0)
        assert int(got.correct) == int(eager.correct)


def test_padding_rows_add_exactly_nothing_and_never_keep_an_earlier_lot():
    """A small lot after a large one gives bit for bit what a fresh graph gives it: the rows after the lot are
    zeros again, and their clip factors are multiplied by 0."""
    model, x, y = problem("mlp", {"hidden": (7,)}, 12)
    x = x * 50  # large rows: any left over in the padding would change the sum
    clipper = BookKeepingClipper(model)
    used = StepGraph(clipper, x, y, capacity=40, inv_lot=0.1)
    noise = drawn_noise(clipper.params, 0.0, 0)
    used.run(x, y, torch.arange(40), 1.0, noise)
    small = torch.tensor([5, 9, 30])
    after = used.run(x, y, small, 1.0, noise)
    assert torch.equal(used.rows.x[3:], torch.zeros_like(used.rows.x[3:])) and used.rows.mask.sum().item() == 3
    fresh = StepGraph(clipper, x, y, capacity=40, inv_lot=0.1).run(x, y, small, 1.0, noise)
    assert all(torch.equal(a, b) for a, b in zip(after.grads, fresh.grads, strict=True))
    empty = used.run(x, y, torch.tensor([], dtype=torch.long), 1.0, noise)
    assert all(torch.equal(g, torch.zeros_like(g)) for g in empty.grads)
    assert float(empty.loss_sum) == 0.0 and int(empty.correct) == 0 and empty.norms.numel() == 0


def test_a_step_through_the_graph_is_the_eager_step(monkeypatch):
    """dpsgd_step with a graph: the same lot and noise streams, drawn the same number of times, and the same update
    within the float64 bound; a lot over the capacity runs the eager stages (no truncation)."""
    plan = make_plan(n_train=40, lot_size=10, steps=6, noise_phases=((1.0, 6),))
    results = {}
    real = dpsgd.eager_stages
    for mode in ("eager", "graph", "tiny graph"):
        model, x, y = problem("mlp", {"hidden": (7,)}, 12, rows=40)
        clipper = BookKeepingClipper(model)
        optimizer = torch.optim.SGD(clipper.params, lr=0.5)
        graph = {
            "eager": None,
            "graph": StepGraph(clipper, x, y, capacity=lot_capacity(40, plan.sampling_rate), inv_lot=0.1),
            "tiny graph": StepGraph(clipper, x, y, capacity=8, inv_lot=0.1),
        }[mode]
        sampling, noise = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
        eager_calls: list[int] = []

        def counted(calls=eager_calls, **kw):
            calls.append(len(kw["x"]))
            return real(**kw)

        monkeypatch.setattr(dpsgd, "eager_stages", counted)
        sizes = [
            dpsgd_step(
                step=step,
                clipper=clipper,
                optimizer=optimizer,
                x=x,
                y=y,
                plan=plan,
                physical_batch_size=None,
                sampling_generator=sampling,
                noise_generator=noise,
                step_graph=graph,
            ).lot_size
            for step in range(1, plan.steps + 1)
        ]
        results[mode] = (sizes, eager_calls, [p.detach().clone() for p in clipper.params])
        results[mode + " streams"] = (torch.rand(1, generator=sampling), torch.rand(1, generator=noise))
    eager_sizes = results["eager"][0]
    assert results["graph"][0] == results["tiny graph"][0] == eager_sizes
    assert results["graph"][1] == []  # every lot fitted
    assert results["tiny graph"][1] == [n for n in eager_sizes if n > 8] and results["tiny graph"][1]
    assert results["eager streams"] == results["graph streams"] == results["tiny graph streams"]
    bound = plan.steps * 0.5 * sum_tolerance(40, plan.clip_norm, 0.1) * 4  # six updates, each within its bound
    for mode in ("graph", "tiny graph"):
        for a, b in zip(results[mode][2], results["eager"][2], strict=True):
            assert (a - b).abs().max().item() <= bound


@pytest.mark.parametrize(("n", "q"), [(60_000, 256 / 60_000), (60_000, 1024 / 60_000), (1797, 0.1), (400, 0.5)])
def test_the_capacity_overflows_with_probability_below_1e_4(n, q):
    capacity = lot_capacity(n, q)
    assert stats.binom.sf(capacity, n, q) < 1e-4  # exact binomial tail
    assert capacity % 8 == 0 or capacity == n
    assert capacity <= n * q + 5 * math.sqrt(n * q * (1 - q)) + 9  # and not much more padding than that


def test_a_graph_is_made_only_on_a_gpu_for_the_book_keeping_clipper():
    model, x, y = problem("mlp", {"hidden": (7,)}, 12)
    common = dict(n_train=48, sampling_rate=0.25, lot_size=12, physical_batch_size=None)
    assert step_graph_for(BookKeepingClipper(model), x, y, **common) is None  # the CPU: eager stages
    if torch.cuda.is_available():
        cuda = model.cuda()
        made = step_graph_for(BookKeepingClipper(cuda), x.cuda(), y.cuda(), **common)
        assert made is not None and made.rows.capacity == lot_capacity(48, 0.25)
        assert step_graph_for(MaterializedClipper(cuda), x.cuda(), y.cuda(), **common) is None
        small_batches = {**common, "physical_batch_size": 8}
        assert step_graph_for(BookKeepingClipper(cuda), x.cuda(), y.cuda(), **small_batches) is None


def test_a_run_trained_through_the_graph_body_keeps_its_lots_noise_and_epsilon(monkeypatch):
    """The trainer with a `StepGraph` (its body run eagerly on the CPU) against the eager stages: the same lot sizes
    and ε at every step, the graph used at every step of an unaudited DP-SGD run."""
    spec = parse_spec(fast_spec(epochs=0.5, model="mlp", hidden=[16]))
    plan = plan_spec(spec)
    eager_records, graph_records, made = [], [], []

    def on_cpu(clipper, x, y, *, n_train, sampling_rate, lot_size, physical_batch_size):
        made.append(StepGraph(clipper, x, y, capacity=lot_capacity(n_train, sampling_rate), inv_lot=1.0 / lot_size))
        return made[-1]

    train(spec, plan=plan, on_step=eager_records.append, device=torch.device("cpu"))
    monkeypatch.setattr(dpsgd, "step_graph_for", on_cpu)
    runs = []
    real_run = StepGraph.run
    monkeypatch.setattr(StepGraph, "run", lambda self, *a: runs.append(1) or real_run(self, *a))
    train(spec, plan=plan, on_step=graph_records.append, device=torch.device("cpu"))
    assert len(made) == 1 and len(runs) == plan.steps == len(graph_records) - 1  # and the step-0 record
    assert [r.lot_size for r in graph_records] == [r.lot_size for r in eager_records]
    assert [r.epsilon for r in graph_records] == [r.epsilon for r in eager_records]
    first_loss = (graph_records[1].train_loss, eager_records[1].train_loss)  # same parameters, same lot
    assert first_loss[0] == pytest.approx(first_loss[1], rel=2 * 64 * 2.0**-24)
