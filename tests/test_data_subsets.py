"""Subsets, few-shot samples and held-out slices: nesting, determinism, class balance.

Property tests (hypothesis) over sizes, seeds and label layouts, plus pinned values: a
subset is a pure function of ``(n, spec, seed)`` that any process on any machine must
reproduce bit for bit, so the exact indices are part of the contract.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vitscale.data import (
    SeededPermutation,
    fewshot_indices,
    holdout_split,
    parse_subset,
    subset_indices,
    subset_size,
)
from vitscale.data.subsets import HOLDOUT_SEED, balanced_order, parse_count

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(min_value=0, max_value=2**63 - 1)
sizes = st.integers(min_value=1, max_value=5_000)


@st.composite
def labelled(draw, min_per_class: int = 1):
    """A label array with uneven classes (shuffled), each with >= ``min_per_class``."""
    counts = draw(st.lists(st.integers(min_per_class, 40), min_size=1, max_size=12))
    labels = np.repeat(np.arange(len(counts)), counts)
    order = draw(st.permutations(range(len(labels))))
    return labels[np.asarray(order, dtype=np.int64)]


# ----------------------------------------------------------------------------- permutation


@FAST
@given(n=sizes, seed=seeds)
def test_seeded_permutation_is_a_bijection(n, seed):
    perm = SeededPermutation(n, seed)
    values = perm(np.arange(n))
    assert np.array_equal(np.sort(values), np.arange(n))
    # evaluated position by position, in any order or chunking
    picks = np.random.default_rng(seed % 2**32).integers(0, n, size=min(n, 50))
    np.testing.assert_array_equal(perm(picks), values[picks])


def test_seeded_permutation_is_not_the_identity_and_depends_on_seed():
    a, b = SeededPermutation(1000, 0)(np.arange(1000)), SeededPermutation(1000, 1)(np.arange(1000))
    assert (a == np.arange(1000)).mean() < 0.02 and (a == b).mean() < 0.02
    with pytest.raises(IndexError):
        SeededPermutation(10, 0)([10])


# ----------------------------------------------------------------------------- subsets


@FAST
@given(n=sizes, seed=seeds, data=st.data())
def test_subsets_nest_and_are_deterministic(n, seed, data):
    small = data.draw(st.integers(1, n))
    large = data.draw(st.integers(small, n))
    a, b = subset_indices(n, small, seed=seed), subset_indices(n, large, seed=seed)
    assert len(a) == small and len(b) == large and len(np.unique(b)) == large
    assert np.array_equal(b[:small], a)  # a prefix: every smaller subset inside every larger
    assert np.array_equal(subset_indices(n, large, seed=seed), b)
    assert b.min() >= 0 and b.max() < n
    # a fraction is the same prefix as the count it rounds to
    frac = small / n
    assert np.array_equal(
        subset_indices(n, frac, seed=seed), subset_indices(n, max(1, round(frac * n)), seed=seed)
    )


@FAST
@given(labels=labelled(), seed=seeds, data=st.data())
def test_class_balanced_subsets_nest_and_balance(labels, seed, data):
    n = len(labels)
    small = data.draw(st.integers(1, n))
    large = data.draw(st.integers(small, n))
    a = subset_indices(n, small, seed=seed, labels=labels)
    b = subset_indices(n, large, seed=seed, labels=labels)
    assert np.array_equal(b[:small], a) and len(np.unique(b)) == large
    totals = np.bincount(labels)
    for m in (small, large):
        got = np.bincount(labels[b[:m]], minlength=len(totals))
        # complete rounds r < R hold one example of every class that has an r-th one, so
        # classes not yet exhausted have R or R + 1 examples and none has more than R + 1
        alive = got < totals
        if alive.any():
            rounds = got[alive].min()
            assert got[alive].max() <= rounds + 1 and got.max() <= rounds + 1


def test_balanced_order_is_a_permutation_round_by_round():
    labels = np.asarray([0] * 5 + [1] * 3 + [2] * 1)
    order = balanced_order(labels, seed=4)
    assert sorted(order.tolist()) == list(range(9))
    assert sorted(labels[order[:3]].tolist()) == [0, 1, 2]  # round 0: one of each
    assert sorted(labels[order[3:5]].tolist()) == [0, 1]  # class 2 ran out
    assert labels[order[-2:]].tolist() == [0, 0]


def test_subsets_are_pinned_and_identical_in_another_process():
    """The exact indices are part of the contract (any process, any machine)."""
    assert subset_indices(10**9, 8, seed=0).tolist() == [
        344501645, 729903750, 598893261, 980532116, 471798430, 948157892, 597011745, 204498379,
    ]  # fmt: skip
    assert subset_indices(50_000, 6, seed=1).tolist() == [9624, 15450, 4171, 38450, 22430, 4087]
    code = (
        "import json, numpy as np; from vitscale.data import subset_indices, fewshot_indices;"
        "labels = np.arange(3000) % 7;"
        "print(json.dumps([subset_indices(10**9, '20k', seed=5)[-5:].tolist(),"
        " fewshot_indices(labels, 4, seed=2).tolist()]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    theirs = json.loads(out.stdout)
    assert theirs[0] == subset_indices(10**9, "20k", seed=5)[-5:].tolist()
    assert theirs[1] == fewshot_indices(np.arange(3000) % 7, 4, seed=2).tolist()


def test_paper_sized_subsets_are_cheap_and_nested():
    """Fig. 4's 9M < 30M < ... as prefixes of a 10^9 permutation, without materialising it
    (here 200k < 600k; larger ones cost only time)."""
    a = subset_indices(10**9, "200k", seed=7)
    b = subset_indices(10**9, "600k", seed=7)
    assert np.array_equal(b[: len(a)], a) and len(np.unique(b)) == 600_000


# ----------------------------------------------------------------------------- specs


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        (30000, 30000),
        (0.1, 0.1),
        (1.0, 1.0),
        ("9M", 9_000_000),
        ("30k", 30_000),
        ("1.5M", 1_500_000),
        ("1B", 10**9),
        ("10%", 0.1),
        ("30000", 30000),
        ("0.25", 0.25),
        (3e4, 30000),
        (np.int64(12), 12),
        (None, None),
    ],
)
def test_parse_subset(spec, parsed):
    assert parse_subset(spec) == parsed


@pytest.mark.parametrize("spec", [0, -3, 0.0, 1.5, "9X", "lots", True, "0.0005k", [3]])
def test_parse_subset_rejects(spec):
    with pytest.raises(ValueError, match="subset"):
        parse_subset(spec)


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (30000, 30000),
        ("30k", 30_000),
        ("2121M", 2_121_000_000),
        ("1.5B", 1_500_000_000),
        (3e4, 30000),
    ],
)
def test_parse_count(value, count):
    assert parse_count(value) == count


@pytest.mark.parametrize("value", [True, 0.5, "0.5", "lots", "1.0000005k"])
def test_parse_count_rejects(value):
    with pytest.raises(ValueError, match="train.examples: expected a whole number"):
        parse_count(value, what="train.examples")


def test_subset_larger_than_the_dataset_is_a_clear_error():
    with pytest.raises(ValueError, match="asks for 60,000 examples but the split has only 50,000"):
        subset_indices(50_000, 60_000)
    with pytest.raises(ValueError, match="but the split has only 1,000,000,000"):
        subset_size(10**9, "2B")
    assert subset_size(50_000, 0.02) == 1000 and subset_size(10, 0.01) == 1


# ----------------------------------------------------------------------------- few-shot


@FAST
@given(labels=labelled(min_per_class=3), seed=seeds, data=st.data())
def test_fewshot_k_per_class_nested_and_deterministic(labels, seed, data):
    smallest = np.bincount(labels).min()
    k = data.draw(st.integers(1, smallest))
    j = data.draw(st.integers(1, k))
    shots = fewshot_indices(labels, k, seed=seed)
    counts = np.bincount(labels[shots], minlength=labels.max() + 1)
    assert (counts == k).all() and len(np.unique(shots)) == len(shots)
    assert np.array_equal(fewshot_indices(labels, k, seed=seed), shots)
    fewer = fewshot_indices(labels, j, seed=seed)
    assert set(fewer.tolist()) <= set(shots.tolist())  # the 1-shot sample is in the 5-shot one


def test_fewshot_seeds_differ():
    labels = np.arange(2000) % 20
    samples = [set(fewshot_indices(labels, 5, seed=s).tolist()) for s in range(3)]
    assert all(len(s) == 100 for s in samples)
    assert len(samples[0] & samples[1]) < 30 and len(samples[1] & samples[2]) < 30


def test_fewshot_k_larger_than_the_smallest_class():
    labels = np.asarray([0] * 10 + [1] * 4 + [2] * 7)
    with pytest.raises(
        ValueError,
        match="5-shot needs 5 examples of every class, but class 1 has only 4; the largest possible is 4-shot",
    ):
        fewshot_indices(labels, 5)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            fewshot_indices(labels, bad)


# ----------------------------------------------------------------------------- held out


@FAST
@given(n=st.integers(20, 20_000), fraction=st.sampled_from([0.01, 0.02, 0.1, 0.3]))
def test_holdout_split_partitions_train_independently_of_the_run_seed(n, fraction):
    minitrain, val = holdout_split(n, fraction)
    assert len(val) == max(1, round(fraction * n))
    assert np.array_equal(np.sort(np.concatenate([minitrain, val])), np.arange(n))
    assert np.array_equal(
        val, np.sort(SeededPermutation(n, HOLDOUT_SEED)(np.arange(n))[n - len(val) :])
    )


def test_holdout_split_errors():
    with pytest.raises(ValueError, match="held-out fraction"):
        holdout_split(100, 1.0)
    with pytest.raises(ValueError, match="leaves none"):
        holdout_split(1, 0.5)
