"""Augmentation multiplicity end to end (the trainer's `augmentation_multiplicity` through `dpsgd_step(...,
augmentation=)` to `clipped_sum(..., multiplicity=K)`): the clipper sees K augmented copies of every example of
the lot and returns one norm per example, the run is charged exactly what the plain run is, and a lab run repeats
itself."""

import dataclasses

import torch

from engine.training import parse_spec, train
from engine.training.algorithms import dpsgd
from tests.helpers import fast_spec

CPU = torch.device("cpu")


def sigma_spec(**changes) -> dict:
    """The digits demo at σ = 1 for one epoch, with `changes` applied."""
    return {k: v for k, v in fast_spec(epochs=1).items() if k != "target_epsilon"} | {"noise_multiplier": 1.0} | changes


def without_times(records):
    return [dataclasses.replace(r, elapsed_s=None) for r in records]


def test_the_clipper_sees_k_copies_of_each_example_and_clips_one_gradient_per_example(monkeypatch):
    calls = []
    make_clipper = dpsgd.make_clipper

    def recording_clipper(model):
        clipper = make_clipper(model)
        clipped_sum = clipper.clipped_sum

        def recorded(x, y, clip_norm, *, multiplicity=1):
            out = clipped_sum(x, y, clip_norm, multiplicity=multiplicity)
            calls.append((len(x), len(y), multiplicity, len(out.norms), x.detach().clone()))
            return out

        clipper.clipped_sum = recorded
        return clipper

    monkeypatch.setattr(dpsgd, "make_clipper", recording_clipper)
    records = []
    train(parse_spec(sigma_spec(augmentation_multiplicity=4)), on_step=records.append, device=CPU)
    lots = [r.lot_size for r in records if r.step > 0]
    assert len(calls) == len(lots)
    for (rows, labels, multiplicity, norms, x), lot in zip(calls, lots, strict=True):
        assert multiplicity == 4 and rows == labels == 4 * lot and norms == lot
        copies = x.view(lot, 4, -1)
        assert not all(torch.equal(copies[i, 0], copies[i, 1]) for i in range(lot)), "copies should differ"


def test_an_augmented_run_is_charged_what_the_plain_run_is_and_repeats_itself():
    plain = train(parse_spec(sigma_spec()), device=CPU)
    first, second = [], []
    augmented = train(parse_spec(sigma_spec(augmentation_multiplicity=4)), on_step=first.append, device=CPU)
    train(parse_spec(sigma_spec(augmentation_multiplicity=4)), on_step=second.append, device=CPU)
    assert (augmented.epsilon, augmented.epsilons, augmented.steps) == (plain.epsilon, plain.epsilons, plain.steps)
    assert without_times(first) == without_times(second)
    assert 0.0 <= augmented.test_accuracy <= 1.0
