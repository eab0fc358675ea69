"""Pre-training on a sharded set end to end, as the map-style stream is tested in
tests/test_train.py: a run preempted by SIGUSR1 mid-epoch resumes bit-identically, two
gloo processes (with a DataLoader worker) see the examples one process sees, the config
records exactly which examples the subset is, and bad examples are replaced, counted in
result.json and limited by data.skip_bad_samples. Shards are real JPEG tar files
(tests/test_data_shards.py); augmentation is on throughout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vitscale import record as rf
from vitscale.cli import main
from vitscale.config import resolve
from vitscale.data import build_dataset
from vitscale.data.registry import DatasetFormatError
from vitscale.train import Preempted, checkpoint, train

from .helpers.configs import tiny_config
from .helpers.datasets import bad_set, jpeg_bytes, write_jpeg_shards
from .helpers.runs import assert_same_run, rows_of, signal_at


def shard_config(root: Path, **sections) -> dict:
    """ViT-Pico/4 at 16 px on 30 of 35 JPEGs (a partial last shard), 8 steps of 8: the
    stream crosses two epoch boundaries (positions 30 and 60)."""
    config = tiny_config(
        model={"name": "ViT-Pico/4", "dropout": 0.0},  # 1 vs 2 processes: same masks
        data={"dataset": f"shards:{root}", "image_size": 16, "subset": 30},
        train={
            "steps": 8,
            "batch_size": 8,
            "precision": "fp32",
            "log_every": 1,
            "checkpoint_every": 4,
            "eval_every": None,
        },
        eval={"fewshot": {"datasets": []}, "upstream": {"examples": 6}},
    )
    for section, values in sections.items():
        config[section].update(values)
    return config


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    return write_jpeg_shards(tmp_path_factory.mktemp("shards"), shards=5, per_shard=7)


@pytest.fixture(scope="module")
def uninterrupted(shards, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("uninterrupted")
    result = train(shard_config(shards), run)
    assert result.status == rf.STATUS_DONE and result.skipped_samples == 0
    return run


def test_config_records_the_subset_exactly(shards, uninterrupted):
    config = rf.read_json(uninterrupted / rf.CONFIG)
    ds = build_dataset(f"shards:{shards}", "train", image_size=16, subset=30, seed=0)
    assert config["data"]["selection"] == ds.selection
    assert config["data"]["selection"]["examples"] == config["data"]["num_examples"] == 30
    assert config["data"]["selection"]["last_shard"]["take"] == 2  # 7 + 7 + 7 + 7 + 2
    assert resolve(config).data.dataset == f"shards:{shards}"  # config.json runs again
    result = rf.read_json(uninterrupted / rf.RESULT)
    assert rf.UPSTREAM_TOP1 in result["final"]  # upstream top-1 on the test shards


def test_sigusr1_mid_epoch_resumes_bit_identically(shards, uninterrupted, tmp_path, monkeypatch):
    """Step 6 reads positions 48-55, the middle of the second epoch; the checkpoint is
    at step 4, so the resumed run must compute, not replay, where the stream was."""
    with monkeypatch.context() as patch:
        signal_at(patch, 6)
        with pytest.raises(Preempted) as stopped:
            train(shard_config(shards), tmp_path)
    assert stopped.value.step == 6
    assert checkpoint.latest(tmp_path / rf.CHECKPOINTS).name.endswith("000000006")
    result = train(shard_config(shards, data={"num_workers": 1}), tmp_path)  # a worker now
    assert result.status == rf.STATUS_DONE and result.restarts == 1
    assert_same_run(uninterrupted, tmp_path)


def test_two_gloo_processes_read_what_one_reads(shards, uninterrupted, tmp_path):
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(shard_config(shards, data={"num_workers": 1})))
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    run = tmp_path / "p2"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    done = subprocess.run(
        [*launcher, "-m", "vitscale.cli", "train", str(path), "--workdir", str(run)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert rf.read_json(run / rf.RESULT)["num_processes"] == 2
    one, two = rows_of(uninterrupted), rows_of(run)
    assert [r[rf.STEP] for r in one] == [r[rf.STEP] for r in two] == list(range(1, 9))
    for a, b in zip(one, two, strict=True):
        assert a[rf.TRAIN_LOSS] == pytest.approx(b[rf.TRAIN_LOSS], rel=1e-5)


def test_bad_examples_are_counted_once_each(tmp_path):
    root = bad_set(tmp_path / "sh", {"jpg": jpeg_bytes(1)[:50], "cls": b"1"})
    run = tmp_path / "run"
    # every step is a whole epoch of the 8 examples, so every step replaces the bad one:
    # one bad example however often (its limit and resume: tests/test_own_data.py)
    config = shard_config(root, data={"subset": None, "skip_bad_samples": 1})
    config["train"] |= {"steps": 4, "checkpoint_every": 1}
    config["eval"]["upstream"] = {"examples": 0}
    result = train(config, run)
    assert result.status == rf.STATUS_DONE and result.skipped_samples == 1
    (skipped,) = result.skipped
    assert "train-000001.tar" in skipped and "img00099" in skipped
    assert "cannot decode the image" in skipped
    assert rf.read_json(run / rf.RESULT)["skipped_samples"] == 1


def test_cli_train_names_a_bad_example_in_one_line(tmp_path, capsys):
    root = bad_set(tmp_path / "sh", {"jpg": b"not an image", "cls": b"2"})
    config = shard_config(root, data={"subset": None})
    config["train"] |= {"steps": 2, "checkpoint_every": 2}  # within the run: no note
    config["optim"]["warmup_steps"] = 1
    config["eval"]["upstream"] = {"examples": 0}
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(config))
    assert main(["train", str(path), "--workdir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and "train-000001.tar" in line and "'img00099'" in line
    assert "skip_bad_samples" in line
    result = rf.read_json(tmp_path / "r" / rf.RESULT)
    assert result["status"] == rf.STATUS_FAILED and result["failed_step"] == 1


def test_decoding_on_the_device_trains_the_same_run(shards, uninterrupted, tmp_path, monkeypatch):
    """``data.decode: device``: the workers only read bytes, the trainer's process decodes,
    crops and flips them where it trains. On the CPU that is the same decoder and kernels,
    so the run is bit-identical to the workers' decoding, through a SIGUSR1 mid-epoch and
    a resume with a loader worker: the same examples, crops and flips at every position."""
    device = {"decode": "device"}
    with monkeypatch.context() as patch:
        signal_at(patch, 6)
        with pytest.raises(Preempted):
            train(shard_config(shards, data=device), tmp_path)
    result = train(shard_config(shards, data={**device, "num_workers": 1}), tmp_path)
    assert result.status == rf.STATUS_DONE and result.restarts == 1
    assert_same_run(uninterrupted, tmp_path)


def test_an_image_that_does_not_decode_on_the_device_is_named(tmp_path):
    """The workers found its bytes and label; the device's decoder finds it broken, and
    says which example and how to have such examples replaced."""
    root = bad_set(tmp_path / "bad", {"jpg": b"\xff\xd8 not a jpeg", "cls": b"1"})
    config = shard_config(root, data={"subset": None, "decode": "device"})
    config["eval"]["upstream"]["examples"] = 0
    config["train"].update(steps=3, batch_size=4)
    config["optim"]["warmup_steps"] = 1
    with pytest.raises(DatasetFormatError, match=r"img00099.*data\.decode: workers"):
        train(config, tmp_path / "run")
