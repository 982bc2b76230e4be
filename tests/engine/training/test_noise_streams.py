"""How noise is drawn (`engine.training.noise`): no two runs and no two stack members share a noise stream, a
stack member draws its separate run's noise, release mode draws from the OS (fresh every run, nothing stored
regenerates it, a hardened sampler), the lab mode reproduces bit for bit, and the stack's joint ε includes the
up-front releases and is never below an independent dp-accounting computation.

Correlation tests: under independence √n·r is N(0, 1) to within O(1/n) for Gaussian draws, so |r| ≤ 6/√n fails
a correct implementation with probability 2·Φ(−6) ≈ 2e-9. KS tests: false-failure rate 1e-6.
"""

import collections
import json
import math
import threading
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution
from dp_accounting.rdp import RdpAccountant
from scipy import stats

from app.common.run_panel import stack_text
from engine.jobs.run_schema import RunShapeError, check_stack
from engine.jobs.submission import submit
from engine.jobs.workers.worker import Worker
from engine.privacy import DEFAULT_ORDERS, panel, privacy_statement, rdp_epsilon, single_phase
from engine.privacy.events import dpsgd_step_event
from engine.training import SpecError, StackMember, noise, noise_ahead, parse_spec, plan_spec, train, train_stack
from engine.training.noise import OsStream, SeededStream, hardened_normal_, pca_release_identity
from engine.training.trainers.stack import joint_ledger
from tests.helpers import fast_spec

NULL_R = 6.0  # |r|·√n above this fails a correct implementation with probability ≈ 2e-9
ALPHA = 1e-6


def spec(**overrides):
    raw = fast_spec(**{"epochs": 1, "noise_multiplier": 1.0, **overrides})
    raw.pop("target_epsilon")
    return parse_spec(raw)


def record_noise(monkeypatch, module) -> list[tuple[object, np.ndarray]]:
    """Every Gaussian buffer the trainer fills through `module.fill_gaussian_noise`: (stream, draws / std)."""
    draws: list[tuple[object, np.ndarray]] = []
    real = noise.fill_gaussian_noise

    def spy(buffer, std, source, **kwargs):
        out = real(buffer, std, source, **kwargs)
        draws.append((source, out.flatten().double().cpu().numpy() / std))
        return out

    monkeypatch.setattr(module, "fill_gaussian_noise", spy)
    return draws


def concatenated(draws) -> np.ndarray:
    return np.concatenate([d for _, d in draws])


def assert_uncorrelated(a: np.ndarray, b: np.ndarray) -> None:
    n = min(len(a), len(b))
    assert n > 5_000
    r = np.corrcoef(a[:n], b[:n])[0, 1]
    assert abs(r) <= NULL_R / math.sqrt(n), f"r = {r:.4f} over {n} draws"


# ------------------------------------------------------------------------------------ independence


def test_two_stack_members_with_one_seed_draw_uncorrelated_noise(monkeypatch, digits):
    """Seed 0 twice, another learning rate: before, both members drew one stream (r = 1)."""
    draws = record_noise(monkeypatch, noise_ahead)
    specs = [spec(), spec(lr=1.0)]
    train_stack([StackMember(spec=s, plan=plan_spec(s)) for s in specs], dataset=digits)
    seeds = sorted({stream.seed for stream, _ in draws})
    assert len(seeds) == 2
    a, b = (concatenated([d for d in draws if d[0].seed == seed]) for seed in seeds)
    assert_uncorrelated(a, b)


def test_two_runs_with_one_seed_and_another_learning_rate_draw_uncorrelated_noise(monkeypatch, digits):
    draws = record_noise(monkeypatch, noise_ahead)
    train(spec(), dataset=digits)
    first = concatenated(draws)
    draws.clear()
    train(spec(lr=1.0), dataset=digits)
    assert_uncorrelated(first, concatenated(draws))


def test_a_stack_members_noise_is_what_its_separate_run_draws(monkeypatch, digits):
    """Not the lead (whose lots it shares): its own stream, draw for draw, as a separate run of its spec."""
    specs = [spec(), spec(noise_multiplier=2.0, clip_norm=0.5, lr=1.0, seed=3)]
    stacked = record_noise(monkeypatch, noise_ahead)
    train_stack([StackMember(spec=s, plan=plan_spec(s)) for s in specs], dataset=digits)
    alone = record_noise(monkeypatch, noise_ahead)
    train(specs[1], dataset=digits)
    seed = noise.random_streams(specs[1], torch.device("cpu"))["noise"].seed
    member = [d for stream, d in stacked if stream.seed == seed]
    assert len(member) == len(alone) == 2 * plan_spec(specs[1]).steps  # logistic regression: weight and bias
    assert all(np.array_equal(a, b) for a, (_, b) in zip(member, alone, strict=True))


# ------------------------------------------------------------------------------------ release mode


def test_release_mode_draws_new_noise_each_run_and_the_lab_mode_reproduces(monkeypatch, digits):
    draws = record_noise(monkeypatch, noise_ahead)
    lab, release = spec(), spec(noise="release")
    runs = {}
    for name, s in (("lab", lab), ("lab again", lab), ("release", release), ("release again", release)):
        draws.clear()
        records: list = []
        result = train(s, dataset=digits, on_step=records.append)
        runs[name] = (result, [r.metrics() | {"elapsed_s": 0} for r in records], concatenated(draws))
        kinds = {type(stream) for stream, _ in draws}
        assert kinds == ({OsStream} if "release" in name else {SeededStream})
    (a, ra, na), (b, rb, nb) = runs["lab"], runs["lab again"]
    assert a.test_loss == b.test_loss and ra == rb and np.array_equal(na, nb)  # bit for bit
    (c, _, nc), (d, _, nd) = runs["release"], runs["release again"]
    assert c.test_loss != d.test_loss
    assert_uncorrelated(nc, nd)
    assert c.epsilon == a.epsilon  # the mode changes how noise is drawn, not what it costs
    assert "release mode" in c.privacy_statement and "lab mode" in a.privacy_statement


def test_no_stored_field_regenerates_a_release_run(monkeypatch, digits):
    """Every private draw of a release run comes from `secrets` (with it fixed, two runs coincide), none of the
    OS seeds reaches the spec, result or metrics, and retraining from every stored field gives other numbers."""
    release = spec(noise="release", epochs=0.5)
    real = noise.secrets.randbits
    drawn: list[int] = []
    monkeypatch.setattr(noise.secrets, "randbits", lambda k: drawn.append(real(k)) or drawn[-1])
    records: list = []
    result = train(release, dataset=digits, on_step=records.append)
    stored = json.dumps([release.to_dict(), result.to_dict(), [r.metrics() for r in records]])
    assert len(drawn) > plan_spec(release).steps  # fresh seeds: a lot and each tensor of every step
    assert not [seed for seed in drawn if str(seed) in stored]

    again = parse_spec(json.loads(stored)[0])  # every stored field of the spec
    assert again == release and train(again, dataset=digits).test_loss != result.test_loss
    lab_twin = parse_spec(json.loads(stored)[0] | {"noise": "reproducible"})
    assert train(lab_twin, dataset=digits).test_loss != result.test_loss

    # a counter per thread: the lots are drawn on the training thread, the noise a step ahead on another
    counters: dict[str, Iterator[int]] = collections.defaultdict(lambda: iter(range(10**9)))
    monkeypatch.setattr(noise.secrets, "randbits", lambda k: next(counters[threading.current_thread().name]))
    first = train(release, dataset=digits).test_loss
    counters.clear()
    assert train(release, dataset=digits).test_loss == first  # nothing but `secrets` made it differ


def test_a_release_mode_resubmission_is_the_same_release_from_the_cache(store):
    """Serving the stored result again releases nothing new; `--force` trains (and releases) a new model."""
    release = spec(noise="release", epochs=0.2)
    first = submit(store, release)
    Worker(store, data_dirs=[]).run_one()
    again = submit(store, release)
    assert again.cached and again.run_id == first.run_id
    assert not submit(store, release, force=True).cached


def test_the_hardened_sampler_is_gaussian_at_std_and_is_four_draws_halved():
    std, n = 2.5, 200_000
    sample = hardened_normal_(torch.empty(n, dtype=torch.float64), std, torch.Generator().manual_seed(1)).numpy()
    assert stats.kstest(sample / std, "norm").pvalue > ALPHA
    generator = torch.Generator().manual_seed(2)
    replay = torch.Generator().manual_seed(2)
    torch.empty(1, dtype=torch.float64).normal_(0.0, std, generator=replay)  # Opacus throws the first draw away
    four = [torch.empty(7, dtype=torch.float64).normal_(0.0, std, generator=replay) for _ in range(4)]
    expected = (((four[0] + four[1]) + four[2]) + four[3]) * 0.5
    assert torch.equal(hardened_normal_(torch.empty(7, dtype=torch.float64), std, generator), expected)


def test_release_mode_is_for_the_gaussian_noise_algorithms_only():
    assert parse_spec(fast_spec()).to_dict()["noise"] == "reproducible"  # the lab mode is the canonical default
    assert parse_spec(fast_spec(noise="release")).noise == "release"
    learner = {"dataset": "adult", "algorithm": "expmech_stumps", "target_epsilon": 1.0, "delta": 1e-6, "seed": 0}
    with pytest.raises(SpecError, match="noise: release mode applies to dpsgd, noisy_gd, aniso_dpsgd") as error:
        parse_spec(learner | {"noise": "release"})
    assert error.value.field == "noise"
    assert "noise" not in parse_spec(learner | {"noise": "reproducible"}).to_dict()
    with pytest.raises(SpecError, match="noise: must be one of reproducible, release"):
        parse_spec(fast_spec(noise="secure"))


# ------------------------------------------------------------------------------------ the stack's joint ε


def test_the_joint_epsilon_includes_each_pca_release_once_and_matches_dp_accounting(digits):
    """Members 0 and 1 make one DP-PCA release (same data, k, σ_p and seed), member 2 another: the joint ledger
    is the sampled Gaussian at σ_joint = (Σσₖ⁻²)^(−1/2) composed with two Gaussian(σ_p) releases. Its RDP ε is
    dp-accounting's to 1e-9; the stored ε (tightest of RDP and PLD) is at most that, at least dp-accounting's
    optimistic PLD at a fine grid (a lower bound of the true ε: no valid bound is below it), and at least
    every member's own ε."""
    pca = dict(pca_dims=16, pca_noise=8.0)
    specs = [spec(**pca), spec(**pca, noise_multiplier=2.0, lr=1.0), spec(**pca, noise_multiplier=1.5, seed=1)]
    plans = [plan_spec(s) for s in specs]
    results = train_stack([StackMember(spec=s, plan=p) for s, p in zip(specs, plans, strict=True)], dataset=digits)
    stored = results[0].stack
    q, steps, sigma_joint = plans[0].sampling_rate, plans[0].steps, (1 + 0.25 + 1 / 2.25) ** -0.5

    accountant = RdpAccountant(orders=list(DEFAULT_ORDERS))
    accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma_joint)), steps)
    accountant.compose(dp_event.GaussianDpEvent(8.0), 2)
    independent_rdp = accountant.get_epsilon(1e-5)
    ledger = joint_ledger(plans, upfront_keys=[pca_release_identity(s) for s in specs])
    assert len(ledger.upfront) == 2
    assert rdp_epsilon(ledger.dp_event(), delta=1e-5)[0] == pytest.approx(independent_rdp, rel=1e-9)

    def pld(pessimistic: bool) -> float:
        grid = dict(pessimistic_estimate=pessimistic, use_connect_dots=pessimistic, value_discretization_interval=1e-4)
        step = privacy_loss_distribution.from_gaussian_mechanism(sigma_joint, sampling_prob=q, **grid)
        release = privacy_loss_distribution.from_gaussian_mechanism(8.0, **grid)
        return step.self_compose(steps).compose(release.self_compose(2)).get_epsilon_for_delta(1e-5)

    assert stored["joint_accountant"] in ("rdp", "pld") and stored["joint_delta"] == 1e-5
    assert pld(False) * (1 - 1e-9) <= stored["joint_epsilon"] <= independent_rdp * (1 + 1e-9)
    assert stored["joint_epsilon"] <= pld(True) * 1.01  # and tight: within 1% of dp-accounting's PLD at a 1e-4 grid
    assert stored["joint_epsilon"] > max(r.epsilon for r in results)
    assert all(r.stack["joint_epsilon"] == stored["joint_epsilon"] for r in results)


def test_the_joint_epsilon_is_unbounded_when_two_members_share_a_noise_stream(digits):
    """A guard (identical specs are one run and never stack in a sweep): one stream twice is no bound."""
    twice = [StackMember(spec=spec(epochs=0.2), plan=plan_spec(spec(epochs=0.2))) for _ in range(2)]
    stack = train_stack(twice, dataset=digits)[0].stack
    assert stack["joint_epsilon"] == math.inf and stack["joint_accountant"] == "shared noise stream"
    release = [StackMember(spec=s, plan=plan_spec(s)) for s in [spec(epochs=0.2, noise="release")] * 2]
    assert math.isfinite(train_stack(release, dataset=digits)[0].stack["joint_epsilon"])  # fresh OS noise each


def test_the_panel_shows_the_joint_bound_and_none_for_an_old_stack():
    new = {"members": 3, "lead_seed": 0, "joint_epsilon": 1.234, "joint_accountant": "pld", "joint_delta": 1e-5}
    text = stack_text(new, "0.4.0")
    assert "costs ε = 1.23 (PLD, δ = 1e-05)" in text and "up-front release" in text
    old = {"members": 3, "lead_seed": 0, "joint_epsilon_rdp": 1.234, "joint_delta": 1e-5}
    text = stack_text(old, "0.3.0")
    assert "no valid bound" in text and "ε = ∞" in text and "1.23" not in text
    assert "no valid bound" in stack_text(new | {"joint_epsilon": 0.5}, "0.3.0")  # an old engine's record
    assert "ε = ∞ (shared noise stream" in stack_text(
        new | {"joint_epsilon": math.inf, "joint_accountant": "shared noise stream"}, "0.4.0"
    )
    check_stack(new)
    check_stack(old)
    check_stack(new | {"joint_epsilon": math.inf})
    with pytest.raises(RunShapeError, match="joint_epsilon"):
        check_stack(new | {"joint_epsilon": -1.0})


# ------------------------------------------------------------------------------------ the statement


def test_the_statement_says_how_noise_was_drawn_and_what_several_runs_cost():
    ledger = single_phase(dpsgd_step_event(sampling_rate=0.05, noise_multiplier=1.0), 100)
    accounts = panel(ledger, delta=1e-5, names=("rdp",))

    def text(mode: str | None) -> str:
        return privacy_statement(ledger=ledger, panel=accounts, dataset_size=1000, lot_size=50, noise=mode).text()

    assert "anyone holding the run record can regenerate this run's noise" in text("reproducible")
    assert "do not publish this model as differentially private" in text("reproducible")
    assert "operating system's cryptographic randomness" in text("release")
    assert "nothing stored or exported regenerates it" in text("release")
    for mode in ("reproducible", "release", None):
        assert "releasing several runs costs their composition" in text(mode)
        assert "each run spends its own budget" not in text(mode)
    assert "Noise:" not in text(None)  # a plan (no run yet) has no noise mode
