"""A researcher's own data, as a newcomer brings it: a small
ImageFolder of generated JPEGs with a corrupt file, sharded by ``vitscale data shard``,
trained on with ``data.skip_bad_samples``; a folder without ``test/``. Asserted on the
CLI's real output and exit codes, and on the run folder.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from vitscale.cli import main
from vitscale.cli.train import EXIT_FAILED, EXIT_PREEMPTED
from vitscale.train import pretrain

from .helpers.configs import tiny_config
from .helpers.datasets import write_image_tree, write_jpeg_shards
from .helpers.runs import signal_at


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --------------------------------------------------------------------- item 6: modes


@pytest.fixture
def group_umask():
    """A group-sharing umask (002) for the test, the old one back after it."""
    old = os.umask(0o002)
    yield 0o002
    os.umask(old)


def test_index_files_get_the_shards_permissions(tmp_path, group_umask):
    """Every file ``data shard`` and ``data index`` write gets the tar shards' mode (664
    under umask 002); before, index.json and .shard-plan.json kept mkstemp's 600."""
    mask = group_umask
    tree = write_image_tree(tmp_path / "fruit", ["apple", "pear"], {"train": 6, "test": 2})
    dest = tmp_path / "shards"
    assert main(["data", "shard", f"imagefolder:{tree}", str(dest), "--shard-size", "4"]) == 0
    expected = 0o666 & ~mask
    assert _mode(dest / "train-000000.tar") == expected
    assert _mode(dest / "index.json") == expected
    assert _mode(dest / ".shard-plan.json") == expected
    made = write_jpeg_shards(tmp_path / "elsewhere", shards=2, per_shard=3)
    (made / "index.json").unlink()
    assert main(["data", "index", str(made)]) == 0
    assert _mode(made / "index.json") == _mode(made / "train-000000.tar") == expected


# --------------------------------------------------------------------- item 5: counting

CORRUPT = "train/apple/0002.jpg"


def _own_tree(root: Path, *, train: int = 9) -> Path:
    """Two classes of JPEGs, one of them corrupt (``CORRUPT``: not an image at all)."""
    tree = write_image_tree(root, ["apple", "pear"], {"train": train, "test": 2})
    (tree / CORRUPT).write_bytes(b"not an image, though named .jpg")
    return tree


def _cell(tmp_path: Path, dataset: str, **data) -> Path:
    """A cell file: ViT-Pico/4 at 16 px, batches of 8, 4 steps, a checkpoint every 2."""
    config = tiny_config(
        model={"name": "ViT-Pico/4", "dropout": 0.0},
        data={"dataset": dataset, "image_size": 16, "subset": None, **data},
        train={"steps": 4, "batch_size": 8, "log_every": 1, "checkpoint_every": 2},
        optim={"warmup_steps": 1},
        eval={"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
    )
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(config))
    return path


def test_one_bad_image_counts_once_across_epochs_and_a_resume(tmp_path, capsys, monkeypatch):
    """One corrupt JPEG among 9, met in each of the run's four epochs: it is one bad
    example, within data.skip_bad_samples: 1, before and after a preemption (before, the
    run stopped at "2 bad examples replaced, more than data.skip_bad_samples=1")."""
    tree = _own_tree(tmp_path / "fruit")
    shards = tmp_path / "shards"
    assert main(["data", "shard", f"imagefolder:{tree}", str(shards), "--shard-size", "4"]) == 0
    cell, run = _cell(tmp_path, f"shards:{shards}", skip_bad_samples=1), tmp_path / "run"
    with monkeypatch.context() as patch:
        signal_at(patch, 3)
        assert main(["train", str(cell), "--workdir", str(run)]) == EXIT_PREEMPTED
    first = capsys.readouterr().err
    assert first.count("warning: replaced a bad example") == 1, first
    assert main(["train", str(cell), "--workdir", str(run)]) == 0
    assert "\ndone: " in capsys.readouterr().out
    result = json.loads((run / "result.json").read_text())
    assert result["restarts"] == 1 and result["skipped_samples"] == 1
    (skipped,) = result["skipped"]
    assert "'train/apple/0002_jpg'" in skipped


class _Gather:
    """Two processes' accelerator as ``_check_health`` sees it from rank 0."""

    num_processes = 2

    def __init__(self, other: torch.Tensor) -> None:
        self.other = other

    def gather(self, flags: torch.Tensor) -> torch.Tensor:
        return torch.cat([flags, self.other])


def test_processes_count_the_union_of_what_each_replaced(monkeypatch):
    """Rank 0 replaced A; rank 1 replaced A (the next epoch, its slice) and B: two
    distinct examples for the run, on every process, asked for only when one found some."""
    a, b = "s-000001.tar: key 'a': bad", "s-000002.tar: key 'b': bad"
    asked = []
    monkeypatch.setattr(
        pretrain, "from_every_rank", lambda acc, mine: asked.append(mine) or [mine, [a, b]]
    )

    def run(limit: int, mine: dict, theirs: float):
        return SimpleNamespace(
            accelerator=_Gather(torch.tensor([0.0, theirs])),
            world=2,
            device=torch.device("cpu"),
            progress={"skipped": []},
            cfg=SimpleNamespace(data=SimpleNamespace(skip_bad_samples=limit)),
            step=3,
        ), pretrain._Between(first_bad=torch.zeros((), dtype=torch.int64), skipped=mine)

    quiet, between = run(2, {}, 0.0)
    pretrain._check_health(quiet, between, torch.tensor(1.0))
    assert asked == [] and quiet.progress["skipped"] == []
    two, between = run(2, {a: None}, 2.0)
    pretrain._check_health(two, between, torch.tensor(1.0))
    assert two.progress["skipped"] == [a, b] and between.skipped == {}
    over, between = run(1, {a: None}, 2.0)
    with pytest.raises(pretrain.TrainingFailed, match="^2 distinct bad examples replaced"):
        pretrain._check_health(over, between, torch.tensor(1.0))


def test_more_distinct_bad_images_than_allowed_stop_until_the_limit_is_raised(tmp_path, capsys):
    """Two corrupt JPEGs (in one batch), data.skip_bad_samples: 1: the run stops at the
    second distinct one; raised to 2, the same cell runs to the end with both counted once
    (before, the stream stopped at "more than 1 bad examples in one batch", and with 2 the
    count went on with every epoch's encounters and stopped it again)."""
    tree = _own_tree(tmp_path / "fruit")
    (tree / "train/pear/0005.jpg").write_bytes(b"")
    shards = tmp_path / "shards"
    assert main(["data", "shard", f"imagefolder:{tree}", str(shards), "--shard-size", "4"]) == 0
    run = tmp_path / "run"
    cell = _cell(tmp_path, f"shards:{shards}", skip_bad_samples=1)
    assert main(["train", str(cell), "--workdir", str(run)]) == EXIT_FAILED
    out = capsys.readouterr()
    assert "2 distinct bad examples replaced, more than data.skip_bad_samples=1" in out.err
    cell = _cell(tmp_path, f"shards:{shards}", skip_bad_samples=2)
    assert main(["train", str(cell), "--workdir", str(run)]) == 0
    result = json.loads((run / "result.json").read_text())
    assert (
        result["status"] == "done"
        and result["skipped_samples"] == 2
        and len(result["skipped"]) == 2
    )
