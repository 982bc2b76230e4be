"""Vectorized sweeps (`engine.training.trainers.stack`): the stacked clipped sums equal one book-keeping clipper per
member, the stacked update rules equal torch.optim's, the lead member follows its separate run, every member
draws its own noise stream (its separate run's) at the stated scale, lots are shared, cancels leave the
stack, and the joint ledger is the sampled Gaussian at σ_joint. (Noise independence, release mode and the
joint ε against dp-accounting: tests/engine/training/test_noise_streams.py.)"""

import dataclasses
import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant
from scipy import stats

from engine.privacy import DEFAULT_ORDERS, rdp_epsilon
from engine.training import (
    StackError,
    StackMember,
    load_dataset,
    noise_ahead,
    parse_spec,
    pick_device,
    plan_spec,
    stack_key,
    train,
    train_stack,
)
from engine.training import noise as noise_module
from engine.training.algorithms.optimizers import OptimizerName, make_optimizer
from engine.training.clipping import BookKeepingClipper, UnsupportedModelError
from engine.training.inputs import features
from engine.training.models.architectures import build_model
from engine.training.noise import random_streams
from engine.training.trainers.stack import StackedClipper, StackedOptimizer, joint_ledger
from engine.training.trainers.stack import stack_run as stacked_module
from engine.training.trainers.stack.stack_run import StackInputs
from tests.helpers import fast_spec

DEVICE = pick_device()


def spec(**overrides):
    raw = fast_spec(**{"epochs": 1, **overrides})
    if "noise_multiplier" in overrides:
        raw.pop("target_epsilon")
    return parse_spec(raw)


def members_of(*specs):
    return [StackMember(spec=s, plan=plan_spec(s)) for s in specs]


def models(name: str, k: int, **kwargs):
    out = []
    for seed in range(k):
        torch.manual_seed(seed)
        out.append(build_model(name, **kwargs).to(DEVICE))
    return out


@pytest.fixture
def full_precision():
    """No TF32 in cuDNN convolutions or matmuls (CUDA's defaults allow it in convolutions): the comparison
    below is of two float32 computations, not of two TF32 roundings."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.usefixtures("full_precision")
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("logreg", dict(n_features=20, n_classes=4)),
        ("mlp", dict(n_features=20, n_classes=4, hidden=(16, 8))),
        ("cnn", dict(n_features=784, n_classes=10, image_shape=(1, 28, 28))),  # conv 1 ghost-free, conv 2 either way
    ],
)
def test_stacked_clipped_sums_equal_one_clipper_per_member(name, kwargs):
    torch.manual_seed(7)
    x = torch.randn(24, kwargs["n_features"], device=DEVICE) * 3
    y = torch.randint(0, kwargs["n_classes"], (24,), device=DEVICE)
    members = models(name, 3, **kwargs)
    thresholds = [0.05, 1.0, 100.0]  # mostly clipped, some, none
    stacked = StackedClipper(members).clipped_sum(x, y, thresholds)
    for k, (model, c) in enumerate(zip(members, thresholds, strict=True)):
        one = BookKeepingClipper(model).clipped_sum(x, y, c)
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        for n, g in zip(names, one.grads, strict=True):
            torch.testing.assert_close(stacked.grads[n][k], g, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(stacked.norms[k], one.norms, rtol=1e-4, atol=1e-6)
        assert torch.equal(stacked.clipped[k], one.clipped)
        torch.testing.assert_close(stacked.loss_sum[k], one.loss_sum, rtol=1e-5, atol=1e-5)
        assert int(stacked.correct[k]) == int(one.correct)
        # the factor bound holds exactly: no clipped per-example norm above its member's C
        assert float((stacked.norms[k] * torch.clamp(c / stacked.norms[k], max=1.0)).max()) <= c * (1 + 1e-6)


def test_a_forward_hook_on_a_stacked_layer_is_refused_by_name():
    """The stack runs its base model's layers: a hook there may replace an output the rules assume (`sums`)."""
    members = models("mlp", 2, n_features=6, n_classes=3, hidden=(4,))
    x, y = torch.randn(5, 6, device=DEVICE), torch.randint(0, 3, (5,), device=DEVICE)
    clipper = StackedClipper(members)
    members[0][2].register_forward_hook(lambda module, inputs, output: 3.0 * output)
    with pytest.raises(UnsupportedModelError, match=r"layer\(s\) '2' have forward hooks"):
        clipper.clipped_sum(x, y, [1.0, 1.0])
    with pytest.raises(StackError, match="forward hooks"):
        StackedClipper(members)


@pytest.mark.parametrize("optimizer", list(OptimizerName))
def test_stacked_update_rules_equal_torch_optim(optimizer):
    torch.manual_seed(0)
    members = models("mlp", 3, n_features=5, n_classes=3, hidden=(4,))
    lrs, momenta = [0.1, 0.02, 0.5], [0.9, 0.5, 0.0]
    clipper = StackedClipper(members)
    stacked = StackedOptimizer(optimizer, clipper.params, momenta)
    torch_opts = [
        make_optimizer(optimizer, list(m.parameters()), lr=lr, momentum=mu)
        for m, lr, mu in zip(members, lrs, momenta, strict=True)
    ]
    for _ in range(4):
        grads = {n: torch.randn_like(p) for n, p in clipper.params.items()}
        stacked.step(grads, torch.tensor(lrs, device=DEVICE))
        for k, (model, opt) in enumerate(zip(members, torch_opts, strict=True)):
            for n, p in model.named_parameters():
                p.grad = grads[n][k].clone()
            opt.step()
    for k, model in enumerate(members):
        for n, p in model.named_parameters():
            torch.testing.assert_close(clipper.params[n][k], p.detach(), rtol=1e-5, atol=1e-6)


def test_the_lead_member_follows_its_separate_run():
    """The lead's lots and noise are its separate run's, so it is that run step for step; the other member (its
    own noise stream, the lead's lots) has its separate run's ε and the statement's stack note."""
    specs = [spec(noise_multiplier=0.8), spec(target_epsilon=2.0, clip_norm=0.5, lr=1.0)]
    seen: list[list] = [[] for _ in specs]
    results = train_stack(members_of(*specs), on_step=[s.append for s in seen])
    for k, s in enumerate(specs):
        alone: list = []
        separate = train(s, plan=plan_spec(s), on_step=alone.append)
        assert results[k].epsilon == separate.epsilon and results[k].epsilons == separate.epsilons
        assert "vectorized stack of 2 runs" in results[k].privacy_statement
        assert results[k].stack["members"] == 2 and results[k].stack["position"] == k
        if k > 0:
            assert [r.lot_size for r in seen[k]] == [r.lot_size for r in seen[0]]  # the lead's lots
            continue
        assert [r.lot_size for r in seen[k]] == [r.lot_size for r in alone]  # the same lots
        for mine, theirs in zip(seen[k], alone, strict=True):
            assert mine.epsilon == theirs.epsilon
            for field in ("train_loss", "clip_fraction", "test_accuracy", "grad_norm_p50"):
                a, b = getattr(mine, field), getattr(theirs, field)
                assert (a is None) == (b is None) and (a is None or math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-5))


def test_each_member_draws_its_own_noise_stream_at_its_own_scale(monkeypatch):
    """Noise comes from each member's own noise stream (the stream a separate run of its spec uses), with
    std σₖ·Cₖ; two members' draws are independent. KS and correlation tests: false-failure rate ≈ 1e-6 each."""
    calls: list[tuple[int, float, np.ndarray]] = []
    real = noise_module.fill_gaussian_noise

    def spy(buffer, std, stream, **kwargs):
        out = real(buffer, std, stream, **kwargs)
        calls.append((stream.seed, std, out.flatten().cpu().numpy().copy()))
        return out

    monkeypatch.setattr(noise_ahead, "fill_gaussian_noise", spy)
    specs = [spec(noise_multiplier=1.0, epochs=0.2), spec(noise_multiplier=3.0, clip_norm=2.0, seed=5, epochs=0.2)]
    train_stack(members_of(*specs))
    expected = [random_streams(s, DEVICE)["noise"].seed for s in specs]
    steps, tensors = plan_spec(specs[0]).steps, 2  # logistic regression: weight and bias
    assert [seed for seed, _, _ in calls] == [seed for seed in expected for _ in range(tensors)] * steps
    per_member = [[c for c in calls if c[0] == seed] for seed in expected]
    for s, draws in zip(specs, per_member, strict=True):
        sample = np.concatenate([noise for _, _, noise in draws])
        std = draws[0][1]
        assert std == pytest.approx(s.noise_multiplier * s.clip_norm)
        assert stats.kstest(sample / std, "norm").pvalue > 1e-6
    a = np.concatenate([noise for _, _, noise in per_member[0]])
    b = np.concatenate([noise for _, _, noise in per_member[1]])
    assert abs(np.corrcoef(a, b)[0, 1]) < 5.0 / math.sqrt(len(a))  # 5σ of a null correlation: p ≈ 6e-7


def test_members_share_the_leads_lots():
    specs = [spec(noise_multiplier=1.0, epochs=0.5), spec(noise_multiplier=2.0, seed=9, epochs=0.5)]
    seen: list[list] = [[], []]
    train_stack(members_of(*specs), on_step=[s.append for s in seen])
    lead_alone: list = []
    train(specs[0], plan=plan_spec(specs[0]), on_step=lead_alone.append)
    assert [r.lot_size for r in seen[1]] == [r.lot_size for r in seen[0]] == [r.lot_size for r in lead_alone]


def test_a_cancelled_member_leaves_the_stack_and_the_others_finish():
    specs = [spec(noise_multiplier=1.0), spec(noise_multiplier=2.0), spec(noise_multiplier=4.0)]
    calls = {"n": 0}

    def stop_second() -> bool:
        calls["n"] += 1
        return calls["n"] >= 3

    results = train_stack(members_of(*specs), should_stop=[None, stop_second, None])
    planned = plan_spec(specs[0]).steps
    assert [r.steps for r in results] == [planned, 3, planned]
    assert [r.stopped_early for r in results] == [False, True, False]
    alone = train(specs[1], plan=plan_spec(specs[1]), should_stop=lambda: True)  # ε of 1 step, for scale
    assert alone.epsilon < results[1].epsilon  # 3 steps spend more than 1


def test_joint_ledger_is_the_sampled_gaussian_at_sigma_joint():
    specs = [spec(noise_multiplier=1.0), spec(noise_multiplier=2.0), spec(noise_multiplier=2.0, clip_norm=3.0)]
    plans = [plan_spec(s) for s in specs]
    ledger = joint_ledger(plans)
    sigma_joint = (1 + 0.25 + 0.25) ** -0.5
    assert ledger.steps == plans[0].steps and len(ledger.phases) == 1 and not ledger.upfront
    accountant = RdpAccountant(orders=list(DEFAULT_ORDERS))
    accountant.compose(
        dp_event.PoissonSampledDpEvent(plans[0].sampling_rate, dp_event.GaussianDpEvent(sigma_joint)), plans[0].steps
    )
    assert rdp_epsilon(ledger.dp_event(), delta=1e-5)[0] == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-9)
    results = train_stack(members_of(*specs))
    stack = results[0].stack
    assert stack["joint_accountant"] in ("rdp", "pld")  # the tightest of the two, never above RDP's
    assert stack["joint_epsilon"] <= accountant.get_epsilon(1e-5) * (1 + 1e-9)
    assert stack["joint_epsilon"] > max(r.epsilon for r in results)


def test_stack_keys_group_only_compatible_specs():
    key = stack_key(spec(noise_multiplier=1.0))
    assert key is not None
    assert stack_key(spec(noise_multiplier=3.0, clip_norm=0.1, lr=9.0, seed=4, delta=1e-6)) == key
    assert stack_key(spec(target_epsilon=1.0)) == key
    assert stack_key(spec(noise_multiplier=1.0, lot_size=32)) != key
    assert stack_key(spec(noise_multiplier=1.0, optimizer="adam")) != key
    assert stack_key(spec(noise_multiplier=1.0, clipping="per_layer")) is None
    assert stack_key(spec(noise_multiplier=1.0, noise="release")) != key  # one noise mode per stack
    assert stack_key(spec(noise_multiplier=1.0, pca_dims=10, pca_noise=4.0)) != key  # other inputs
    with_pca = stack_key(spec(noise_multiplier=1.0, pca_dims=10, pca_noise=4.0))
    assert stack_key(spec(noise_multiplier=2.0, pca_dims=10, pca_noise=8.0, seed=3)) == with_pca
    assert stack_key(spec(noise_multiplier=1.0, model="mlp", hidden=[8])) != key
    nonprivate = {
        "dataset": "digits",
        "model": "logreg",
        "algorithm": "nonprivate",
        "epochs": 1,
        "lr": 1.0,
        "seed": 0,
        "lot_size": 64,
    }
    assert stack_key(parse_spec(nonprivate)) is None
    with pytest.raises(StackError, match="same data, model, lot size"):
        train_stack(members_of(spec(noise_multiplier=1.0), spec(noise_multiplier=1.0, lot_size=32)))


def test_physical_batches_change_memory_not_the_release(monkeypatch):
    """Clipped sums of a lot computed 16 examples at a time are the sums of the whole lot (on the same lots and
    noise: `physical_batch_size` is part of a spec, so the chunked specs draw from the whole specs' streams)."""

    def whole_streams(s, device):
        return random_streams(dataclasses.replace(s, physical_batch_size=None), device)

    monkeypatch.setattr(stacked_module, "random_streams", whole_streams)
    specs = [spec(noise_multiplier=4.0, epochs=0.5), spec(noise_multiplier=6.0, epochs=0.5, clip_norm=0.5)]
    chunked = [
        spec(noise_multiplier=4.0, epochs=0.5, physical_batch_size=16),
        spec(noise_multiplier=6.0, epochs=0.5, clip_norm=0.5, physical_batch_size=16),
    ]
    whole, parts = train_stack(members_of(*specs)), train_stack(members_of(*chunked))
    for a, b in zip(whole, parts, strict=True):
        assert a.steps == b.steps
        assert math.isclose(a.test_loss, b.test_loss, rel_tol=1e-4)


def test_members_with_their_own_dp_pca_projections_follow_their_separate_runs():
    """DP-PCA members whose releases differ (σ_p, seed) each train on their own inputs, the very projection
    their separate runs make; the lead is its separate run step for step (the other's lots are the lead's)."""
    specs = [
        spec(noise_multiplier=4.0, pca_dims=16, pca_noise=4.0),
        spec(noise_multiplier=5.0, pca_dims=16, pca_noise=12.0, clip_norm=0.5),
    ]
    seen: list[list] = [[], []]
    results = train_stack(members_of(*specs), on_step=[s.append for s in seen])
    for k, s in enumerate(specs):
        alone: list = []
        separate = train(s, plan=plan_spec(s), on_step=alone.append)
        assert results[k].epsilon == separate.epsilon  # DP-PCA's release is in each member's own ledger
        if k > 0:
            continue
        for mine, theirs in zip(seen[k], alone, strict=True):
            assert math.isclose(mine.train_loss or 0.0, theirs.train_loss or 0.0, rel_tol=1e-3, abs_tol=1e-5)
        assert math.isclose(results[k].test_loss, separate.test_loss, rel_tol=1e-3)
    x = torch.as_tensor(load_dataset("digits").x_train, device=DEVICE)
    members = members_of(*specs)
    plans = [m.plan for m in members]
    streams = [random_streams(s, DEVICE) for s in specs]
    inputs = StackInputs.of(members, plans, streams, x, x[:5])
    assert inputs.per_member
    for k, s in enumerate(specs):  # each member's inputs: its separate run's projection, from a fresh stream
        alone, _ = features(s, plans[k], x, x[:5], random_streams(s, DEVICE)["pca"])
        assert torch.equal(inputs.train[k], alone)


def test_members_that_agree_on_the_dp_pca_release_share_one():
    """Another learning rate or σ does not change the PCA release (data, k, σ_p, seed): one projection, shared,
    charged once by the joint ledger (`pca_release_identity`)."""
    specs = [
        spec(noise_multiplier=4.0, pca_dims=16, pca_noise=4.0),
        spec(noise_multiplier=5.0, pca_dims=16, pca_noise=4.0, lr=0.5),
    ]
    x = torch.as_tensor(load_dataset("digits").x_train, device=DEVICE)
    members = members_of(*specs)
    inputs = StackInputs.of(members, [m.plan for m in members], [random_streams(s, DEVICE) for s in specs], x, x)
    assert not inputs.per_member
    for s, m in zip(specs, members, strict=True):
        assert torch.equal(inputs.train, features(s, m.plan, x, x, random_streams(s, DEVICE)["pca"])[0])
    keys = [noise_module.pca_release_identity(s) for s in specs]
    assert len(joint_ledger([m.plan for m in members], upfront_keys=keys).upfront) == 1
    assert len(joint_ledger([m.plan for m in members]).upfront) == 2  # without keys: each member's own
