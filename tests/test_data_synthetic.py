"""The embedded synthetic family: determinism, disjoint splits, balance, resolutions.

An image is a pure function of (task, split, index, resolution): the same pixels whether it
is rendered alone, in any batch, through a subset view or in another process with another
number of threads.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vitscale.data import Batch, build_dataset, build_fewshot, collate, dataset_names
from vitscale.data.synthetic.render import SyntheticImages, render
from vitscale.data.synthetic.vocabulary import (
    GLYPH_GRID,
    MIN_GLYPH_DISTANCE,
    TASKS,
    TEXTURES,
    UPSTREAM,
    glyph_bank,
)


def digest(images: torch.Tensor) -> list[str]:
    return [hashlib.sha256(x.numpy().tobytes()).hexdigest()[:16] for x in images]


@settings(max_examples=15, deadline=None)
@given(
    task=st.sampled_from(sorted(TASKS)),
    split=st.sampled_from(["train", "val", "test"]),
    indices=st.lists(st.integers(0, 999), min_size=1, max_size=24),
    size=st.sampled_from([32, 37, 48]),
)
def test_an_image_does_not_depend_on_its_batch(task, split, indices, size):
    batch = render(TASKS[task], split, np.asarray(indices), size)
    alone = render(TASKS[task], split, np.asarray(indices[:1]), size)
    assert torch.equal(batch.images[0], alone.images[0])
    reversed_ = render(TASKS[task], split, np.asarray(indices[::-1]), size)
    assert torch.equal(reversed_.images.flip(0), batch.images)
    assert batch.targets.tolist() == [i % TASKS[task].num_classes for i in indices]


def test_dataset_item_equals_batch_row_and_chunking_is_invisible():
    ds = SyntheticImages("synthetic", split="train", image_size=32)
    idx = list(range(0, 600, 1))  # more than one render chunk (256 images at 32 px)
    batch = ds.__getitems__(idx)
    for i in (0, 255, 256, 599):
        image, target = ds[i]
        assert torch.equal(image, batch.images[i]) and int(target) == i % 256
    assert torch.equal(ds[-1][0], ds[len(ds) - 1][0])
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_same_pixels_in_another_process_with_other_threads():
    idx = [0, 7, 123_456_789, 999_999_999]
    code = (
        "import torch, hashlib, numpy as np; torch.set_num_threads({t});"
        "from vitscale.data.synthetic.render import render; from vitscale.data.synthetic.vocabulary import TASKS;"
        "b = render(TASKS['synthetic'], 'train', np.asarray({idx}), 48);"
        "print(' '.join(hashlib.sha256(x.numpy().tobytes()).hexdigest()[:16] for x in b.images))"
    )
    ours = digest(render(TASKS["synthetic"], "train", np.asarray(idx), 48).images)
    threads = 1 if torch.get_num_threads() > 1 else 2
    out = subprocess.run(
        [sys.executable, "-c", code.format(t=threads, idx=idx)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.split() == ours


def test_splits_are_disjoint_streams():
    for name, task in TASKS.items():
        n = 100
        seen = {}
        for split in ("train", "val", "test"):
            images = render(task, split, np.arange(n), 32).images
            hashes = digest(images)
            assert len(set(hashes)) == n, (name, split)  # no two images alike in a split
            seen[split] = set(hashes)
        assert not (seen["train"] & seen["val"]) and not (seen["train"] & seen["test"])
        assert not (seen["val"] & seen["test"])


def test_classes_are_balanced_and_documented():
    up = TASKS[UPSTREAM]
    assert up.num_classes == 256 and up.split_size("train") == 10**9
    for name, task in TASKS.items():
        assert name in dataset_names() and task.description
        for split, size in task.splits:
            ds = SyntheticImages(task, split=split, image_size=32)
            counts = np.bincount(
                ds.targets_of(np.arange(min(size, 100_000))), minlength=task.num_classes
            )
            assert counts.max() - counts.min() <= 1, (name, split)
    transfer = [t for t in TASKS.values() if t.name != UPSTREAM]
    # transfer classes differ from upstream ones: disjoint glyphs, or textures
    upstream_glyphs = set(up.glyphs)
    for t in transfer:
        assert not upstream_glyphs & set(t.glyphs)
        assert t.num_classes >= 10
    assert TASKS["synthetic-textures"].classes == TEXTURES
    assert TASKS["synthetic-pairs"].num_classes == 10  # 5 choose 2


def test_glyph_bank_properties():
    bank = glyph_bank(300)
    assert bank.shape == (300, GLYPH_GRID, GLYPH_GRID)
    assert np.array_equal(glyph_bank(20), bank[:20])  # a longer bank starts with the shorter
    flat = bank.reshape(300, -1)
    distance = (flat[:, None, :] != flat[None, :, :]).sum(-1)
    np.fill_diagonal(distance, 99)
    assert distance.min() >= MIN_GLYPH_DISTANCE
    assert bank[:, 0, :].any(1).all() and bank[:, :, -1].any(1).all()  # touches the sides


@pytest.mark.parametrize("size", [32, 33, 64, 100, 160, 224])
def test_any_resolution_32_to_224(size):
    ds = build_dataset("synthetic", "test", image_size=size)
    batch = ds.__getitems__([0, 1, 2])
    assert batch.images.shape == (3, 3, size, size) and batch.images.dtype == torch.float32
    assert batch.images.min() >= -1.0 and batch.images.max() <= 1.0
    assert batch.images.std() > 0.2  # full use of the range, not a washed-out image
    # the same scene at every resolution: downsampled large ~ small
    if size in (64, 224):
        small = build_dataset("synthetic", "test", image_size=32).__getitems__([0, 1, 2]).images
        pooled = torch.nn.functional.adaptive_avg_pool2d(batch.images, 32)
        assert (pooled - small).abs().mean() < 0.08


def test_out_of_range_resolution_and_augmentation_are_errors():
    with pytest.raises(ValueError, match=r"image_size must be in \[32, 224\], got 16"):
        build_dataset("synthetic", "train", image_size=16)
    with pytest.raises(ValueError, match="takes no augmentation"):
        build_dataset("synthetic", "train", image_size=32, augment=True)
    with pytest.raises(ValueError, match="balanced subsets need stored labels"):
        build_dataset("synthetic", "train", image_size=32, subset=100, class_balanced=True)


def test_build_dataset_synthetic_subsets_and_splits():
    ds = build_dataset("synthetic", "train", image_size=32, subset="30k", seed=2)
    assert len(ds) == 30_000 and ds.num_classes == 256 and ds.name == "synthetic"
    assert ds.classes[5] == "glyph-005" and not ds.multilabel
    counts = np.bincount(ds.targets_of(np.arange(len(ds))), minlength=256)
    assert counts.min() > 60 and counts.max() < 180  # ~117 per class, random sample
    small = build_dataset("synthetic", "train", image_size=32, subset="10k", seed=2)
    assert np.array_equal(small.base_indices(np.arange(10_000)), ds.base_indices(np.arange(10_000)))
    assert torch.equal(small[9_999][0], ds[9_999][0])
    # synthetic tasks have their own val stream; minitrain is all of train
    assert len(build_dataset("synthetic-glyphs", "val", image_size=32)) == 400
    assert len(build_dataset("synthetic-glyphs", "minitrain", image_size=32)) == 2000
    shots = build_fewshot("synthetic-glyphs", shots=5, seed=1, image_size=32)
    assert np.bincount(shots.targets_of(np.arange(len(shots)))).tolist() == [5] * 20
    assert isinstance(collate(shots.__getitems__([0, 1])), Batch)


def _fused_kernel():
    """The fused renderer, which CI must be able to build (a C++ compiler is part of the
    reference machine); elsewhere its absence only skips these comparisons."""
    from vitscale.data.synthetic import _fused

    kernel = _fused.kernel()
    if kernel is None:
        if os.environ.get("CI"):
            pytest.fail("the fused synthetic renderer could not be built in CI")
        pytest.skip("no C++ toolchain: the fused synthetic renderer is not available")
    return kernel


@settings(max_examples=12, deadline=None)
@given(
    task=st.sampled_from(["synthetic", "synthetic-glyphs", "synthetic-pairs"]),
    split=st.sampled_from(["train", "test"]),
    indices=st.lists(st.integers(0, 10**9 - 1), min_size=1, max_size=40),
    size=st.sampled_from([32, 45, 64, 97, 224]),
)
def test_fused_renderer_draws_the_reference_pixels(task, split, indices, size):
    """The C++ kernel and the torch operations produce the same bits (not just close)."""
    _fused_kernel()
    idx = np.asarray(indices)
    fused = render(TASKS[task], split, idx, size).images
    reference = render(TASKS[task], split, idx, size, fused=False).images
    assert torch.equal(fused, reference)


def test_fused_renderer_is_used_and_can_be_switched_off(monkeypatch):
    from types import SimpleNamespace

    from vitscale.data.synthetic import _fused

    module = _fused_kernel()
    calls = []

    def counted(*a):
        calls.append(len(a))
        return module.render_glyph_scenes(*a)

    spy = SimpleNamespace(glyph_scene_params=module.glyph_scene_params, render_glyph_scenes=counted)
    monkeypatch.setattr(_fused, "kernel", lambda: spy)
    render(TASKS["synthetic"], "train", np.arange(10), 32)
    render(TASKS["synthetic-textures"], "train", np.arange(10), 32)  # textures: torch only
    assert len(calls) == 1
    monkeypatch.undo()
    monkeypatch.setenv("VITSCALE_FUSED_RENDER", "0")
    assert _fused.kernel() is None


def test_without_a_compiler_the_torch_path_renders_with_a_warning(monkeypatch):
    import torch.utils.cpp_extension as cpp

    from vitscale.data.synthetic import _fused

    def no_compiler(**_):
        raise RuntimeError("Error building extension: g++: command not found")

    monkeypatch.setattr(cpp, "load_inline", no_compiler)
    monkeypatch.setattr(_fused, "_state", {})
    monkeypatch.setattr(_fused, "_built", lambda name: True)
    with pytest.warns(RuntimeWarning, match="could not be built.*g\\+\\+: command not found"):
        assert _fused.kernel() is None
    idx = np.arange(5)
    images = render(TASKS["synthetic"], "train", idx, 32).images
    assert torch.equal(images, render(TASKS["synthetic"], "train", idx, 32, fused=False).images)
