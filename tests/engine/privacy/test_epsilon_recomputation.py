"""An independent auditor's check of every ε the product shows, over ~30 stored runs of every algorithm.

The runs train through the real queue and worker into one store: DP-SGD at several σ and ε (σ = 0.6, whose
subsampled Gaussian is ∞ at low RDP orders), noise and clipping schedules, DP-PCA, physical batches, per-layer
clipping, PLD calibration, anisotropic DP-SGD, a budget-filling run with augmented copies and averaged iterates,
noisy GD, the four textbook learners, a non-private run, a run cancelled mid-way, two vectorized stacks, and a
release-mode and a lab-mode run whose worker stopped mid-run and which trained again (each second attempt stops
before the first did). Then, from each run's *stored plan* only (never the engine's ledger code), the mechanism it
ran is rebuilt as `dp_accounting` events, every attempt included (fresh noise: each attempt's releases composed;
replayed noise: the longest attempt), and:

- RDP: dp-accounting's own `RdpAccountant` gives each release's RDP and `compute_epsilon` converts the sum, at
  every step a live row was written for. The live ε rows (the run panel's headline and chart, and Compare's
  curves, which read the same rows) and the final RDP ε must equal it (relative 1e-9): RDP is what they claim.
- Validity of everything: a lower bound on the true ε, dp-accounting's PLD with the *optimistic* discretization
  (which under-estimates the privacy loss), at a few steps. Every displayed ε by any accountant (live rows,
  background curves, final result, the reported tightest, a stack's joint ε) at a step t ≥ s must be at least the
  lower bound at s (the true ε never decreases with more steps). A number below it is not a bound.
- ∞ stays ∞: a non-private run shows no finite ε.
- Picking the best of each stacked grid costs at least the stack's joint mechanism (a sampled Gaussian at
  σ_joint = (Σ σₖ⁻²)^−½ per shared lot), not the members composed as independent runs.
"""

import math
import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest
from dp_accounting import NeighboringRelation, dp_event
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from app.services import uploads as data_upload
from cache import RunRecord, RunStatus, Store
from engine.jobs.release import RunToRelease
from engine.jobs.submission import submit
from engine.jobs.sweep import privacy_of_sweep, submit_sweep
from engine.jobs.workers.worker import Worker
from engine.training import parse_spec
from tests.helpers import binary_spec, fast_spec, synthetic_csv, synthetic_schema

SCHEMA = synthetic_schema()
OPTIMISTIC_GRID = 1e-3  # the lower bound's discretization: coarser only lowers it further (it stays a lower bound)
LOWER_BOUND_POINTS = 3  # steps at which the true ε is bounded from below (the last is the final step)


def digits(**changes) -> dict:
    return {k: v for k, v in fast_spec(**({"epochs": 2} | changes)).items() if v is not None}


def binary(upload: data_upload.SavedUpload, algorithm: str, **changes) -> dict:
    return binary_spec(upload.spec_fields(), algorithm, epochs=3, **changes)


def single_specs(csv: data_upload.SavedUpload) -> list[dict]:
    return [
        *(digits(target_epsilon=eps) for eps in (0.5, 1.0, 8.0)),
        digits(),
        *(digits(target_epsilon=None, noise_multiplier=sigma) for sigma in (0.6, 1.0, 4.0)),
        digits(epochs=3, noise_schedule={"kind": "step", "factor": 0.6, "every_epochs": 1}),
        digits(
            epochs=3,
            target_epsilon=None,
            noise_multiplier=1.0,
            noise_schedule={"kind": "step", "factor": 0.6, "every_epochs": 1},
        ),
        digits(clip_schedule={"kind": "linear", "end_factor": 0.5, "epochs": 2}),
        digits(pca_dims=20, pca_noise=4.0),
        digits(target_epsilon=None, noise_multiplier=1.0, pca_dims=20, pca_noise=7.0),
        digits(physical_batch_size=16),
        digits(model="mlp", hidden=[32], clipping="per_layer", lr=0.5),
        digits(calibration_accountant="pld"),
        digits(algorithm="aniso_dpsgd"),
        digits(algorithm="aniso_dpsgd", aniso_granularity="coordinate"),
        # augmented copies, averaged iterates and a budget filled by the tightest accountant: the plan's steps
        digits(noise_multiplier=1.0, fill_budget=True, epochs=10, augmentation_multiplicity=2, ema_decay=0.9),
        binary(csv, "noisy_gd"),
        binary(csv, "noisy_gd", clipping="input", target_epsilon=None, noise_multiplier=2.0),
        binary(csv, "expmech_stumps"),
        binary(csv, "sq_laplace"),
        binary(csv, "rwm_online"),
        binary(csv, "rwm_linear"),
        binary(csv, "nonprivate", lot_size=32, delta=None, target_epsilon=None, clip_norm=None),
    ]


def stack_grids() -> list[dict]:
    return [
        {"base": digits(), "grid": {"lr": [0.5, 1.0, 1.5]}},
        {
            "base": digits(target_epsilon=None, noise_multiplier=1.0, pca_dims=20, pca_noise=4.0),
            "grid": {"noise_multiplier": [0.8, 1.0, 1.5]},
        },
    ]


def train_and_cancel_midway(store: Store) -> str:
    """A long run cancelled after it has trained some steps: its displayed ε is that of the steps taken."""
    run_id = submit(store, parse_spec(digits(epochs=200, seed=11))).run_id
    worker = threading.Thread(target=Worker(store, data_dirs=[]).run_one)
    worker.start()
    deadline = time.monotonic() + 300
    while store.get_run(run_id).progress_step < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    store.request_cancel(run_id)
    worker.join(timeout=300)
    return run_id


def progress_reaches(store: Store, run_id: str, steps: int) -> None:
    deadline = time.monotonic() + 300
    while store.get_run(run_id).progress_step < steps and time.monotonic() < deadline:
        time.sleep(0.02)


def train_restart_and_cancel(store: Store, spec: dict, *, first: int, second: int) -> str:
    """A run whose worker stops after at least `first` steps (SIGTERM's path: the run goes back to the queue, as
    after a lost worker with `on_worker_lost: requeue`), then trains again and stops after exactly `second`."""
    run_id = submit(store, parse_spec(spec)).run_id
    stopping = Worker(store, data_dirs=[])
    thread = threading.Thread(target=stopping.run_one)
    thread.start()
    progress_reaches(store, run_id, first)
    stopping.stopping = True  # what the worker's SIGTERM handler sets
    thread.join(timeout=300)
    assert store.get_run(run_id).status is RunStatus.QUEUED
    CancelsAfter(store, steps=second).run_one()
    return run_id


class CancelsAfter(Worker):
    """A worker whose run stops as cancelled after exactly `steps` steps (its trainer asks once a step)."""

    def __init__(self, store: Store, *, steps: int):
        super().__init__(store, data_dirs=[])
        self.steps, self.asked = steps, 0

    def _should_stop(self, recorder) -> bool:
        self.asked += 1
        return self.asked >= self.steps or super()._should_stop(recorder)


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> tuple[Store, list[RunRecord]]:
    home = tmp_path_factory.mktemp("audit") / "home"
    upload = data_upload.save_upload(
        home, file_name="people.csv", data=synthetic_csv(rows=600), raw_schema=SCHEMA, label="People"
    )
    store = Store(home / "runs.sqlite3")
    cancelled = train_and_cancel_midway(store)  # first, alone in the queue
    long = digits(epochs=200, target_epsilon=None, noise_multiplier=1.0)
    restarted = [  # then the restarts, alone in the queue too: the second attempt stops before the first did
        train_restart_and_cancel(store, long | {"seed": 12, "noise": "release"}, first=40, second=20),
        train_restart_and_cancel(store, long | {"seed": 13}, first=60, second=20),
    ]
    for spec in single_specs(upload):
        submit(store, parse_spec(spec))
    for grid in stack_grids():
        submit_sweep(store, grid)
    Worker(store, data_dirs=[]).run_forever(exit_when_idle=True)
    runs = store.list_runs(limit=100)
    stopped = {cancelled, *restarted}
    assert all(r.status is RunStatus.FINISHED for r in runs if r.id not in stopped), {r.id: r.error for r in runs}
    assert all(store.get_run(run_id).status is RunStatus.CANCELLED for run_id in stopped)
    return store, runs


# ------------------------------------------------------------------ the mechanism, rebuilt from the stored plan


@dataclass(frozen=True)
class PureEpsilon:
    """An ε-DP release (the exponential mechanism, an RWM round), by its ε alone."""

    epsilon: float


def phase_sigmas(plan: dict) -> list[tuple[float, int]]:
    phases = plan.get("noise_phases") or [[1.0, plan["steps"]]]
    return [(plan["noise_multiplier"] * factor, int(count)) for factor, count in phases]


def mechanism(run: RunRecord) -> tuple[list, list[tuple], bool]:
    """(up-front events, [(step event, count)] in order, whether every event is a dp-accounting RDP event)."""
    plan, algorithm = run.plan, run.spec["algorithm"]
    upfront: list[dp_event.DpEvent] = []
    if plan.get("pca_noise") is not None:
        upfront.append(dp_event.GaussianDpEvent(plan["pca_noise"]))
    if plan.get("count_epsilon") is not None:
        upfront.append(dp_event.LaplaceDpEvent(1.0 / plan["count_epsilon"]))
    if algorithm in ("dpsgd", "aniso_dpsgd"):
        q = plan["sampling_rate"]
        return (
            upfront,
            [(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), n) for s, n in phase_sigmas(plan)],
            True,
        )
    if algorithm == "noisy_gd":
        return upfront, [(dp_event.GaussianDpEvent(s), n) for s, n in phase_sigmas(plan)], True
    if algorithm == "sq_laplace":
        step = dp_event.SelfComposedDpEvent(
            dp_event.LaplaceDpEvent(plan["laplace_scale"]), int(plan["queries_per_iteration"])
        )
        return upfront, [(step, plan["steps"])], True
    if algorithm == "expmech_stumps":
        return upfront, [(PureEpsilon(plan["expmech_epsilon"]), 1)], False
    if algorithm in ("rwm_online", "rwm_linear"):
        return upfront, [(PureEpsilon(2.0 * plan["eta"]), plan["steps"])], False
    raise AssertionError(f"no mechanism rebuilt for {algorithm}")


def neighboring(run: RunRecord) -> NeighboringRelation:
    replace_one = run.spec["algorithm"] in ("rwm_online", "rwm_linear")
    return NeighboringRelation.REPLACE_ONE if replace_one else NeighboringRelation.ADD_OR_REMOVE_ONE


def counts_at(phases: list[tuple[dp_event.DpEvent, int]], t: int) -> list[tuple[dp_event.DpEvent, int]]:
    out, start = [], 0
    for event, count in phases:
        if (used := min(max(t - start, 0), count)) > 0:
            out.append((event, used))
        start += count
    return out


def released(run: RunRecord, t: int) -> list[tuple[dp_event.DpEvent, int]]:
    """Everything the run had released once its last attempt took t steps, as (event, count): its up-front
    releases and first t steps and, for a run that restarted, its earlier attempts (stored in its plan as the steps
    each released): with fresh noise each is its own up-front releases and steps; replaying the same noise (lab
    mode), they are the first steps again, so the run has released max(t, theirs) steps."""
    upfront, phases, _ = mechanism(run)
    earlier = run.plan.get("earlier_attempts", [])
    if run.plan.get("earlier_noise") == "replayed":
        t = max([t, *earlier])
    out = [(event, 1) for event in upfront] + counts_at(phases, t)
    if run.plan.get("earlier_noise") == "fresh":
        for steps in earlier:
            out += [(event, 1) for event in upfront] + counts_at(phases, steps)
    return out


def rdp_epsilons(run: RunRecord, steps: list[int]) -> dict[int, float]:
    """dp-accounting's RDP ε of what the run released after t steps (`released`), for each t."""
    upfront, phases, _ = mechanism(run)
    orders = list(rdp_lib.DEFAULT_RDP_ORDERS)
    vectors = {}
    for event in {*upfront, *(e for e, _ in phases)}:
        accountant = rdp_lib.RdpAccountant(orders, neighboring(run))
        vectors[event] = np.asarray(accountant.compose(event)._rdp, dtype=np.float64)
    out = {}
    for t in steps:
        total = sum((count * vectors[event] for event, count in released(run, t)), np.zeros(len(orders)))
        out[t] = rdp_lib.compute_epsilon(orders, total, run.plan["delta"])[0]
    return out


def optimistic_pld(event: dp_event.DpEvent) -> pld_lib.PrivacyLossDistribution:
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        return pld_lib.from_gaussian_mechanism(
            event.event.noise_multiplier,
            sampling_prob=event.sampling_probability,
            pessimistic_estimate=False,
            use_connect_dots=False,
            value_discretization_interval=OPTIMISTIC_GRID,
        )
    if isinstance(event, dp_event.GaussianDpEvent):
        return pld_lib.from_gaussian_mechanism(
            event.noise_multiplier,
            pessimistic_estimate=False,
            use_connect_dots=False,
            value_discretization_interval=OPTIMISTIC_GRID,
        )
    if isinstance(event, dp_event.LaplaceDpEvent):
        return pld_lib.from_laplace_mechanism(
            event.noise_multiplier,
            pessimistic_estimate=False,
            use_connect_dots=False,
            value_discretization_interval=OPTIMISTIC_GRID,
        )
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return optimistic_pld(event.event).self_compose(event.count)
    if isinstance(event, PureEpsilon):  # the worst case of an ε-DP mechanism: randomized response
        return pld_lib.from_privacy_parameters(
            common.DifferentialPrivacyParameters(event.epsilon, 0.0), value_discretization_interval=event.epsilon / 1000
        )
    raise AssertionError(f"no PLD for {event}")


def lower_bound(releases: list[tuple[dp_event.DpEvent, int]], delta: float) -> float:
    """A lower bound on the true ε(δ) of `releases` (event, count): optimistic PLDs, composed."""
    parts = [optimistic_pld(e).self_compose(n) for e, n in releases if n]
    if not parts:
        return 0.0
    total = parts[0]
    for part in parts[1:]:
        total = total.compose(part)
    return total.get_epsilon_for_delta(delta)


def lower_bounds(run: RunRecord, steps_done: int) -> dict[int, float]:
    points = np.unique(np.linspace(0, steps_done, LOWER_BOUND_POINTS + 1).round().astype(int)[1:])
    return {int(t): lower_bound(released(run, int(t)), run.plan["delta"]) for t in points}


def bound_at(bounds: dict[int, float], t: int) -> float:
    """The largest lower bound at a step ≤ t (ε(t) ≥ ε(s) for s ≤ t); 0 before the first."""
    return max((b for s, b in bounds.items() if s <= t), default=0.0)


def displayed(store: Store, run: RunRecord) -> list[tuple[str, int, float]]:
    """Every ε the product shows for the run: (where, step, value)."""
    shown = [(name, step, value) for step, name, value in store.metrics(run.id) if name.startswith("epsilon")]
    result = run.result or {}
    steps = result.get("steps", run.progress_step)
    shown += [(f"result.epsilons.{name}", steps, value) for name, value in (result.get("epsilons") or {}).items()]
    if "epsilon" in result:
        shown.append(("result.epsilon", steps, result["epsilon"]))
    return shown


# ------------------------------------------------------------------ the checks


@pytest.mark.slow
def test_the_audit_covers_every_algorithm_schedules_pca_a_cancelled_run_and_stacks(audited):
    runs = audited[1]
    assert len(runs) >= 30
    assert {r.spec["algorithm"] for r in runs} == {
        "dpsgd",
        "aniso_dpsgd",
        "noisy_gd",
        "nonprivate",
        "expmech_stumps",
        "sq_laplace",
        "rwm_online",
        "rwm_linear",
    }
    assert sum(bool((r.result or {}).get("stack")) for r in runs) == 6
    assert any(r.status is RunStatus.CANCELLED for r in runs)
    assert any(len(r.plan.get("noise_phases") or []) > 1 for r in runs if r.plan)


def test_live_and_final_rdp_values_equal_dp_accountings_recomputation_at_every_step(audited):
    store, runs = audited
    checked = 0
    for run in runs:
        if run.spec["algorithm"] == "nonprivate" or not mechanism(run)[2]:
            continue  # pure ε-DP learners: RDP of their events is the engine's own formula, checked for validity below
        live = {step: value for step, name, value in store.metrics(run.id) if name == "epsilon"}
        expected = rdp_epsilons(run, sorted(live))
        for step, value in live.items():
            assert value == pytest.approx(expected[step], rel=1e-9, abs=1e-12), (run.id, run.spec, step)
            checked += 1
        if run.result and "epsilons" in run.result:
            final = rdp_epsilons(run, [run.result["steps"]])[run.result["steps"]]
            assert run.result["epsilons"]["rdp"] == pytest.approx(final, rel=1e-9), (run.id, run.spec)
    assert checked > 1000


def test_every_displayed_epsilon_is_at_least_the_true_epsilons_lower_bound(audited):
    store, runs = audited
    failures = []
    for run in runs:
        if run.spec["algorithm"] == "nonprivate":
            continue
        shown = displayed(store, run)
        bounds = lower_bounds(run, max(step for _, step, _ in shown))
        for where, step, value in shown:
            if not (math.isinf(value) or value >= bound_at(bounds, step) * (1 - 1e-9)):
                failures.append(
                    f"{run.id} {run.spec['algorithm']} {where} at step {step}: {value:.6g} < "
                    f"{bound_at(bounds, step):.6g}"
                )
    assert not failures, "\n".join(failures[:20])


def test_the_reported_epsilon_is_the_tightest_accountants_and_a_cancelled_run_reports_its_steps(audited):
    store, runs = audited
    for run in runs:
        result = run.result or {}
        if result.get("epsilons"):
            assert result["epsilon"] == min(result["epsilons"].values())
            assert result["epsilons"][result["accountant"]] == result["epsilon"]
    (cancelled,) = [r for r in runs if r.status is RunStatus.CANCELLED and not r.earlier_attempts]
    steps = cancelled.result["steps"] if cancelled.result else cancelled.progress_step
    assert 0 < steps < cancelled.total_steps
    live = [v for step, name, v in store.metrics(cancelled.id) if name == "epsilon" and step == steps]
    assert live and live[0] == pytest.approx(rdp_epsilons(cancelled, [steps])[steps], rel=1e-9)


def test_a_stacks_joint_epsilon_bounds_releasing_all_its_members(audited):
    """K members on one shared Poisson lot, each with its own Gaussian noise: together one sampled Gaussian at
    σ_joint = (Σ σ_k⁻²)^(−1/2) per step (the worst case, where every member's gradient reaches its clip norm),
    plus the members' up-front releases (counted once here, which only lowers the bound)."""
    runs = audited[1]
    stacks: dict[str, list[RunRecord]] = {}
    for run in runs:
        if (run.result or {}).get("stack"):
            stacks.setdefault(run.stack_id, []).append(run)
    assert len(stacks) == 2
    for members in stacks.values():
        stack = members[0].result["stack"]
        joint = stack.get("joint_epsilon", stack.get("joint_epsilon_rdp"))
        sigmas = np.array([[s for s, n in phase_sigmas(m.plan) for _ in range(n)] for m in members])
        sigma_joint = (1.0 / np.square(sigmas)).sum(axis=0) ** -0.5
        assert np.ptp(sigma_joint) == 0  # no schedules in these stacks
        q, steps = members[0].plan["sampling_rate"], members[0].plan["steps"]
        step = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(float(sigma_joint[0])))
        upfront = mechanism(members[0])[0]
        bound = lower_bound([*((event, 1) for event in upfront), (step, steps)], stack["joint_delta"])
        assert joint >= bound * (1 - 1e-9), (joint, bound)
        assert joint >= max(m.result["epsilon"] for m in members)


def test_releasing_the_best_of_a_stacked_grid_is_charged_its_stacks_shared_lots(audited):
    """A fixed grid that trained as one stack: picking its best looks at every member's transcript, and the
    members shared every Poisson lot, so the selection costs (at least) the joint mechanism: one sampled Gaussian at
    σ_joint per step, rebuilt here from the stored plans. Composing the members as independent runs is below it."""
    store, _ = audited
    checked = 0
    for sweep in store.list_sweeps():
        runs = [store.get_run(run_id) for run_id in sweep.run_ids]
        assert len({run.stack_id for run in runs}) == 1 and runs[0].stack_id is not None
        found = privacy_of_sweep(
            sweep.spec, [RunToRelease.of_record(r.spec, stack=r.stack_id, plan=r.plan) for r in runs]
        )
        sigmas = [s for run in runs for s, _ in phase_sigmas(run.plan)]
        sigma_joint = sum(s**-2 for s in sigmas) ** -0.5
        plan = runs[0].plan
        step = dp_event.PoissonSampledDpEvent(plan["sampling_rate"], dp_event.GaussianDpEvent(sigma_joint))
        upfront = [(event, 1) for event in mechanism(runs[0])[0]]  # one PCA release: the members share its key
        bound = lower_bound([*upfront, (step, plan["steps"])], found.delta)
        assert found.composition_epsilon >= bound * (1 - 1e-9), (found.composition_epsilon, bound)
        assert found.stacks == 1 and found.headline_epsilon == found.composition_epsilon
        independent = lower_bound(
            [*upfront * len(runs), (step, 0)] + [(mechanism(r)[1][0][0], plan["steps"]) for r in runs], found.delta
        )
        assert found.separate_epsilon >= independent * (1 - 1e-9)
        assert found.separate_epsilon < found.composition_epsilon  # sharing lots costs more than drawing apart
        checked += 1
    assert checked == 2


@pytest.mark.parametrize("noise", ["release", "reproducible"])
def test_a_restarted_run_is_charged_what_every_attempt_released(audited, noise):
    """Stopped after ≥ 40 (release mode) or ≥ 60 (lab mode) steps, then cancelled after ≥ 20 of its second attempt:
    the release-mode run released both attempts (fresh noise), the lab-mode run the longer one (the same noise).
    Every ε it shows is checked against dp-accounting above; here, that the plan carries the first attempt and
    the final ε is dp-accounting's RDP of everything released, above this attempt's own."""
    store, runs = audited
    (run,) = [
        r for r in runs if r.plan and r.plan.get("earlier_attempts") and r.spec.get("noise", "reproducible") == noise
    ]
    (first,) = run.plan["earlier_attempts"]
    assert first >= (40 if noise == "release" else 60)
    assert run.plan["earlier_noise"] == ("fresh" if noise == "release" else "replayed")
    assert [a["steps"] for a in store.get_run(run.id).earlier_attempts] == [first]
    steps = run.result["steps"]
    assert steps == 20 < first
    expected = rdp_epsilons(run, [steps])[steps]
    assert run.result["epsilons"]["rdp"] == pytest.approx(expected, rel=1e-9)
    restart = run.result["restart"]
    assert restart["earlier_attempts"] == [first]
    assert run.result["epsilon"] > restart["epsilon_this_attempt"]
    assert "Restarted" in run.result["privacy_statement"]
    live = {step: value for step, name, value in store.metrics(run.id) if name == "epsilon"}
    assert live[0] > 0  # the curve starts where the first attempt left off
    if noise == "release":
        alone = lower_bound([(e, 1) for e in mechanism(run)[0]] + counts_at(mechanism(run)[1], first + steps), 1e-5)
        assert run.result["epsilon"] >= alone  # at least first + steps steps of one run


def test_a_non_private_run_shows_no_finite_epsilon(audited):
    store, runs = audited
    (run,) = [r for r in runs if r.spec["algorithm"] == "nonprivate"]
    assert not [v for step, name, v in store.metrics(run.id) if name.startswith("epsilon") and math.isfinite(v)]
    assert run.result.get("epsilon") is None or math.isinf(run.result["epsilon"])
