"""The public entry points: ``build_dataset``, ``build_fewshot``, ``finetune_splits``,
``check_available``, ``known_size``, and their errors (unknown names list the valid ones)."""

from __future__ import annotations

import contextlib
import inspect
import time

import numpy as np
import pytest
import torch

from vitscale import data
from vitscale.data import (
    DatasetNotFoundError,
    build_dataset,
    build_fewshot,
    check_available,
    dataset_names,
    finetune_splits,
    known_size,
    subset_indices,
)
from vitscale.data.registry import describe_datasets

from .helpers.datasets import SIZE, write_cifar10, write_image_tree


def test_public_signatures():
    sig = inspect.signature(build_dataset)
    assert list(sig.parameters)[:2] == ["name", "split"]
    for kw, default in (("root", None), ("subset", None), ("seed", 0)):
        assert sig.parameters[kw].kind is inspect.Parameter.KEYWORD_ONLY
        assert sig.parameters[kw].default == default
    assert sig.parameters["image_size"].default is inspect.Parameter.empty
    sig = inspect.signature(subset_indices)
    assert list(sig.parameters)[:2] == ["n_total", "subset"] and sig.parameters["seed"].default == 0
    for name in data.__all__:
        assert getattr(data, name) is not None


def test_registry_and_subsets_import_without_torch():
    import subprocess
    import sys

    code = (
        "import sys; import vitscale.data.subsets, vitscale.data.registry;"
        "from vitscale.data import subset_indices, dataset_names, parse_subset;"
        "subset_indices(100, 5); dataset_names();"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_names_and_splits_list_the_valid_ones():
    with pytest.raises(ValueError) as e:
        build_dataset("cifar-10", "train", image_size=32)
    message = str(e.value)
    for valid in ("synthetic", "synthetic-glyphs", "cifar10", "imagenet", "imagefolder:/path"):
        assert valid in message
    with pytest.raises(ValueError, match="valid: train, minitrain, val, test"):
        build_dataset("synthetic", "validation", image_size=32)
    with pytest.raises(ValueError, match="give the folder"):
        build_dataset("imagefolder:", "train", image_size=32)
    assert set(dataset_names()) >= {"synthetic", "cifar10", "cifar100", "pets", "flowers102"}


def test_describe_datasets_covers_every_name():
    rows = {r["name"]: r for r in describe_datasets()}
    assert set(rows) == set(dataset_names())
    assert rows["synthetic"]["splits"]["train"] == 10**9 and rows["cifar10"]["num_classes"] == 10
    assert rows["imagenet"]["val_fraction"] == 0.01


def test_subsets_of_a_real_source_nest_and_match_subset_indices(tmp_path):
    root = write_cifar10(tmp_path, per_batch=10)  # 50 train images, label i % 10
    kw = dict(root=root, image_size=SIZE, augment=False, seed=4)
    whole = build_dataset("cifar10", "train", **kw)
    small = build_dataset("cifar10", "train", subset=0.2, **kw)
    large = build_dataset("cifar10", "train", subset=30, **kw)
    assert (len(small), len(large)) == (10, 30)
    expected = subset_indices(50, 30, seed=4)
    assert large.base_indices(np.arange(30)).tolist() == expected.tolist()
    assert small.base_indices(np.arange(10)).tolist() == expected[:10].tolist()
    assert torch.equal(large[3][0], whole[int(expected[3])][0])
    balanced = build_dataset("cifar10", "train", subset=20, class_balanced=True, **kw)
    assert np.bincount(balanced.targets_of(np.arange(20))).tolist() == [2] * 10
    with pytest.raises(ValueError, match="asks for 51 examples but the split has only 50"):
        build_dataset("cifar10", "train", subset=51, **kw)


def test_fewshot_and_finetune_splits_on_a_real_source(tmp_path):
    root = write_image_tree(tmp_path / "set", ["a", "b", "c", "d"], {"train": 40, "test": 8})
    name = f"imagefolder:{root}"
    shots = build_fewshot(name, shots=3, seed=1, image_size=SIZE)
    assert np.bincount(shots.targets_of(np.arange(len(shots)))).tolist() == [3] * 4
    one = build_fewshot(name, shots=1, seed=1, image_size=SIZE)
    assert set(one.base_indices(np.arange(4)).tolist()) <= set(
        shots.base_indices(np.arange(12)).tolist()
    )
    other_seed = build_fewshot(name, shots=3, seed=2, image_size=SIZE)
    assert (
        shots.base_indices(np.arange(12)).tolist()
        != other_seed.base_indices(np.arange(12)).tolist()
    )
    # few-shot images are preprocessed for evaluation: deterministic, no augmentation
    assert torch.equal(shots[0][0], shots[0][0])
    with pytest.raises(ValueError, match="11-shot needs 11 examples of every class"):
        build_fewshot(name, shots=11, image_size=SIZE)

    minitrain, val = finetune_splits(name, image_size=SIZE, seed=5)
    assert (len(minitrain), len(val)) == (36, 4)  # 10% held out
    held = set(val.base_indices(np.arange(4)).tolist())
    kept = set(minitrain.base_indices(np.arange(36)).tolist())
    assert not held & kept and held | kept == set(range(40))
    again = finetune_splits(name, image_size=SIZE, seed=6)[1]
    assert set(again.base_indices(np.arange(4)).tolist()) == held  # never the run's seed
    assert len(finetune_splits(name, image_size=SIZE, val_fraction=0.25)[1]) == 10
    # val is evaluation-preprocessed, minitrain augmented
    assert torch.equal(val[0][0], val[0][0])
    assert val.base.images.transform.transforms[0].__class__.__name__ == "Resize"
    assert minitrain.base.images.transform.transforms[0].__class__.__name__ == "RandomResizedCrop"


def test_check_available_and_known_size(tmp_path, monkeypatch):
    monkeypatch.setenv("VITSCALE_DATA", str(tmp_path / "store"))
    assert check_available("synthetic", subset="9M") == []
    problems = check_available("synthetic", subset="2B")
    assert len(problems) == 1 and "only 1,000,000,000" in problems[0]
    [missing] = check_available("cifar10")
    assert str(tmp_path / "store") in missing and "download: true" in missing
    assert check_available("cifar10", download=True) == []
    write_cifar10(tmp_path / "store")
    assert check_available("cifar10") == []
    assert "valid:" in check_available("nope")[0]
    root = write_image_tree(tmp_path / "t", ["a", "b"], {"train": 4})
    assert check_available(f"imagefolder:{root}") == []  # its test split: held out of train/
    assert known_size("synthetic") == 10**9 and known_size("cifar100") == 50_000
    assert known_size("synthetic-glyphs") == 2000 and known_size(f"imagefolder:{root}") is None
    with pytest.raises(DatasetNotFoundError):
        build_dataset("imagenet", "train", image_size=SIZE)  # $VITSCALE_DATA/imagenet


class _Node:
    """One process of a launch as ``rank0_downloads_first`` uses its Accelerator: which
    process it is, and Accelerate's "goes first" (the others wait at a barrier until the
    first one is through), over threads standing in for processes."""

    def __init__(self, rank: int, *, per_node: int, world: int, barrier) -> None:
        self.num_processes = world
        self.is_main_process = rank == 0
        self.is_local_main_process = rank % per_node == 0
        self._barrier = barrier

    def wait_for_everyone(self) -> None:
        self._barrier.wait()

    @contextlib.contextmanager
    def _goes_first(self, first: bool):
        if not first:
            self.wait_for_everyone()
        yield
        if first:
            self.wait_for_everyone()

    def main_process_first(self):
        return self._goes_first(self.is_main_process)

    def local_main_process_first(self):
        return self._goes_first(self.is_local_main_process)


def test_each_node_downloads_once_before_its_other_processes_read():
    """With ``data.download`` only global rank 0 went first, so on a node
    whose data root is its own (a local disk) every process found nothing and fetched the
    archive into the same folder at once. Now each node's first process fetches first there
    too (on a shared root it finds rank 0's files), while the others wait."""
    import threading

    from vitscale.data import rank0_downloads_first

    nodes, per_node = 2, 2
    world = nodes * per_node
    barrier = threading.Barrier(world, timeout=10)
    fetcher: dict[int, int] = {}  # each node's root: who found it empty and fetched
    fetched, clashes = set(), []  # roots fetched whole; who read or fetched one half done
    lock = threading.Lock()

    def process(rank: int) -> None:
        node = rank // per_node
        accelerator = _Node(rank, per_node=per_node, world=world, barrier=barrier)
        with rank0_downloads_first(accelerator, download=True):
            with lock:
                if node not in fetcher:
                    fetcher[node] = rank
                elif node not in fetched:
                    clashes.append(rank)
            time.sleep(0.2)  # fetching, or reading
            if fetcher[node] == rank:
                fetched.add(node)

    threads = [threading.Thread(target=process, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not clashes, f"process(es) {clashes} found a root being fetched by another"
    assert fetcher == {0: 0, 1: 2}
