"""The step positions, the map-style order and the loader: how every process's batches
tile the global stream.

Union over ranks of one step == the global batch, shards disjoint, one process with the
whole batch sees the same examples as N processes, every epoch covers the dataset exactly
once, and resuming at step s yields what an uninterrupted run yields from s on.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vitscale.data import Batch, build_dataset, build_loader
from vitscale.data.stream import ShuffledOrder, StepPositions

from .helpers.datasets import write_cifar10, write_multilabel

PROPS = settings(max_examples=50, deadline=None)


def indices(n, *, batch_size, seed, num_replicas=1, rank=0, step):
    """Dataset indices of process ``rank`` at ``step``: its positions in the map-style order."""
    positions = StepPositions(batch_size=batch_size, num_replicas=num_replicas, rank=rank)
    return ShuffledOrder(num_examples=n, seed=seed)(positions.positions(step)).tolist()


def shards(n, batch, replicas, seed, step):
    return [
        indices(n, batch_size=batch, seed=seed, num_replicas=replicas, rank=r, step=step)
        for r in range(replicas)
    ]


@PROPS
@given(
    n=st.integers(1, 3000),
    batch=st.integers(1, 64),
    replicas=st.integers(1, 8),
    seed=st.integers(0, 2**40),
    step=st.integers(0, 500),
)
def test_ranks_tile_the_global_batch(n, batch, replicas, seed, step):
    parts = shards(n, batch, replicas, seed, step)
    assert all(len(p) == batch for p in parts)
    union = [i for p in parts for i in p]
    whole = indices(n, batch_size=batch * replicas, seed=seed, step=step)
    assert union == whole  # 1 process with the global batch == N processes, step by step
    if batch * replicas <= n and (step * batch * replicas) % n + batch * replicas <= n:
        assert len(set(union)) == len(union)  # within one epoch: disjoint shards
    assert all(0 <= i < n for i in union)


@PROPS
@given(
    n=st.integers(1, 500),
    batch=st.integers(1, 16),
    replicas=st.integers(1, 4),
    seed=st.integers(0, 2**40),
)
def test_every_epoch_covers_the_data_once_no_duplicates_no_gaps(n, batch, replicas, seed):
    global_batch = batch * replicas
    steps = -(-3 * n // global_batch)  # three epochs and a bit
    stream = [i for s in range(steps) for part in shards(n, batch, replicas, seed, s) for i in part]
    for epoch in range(3):
        chunk = stream[epoch * n : (epoch + 1) * n]
        assert sorted(chunk) == list(range(n)), epoch
    if n > 20:  # a fresh shuffle per epoch
        assert stream[:n] != stream[n : 2 * n]


@PROPS
@given(
    n=st.integers(1, 400),
    batch=st.integers(1, 16),
    replicas=st.integers(1, 4),
    seed=st.integers(0, 2**40),
    start=st.integers(0, 200),
)
def test_resume_at_step_s_equals_continuing(n, batch, replicas, seed, start):
    order = ShuffledOrder(num_examples=n, seed=seed)
    for rank in range(replicas):
        kw = dict(batch_size=batch, num_replicas=replicas, rank=rank)
        continuing = itertools.islice(iter(StepPositions(**kw)), start, start + 5)
        resumed = itertools.islice(iter(StepPositions(start_step=start, **kw)), 5)
        assert [order(p).tolist() for p in continuing] == [order(p).tolist() for p in resumed]


def test_seed_changes_the_order():
    a = indices(1000, batch_size=100, seed=0, step=0)
    b = indices(1000, batch_size=100, seed=1, step=0)
    assert len(set(a) & set(b)) < 40


def test_sampler_rejects_nonsense():
    with pytest.raises(ValueError, match="empty"):
        ShuffledOrder(num_examples=0, seed=0)
    with pytest.raises(ValueError, match="0 <= rank < num_replicas"):
        StepPositions(batch_size=4, num_replicas=2, rank=2)


def test_loader_over_a_synthetic_subset_shards_and_resumes():
    ds = build_dataset("synthetic", "train", image_size=32, subset=300, seed=3)
    whole = iter(build_loader(ds, batch_size=24, seed=3))
    per_rank = [
        iter(build_loader(ds, batch_size=8, seed=3, num_replicas=3, rank=r)) for r in range(3)
    ]
    resumed = iter(build_loader(ds, batch_size=24, seed=3, start_step=2))
    batches = [next(whole) for _ in range(3)]
    for step in range(3):
        parts = [next(it) for it in per_rank]
        assert isinstance(parts[0], Batch) and parts[0].images.shape == (8, 3, 32, 32)
        assert torch.equal(torch.cat([p.images for p in parts]), batches[step].images)
        assert torch.equal(torch.cat([p.targets for p in parts]), batches[step].targets)
    again = next(resumed)
    assert torch.equal(again.images, batches[2].images)
    # the examples are the subset's: subset position -> base index -> label
    expected = ds.targets_of(np.asarray(indices(len(ds), batch_size=24, seed=3, step=0)))
    assert batches[0].targets.tolist() == expected.tolist()


def test_loader_with_a_worker_renders_the_same_batches():
    ds = build_dataset("synthetic-textures", "train", image_size=32)
    inline = iter(build_loader(ds, batch_size=16, seed=1))
    worker_loader = build_loader(ds, batch_size=16, seed=1, num_workers=1)
    worker = iter(worker_loader)
    for _ in range(3):
        a, b = next(inline), next(worker)
        assert torch.equal(a.images, b.images) and torch.equal(a.targets, b.targets)
    del worker, worker_loader


class _Augmented(torch.utils.data.Dataset):
    """Examples whose augmentation draws from the loader worker's torch RNG, as a random
    crop does."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        return torch.rand(3, 2, 2), torch.tensor(i)


def test_loader_workers_of_two_ranks_augment_differently():
    """Each rank's workers are seeded from (seed, rank): two processes' workers drawing the
    same numbers would augment every step's examples alike."""
    loaders = [
        build_loader(_Augmented(), batch_size=4, seed=5, num_replicas=2, rank=r, num_workers=1)
        for r in (0, 1)
    ]
    draws = [next(iter(loader)).images for loader in loaders]
    assert not torch.equal(draws[0], draws[1])
    again = next(
        iter(
            build_loader(_Augmented(), batch_size=4, seed=5, rank=0, num_replicas=2, num_workers=1)
        )
    )
    assert torch.equal(again.images, draws[0])  # and from the same seed, the same draws


def test_loader_over_real_sources_collates_examples(tmp_path):
    root = write_cifar10(tmp_path / "cifar")
    train = build_dataset("cifar10", "train", root=root, image_size=24)  # augmented
    batch = next(iter(build_loader(train, batch_size=8, seed=0)))
    assert isinstance(batch, Batch) and batch.images.shape == (8, 3, 24, 24)
    assert batch.targets.dtype == torch.int64
    expected = train.targets_of(np.asarray(indices(20, batch_size=8, seed=0, step=0)))
    assert batch.targets.tolist() == expected.tolist()
    root = write_multilabel(tmp_path / "ml")
    ml = build_dataset(f"multilabel:{root}", "train", image_size=24, subset=6, seed=1)
    batch = next(iter(build_loader(ml, batch_size=6, seed=0, num_replicas=1)))
    assert batch.targets.shape == (6, 4) and batch.targets.dtype == torch.float32
    assert (batch.targets.sum(1) >= 1).all()
