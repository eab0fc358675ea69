"""The scenes world (vitscale.data.scenes): pure per (task, split, index), labels that say
what the scene contains and never where, a transfer suite inside the upstream ranges."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vitscale.data import build_dataset
from vitscale.data.registry import dataset_names
from vitscale.data.scenes import contents as lay
from vitscale.data.scenes import render as rd
from vitscale.data.scenes import world as w
from vitscale.evals.fewshot import project

SCENE_TASKS = list(w.TASKS)


@pytest.mark.parametrize("name", SCENE_TASKS)
def test_an_image_depends_on_its_index_only(name):
    task = w.TASKS[name]
    whole = rd.render(task, "train", np.arange(40), 32)
    part = rd.render(task, "train", np.array([33, 7, 20]), 32)
    assert torch.equal(part.images, whole.images[[33, 7, 20]])
    assert torch.equal(part.targets, whole.targets[[33, 7, 20]])
    assert whole.images.shape == (40, 3, 32, 32)
    assert whole.images.min() >= -1 and whole.images.max() <= 1
    other = rd.render(task, "test", np.arange(40), 32)  # splits are separate streams
    assert not torch.equal(other.images, whole.images)


def test_every_task_is_a_dataset_by_name():
    for name in SCENE_TASKS:
        assert name in dataset_names()
        ds = build_dataset(name, "test", image_size=32)
        assert ds.multilabel == (name == w.UPSTREAM)
        assert len(ds.classes) == ds.num_classes
        batch = ds.__getitems__([0, 5])
        image, target = ds[5]
        assert torch.equal(image, batch.images[1]) and torch.equal(target, batch.targets[1])


def test_upstream_labels_say_what_the_scene_contains():
    task = w.TASKS[w.UPSTREAM]
    idx = np.arange(2000)
    scene = lay.decide(task, "train", idx)
    t = scene.targets
    registered = w.arrangements()[0]
    for i in range(len(idx)):
        parts = scene.part[i][scene.valid[i]]
        assert set(np.nonzero(t[i, w.LABEL_PARTS])[0]) == set(parts.tolist())
        count = int(scene.valid[i].sum())
        assert w.MIN_OBJECTS <= count <= w.MAX_OBJECTS
        assert np.nonzero(t[i, w.LABEL_COUNTS])[0].tolist() == [count - w.MIN_OBJECTS]
        assert t[i, w.LABEL_REPEAT] == (len(set(parts.tolist())) < count)
        # the arrangement the scene was made around is there, by the primary class
        made = lay.primary_class(task, idx[i : i + 1])[0]
        assert t[i, made] == 1
        a, b = registered[idx[i] % w.COMPOSITES]
        assert (scene.part[i, 0], scene.part[i, 1]) == (a, b)
        assert scene.cell[i, 1] == scene.cell[i, 0] + 1 and scene.cell[i, 0] % w.GRID < 2
    assert len(np.unique(scene.cell[scene.valid].reshape(-1))) == w.GRID * w.GRID
    # objects never share a cell
    for i in range(len(idx)):
        cells = scene.cell[i][scene.valid[i]]
        assert len(set(cells.tolist())) == len(cells)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    dx=st.integers(-2, 2),
    dy=st.integers(-2, 2),
)
def test_no_upstream_label_depends_on_absolute_position(seed, dx, dy):
    """The same parts moved together by whole cells (where they still fit) keep every
    label: parts, arrangements, counts and repeats are relative."""
    rng = np.random.default_rng(seed)
    b = 64
    part = rng.integers(0, w.UPSTREAM_PARTS, (b, w.MAX_OBJECTS))
    valid = np.arange(w.MAX_OBJECTS)[None] < rng.integers(2, w.MAX_OBJECTS + 1, (b, 1))
    rows = rng.integers(0, w.GRID, (b, w.MAX_OBJECTS))
    cols = rng.integers(0, w.GRID, (b, w.MAX_OBJECTS))
    rows2, cols2 = rows + dy, cols + dx
    fits = ((rows2 >= 0) & (rows2 < w.GRID) & (cols2 >= 0) & (cols2 < w.GRID) | ~valid).all(1)
    distinct = np.array(
        [len(set((rows * 3 + cols)[i][valid[i]])) == valid[i].sum() for i in range(b)]
    )
    keep = fits & distinct
    if not keep.any():
        return
    before = lay._upstream_targets(part[keep], valid[keep], (rows * 3 + cols)[keep])
    after = lay._upstream_targets(part[keep], valid[keep], (rows2 * 3 + cols2)[keep])
    assert np.array_equal(before, after)


@pytest.mark.parametrize("name", SCENE_TASKS)
def test_every_class_appears_in_every_cell(name):
    """Where a scene's objects are carries no information about its class: each class's
    first object visits every cell it can (every cell, or for an arrangement every cell
    with a right-hand neighbour)."""
    task = w.TASKS[name]
    n = 200 * min(task.num_classes, w.COMPOSITES) if task.kind != "parts" else 6000
    scene = lay.decide(task, "train", np.arange(n))
    cls = lay.primary_class(task, np.arange(n))
    first_cells = {w.GRID * r + c for r in range(w.GRID) for c in range(w.GRID)}
    if task.kind in ("upstream", "arrangements"):
        first_cells = {c for c in first_cells if c % w.GRID < w.GRID - 1}
    for k in np.unique(cls)[:10]:
        assert set(scene.cell[cls == k, 0].tolist()) == first_cells, k


def test_transfer_tasks_ask_for_new_combinations():
    registered, new = w.arrangements()
    seen = {tuple(p) for p in registered}
    assert len(new) == 2 * w.NEW_ARRANGEMENT_PAIRS
    for a, b in new:
        assert (a, b) not in seen and (b, a) not in seen and (b, a) in {tuple(p) for p in new}
    assert not set(w.part_ids("new")) & set(w.part_ids("upstream"))
    # the new parts are new bitmaps, not the upstream ones
    bank = w.bitmaps().reshape(len(w.bitmaps()), -1)
    assert len({row.tobytes() for row in bank}) == len(bank)
    parts = lay.decide(w.TASKS["scenes-parts"], "train", np.arange(300))
    assert (parts.part[:, 0] >= w.UPSTREAM_PARTS).all() and (parts.valid.sum(1) == 1).all()
    same = lay.decide(w.TASKS["scenes-same"], "train", np.arange(300))
    assert np.array_equal(same.part[:, 0] == same.part[:, 1], same.targets == 1)
    count = lay.decide(w.TASKS["scenes-count"], "train", np.arange(300))
    assert np.array_equal(count.valid.sum(1), w.COUNT_RANGE[0] + count.targets)
    assert set(w.CHANCE) == set(w.SUITE)
    assert w.CHANCE["scenes-parts"] == 1 / 100 and w.CHANCE["scenes-same"] == 0.5


def test_sigmoid_is_the_upstream_recipe():
    from vitscale.config.recipes import recipe

    assert recipe("ViT-Femto/8", "scenes")["train"]["loss"] == "sigmoid"
    assert recipe("ViT-Femto/8", "scenes-count")["train"]["loss"] == "softmax"


def test_the_fair_probe_projection_is_fixed_and_keeps_distances():
    x = torch.randn(400, 512, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    p1, p2 = project(x, 48), project(x, 48)
    assert p1.shape == (400, 48) and torch.equal(p1, p2)
    # Johnson-Lindenstrauss: squared norms kept on average (numpy as the oracle)
    ratio = (p1.numpy() ** 2).sum(1) / (x.numpy() ** 2).sum(1)
    assert abs(ratio.mean() - 1) < 0.05
    # a probe on 512 ResNet features and on 48 ViT features reads 48 numbers either way
    assert project(x[:, :48], 48).shape == (400, 48)


def test_the_preview_of_a_multilabel_world_fills_its_rows():
    """`vitscale data preview scenes`: rows are among the labels examples are filed under
    (the arrangements), each with its examples; no row is left empty."""
    from vitscale.data.preview import pick_examples

    ds = build_dataset(w.UPSTREAM, "train", image_size=32)
    classes, indices = pick_examples(ds, rows=4, cols=3)
    assert len(classes) == 4 and all(len(row) == 3 for row in indices)
    assert all(w.LABEL_ARRANGEMENTS.start <= c < w.LABEL_ARRANGEMENTS.stop for c in classes)
    for c, row in zip(classes, indices, strict=True):
        assert (ds.__getitems__(row).targets[:, c] == 1).all()


def test_a_batch_goes_to_the_device_in_one_copy():
    """Drawn on a GPU, a batch's layout (8 small arrays) and targets went
    over in 9 copies, each blocking. Now one, non-blocking (from pinned memory on a GPU;
    here the meta device, which computes shapes only, shows the copies)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Copies(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.made: list[bool] = []  # each copy to the device: non-blocking?

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            source = args[0] if args and isinstance(args[0], torch.Tensor) else None
            target = kwargs.get("device")
            if source is not None and source.is_cpu and target is not None and target.type != "cpu":
                self.made.append(bool(kwargs.get("non_blocking")))
            return func(*args, **kwargs)

    task = w.TASKS["scenes"]
    rd.render(task, "train", np.arange(8), 32, device="meta")  # its sprites: once per device
    with Copies() as copies:
        batch = rd.render(task, "train", np.arange(8, 16), 32, device="meta")
    assert batch.images.shape == (8, 3, 32, 32) and batch.targets.device.type == "meta"
    assert copies.made == [True]
