"""The pre-training stream's order, pinned: which example every (seed, step, rank) reads.

Recorded from the stream as it was before the map-style and the sharded streams became
one implementation (the numbers below are that code's output, not derived
here): a resumed run, and every run already in a results folder, depends on them. The
cases cross epoch boundaries inside a batch, several processes, resumes and, for shards,
seeded windows of shards, a DataLoader worker and a replaced bad example. The pixel
digests are the glyph world's at its WORLD_SEED (pinned in test_data_synthetic.py): they
change with it, the order never does.
"""

from __future__ import annotations

import hashlib

import pytest
import torch
from torch.utils.data import Dataset

from vitscale.data import build_dataset, build_loader

from .helpers.datasets import bad_set, write_jpeg_shards


class _Ids(Dataset):
    """Example ``i`` has target ``i``: a batch's targets are the indices it read."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(1), torch.tensor(i)


def _batches(dataset, steps: int, **kw) -> list:
    batches = iter(build_loader(dataset, **kw))
    return [next(batches) for _ in range(steps)]


def _digest(images: torch.Tensor) -> str:
    return hashlib.sha256(images.numpy().tobytes()).hexdigest()[:16]


@pytest.mark.parametrize(
    "kw, expected",
    [  # 10 examples, a global batch of 12 or 5: an epoch boundary inside most batches
        (
            dict(batch_size=4, seed=7, num_replicas=3, rank=1, start_step=0),
            [[8, 0, 4, 5], [3, 5, 6, 4], [3, 6, 6, 9]],
        ),
        (
            dict(batch_size=4, seed=7, num_replicas=3, rank=2, start_step=5),
            [[9, 6, 0, 6], [1, 0, 3, 6], [9, 7, 5, 4]],
        ),
        (
            dict(batch_size=5, seed=2**40 + 3, start_step=2),
            [[9, 4, 5, 8, 6], [7, 2, 0, 3, 1], [7, 0, 3, 2, 5]],
        ),
    ],
)
def test_map_style_order(kw, expected):
    assert [b.targets.tolist() for b in _batches(_Ids(10), 3, **kw)] == expected


@pytest.mark.parametrize(
    "kw, targets, digests",
    [  # a subset of 50, a global batch of 24
        (
            dict(batch_size=8, seed=3, num_replicas=3, rank=0, start_step=0),
            [
                [64, 191, 44, 254, 107, 73, 105, 44],
                [170, 199, 9, 107, 16, 251, 172, 204],
                [87, 179, 37, 179, 191, 220, 105, 251],
            ],
            ["e60d30c11ef2a59b", "ab2c111bae4d2abc", "db78d9882588ad05"],
        ),
        (
            dict(batch_size=8, seed=3, num_replicas=3, rank=2, start_step=2),
            [
                [160, 16, 43, 3, 151, 107, 172, 55],
                [44, 87, 3, 133, 200, 99, 254, 116],
                [107, 133, 199, 73, 44, 16, 43, 28],
            ],
            ["b7594c41e96b3804", "f447117144a8aae9", "48a6948cb3f44abe"],
        ),
    ],
)
def test_synthetic_subset_order(kw, targets, digests):
    ds = build_dataset("synthetic", "train", image_size=32, subset=50, seed=3)
    batches = _batches(ds, 3, **kw)
    assert [b.targets.tolist() for b in batches] == targets
    assert [_digest(b.images) for b in batches] == digests  # pixels are pinned portably


@pytest.fixture(scope="module")
def numbered_shards(tmp_path_factory):
    """6 train shards of 5 examples; example ``i`` (in writing order) has class ``i``."""
    return write_jpeg_shards(
        tmp_path_factory.mktemp("shards"), shards=6, per_shard=5, test=1, classes=35
    )


@pytest.mark.parametrize(
    "kw, expected",
    [  # 23 of 30 examples (4 whole shards and 3 of a fifth), windows of 2 shards
        (
            dict(batch_size=4, seed=5, num_replicas=2, rank=0, start_step=0),
            [[1, 3, 5, 7], [9, 6, 10, 20], [22, 11, 15, 16]],
        ),
        (
            dict(batch_size=4, seed=5, num_replicas=2, rank=1, start_step=4),
            [[23, 10, 20, 11], [0, 1, 10, 11], [3, 0, 22, 15]],
        ),
        (
            dict(batch_size=7, seed=11, start_step=1, num_workers=1),
            [[1, 23, 15, 18, 19, 21, 22], [20, 17, 24, 16, 9, 7, 6], [5, 8, 2, 1, 21, 20, 4]],
        ),
    ],
)
def test_sharded_order(numbered_shards, kw, expected):
    ds = build_dataset(
        f"shards:{numbered_shards}", "train", image_size=16, subset=23, seed=2, shuffle_shards=2
    )
    assert ds.selection["shards"] == 5 and ds.selection["last_shard"]["take"] == 3
    assert [b.targets.tolist() for b in _batches(ds, 3, **kw)] == expected


def test_a_replaced_example_keeps_the_order(tmp_path):
    root = bad_set(tmp_path / "sh", {"jpg": b"broken", "cls": b"1"})
    ds = build_dataset(f"shards:{root}", "train", image_size=16, skip_bad_samples=2)
    batches = _batches(ds, 2, batch_size=8, seed=0)
    assert [b.targets.tolist() for b in batches] == [
        [3, 3, 0, 0, 1, 2, 1, 0],
        [1, 2, 2, 3, 0, 1, 3, 0],
    ]
    for batch in batches:
        (skip,) = batch.skipped
        assert skip.startswith(f"{root}/train-000001.tar: key 'img00099': cannot decode")
