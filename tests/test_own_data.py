"""A researcher's own data, as issue 31 found it (its data items 5, 6 and 10): a small
ImageFolder of generated JPEGs with a corrupt file, sharded by ``vitscale data shard``,
trained on with ``data.skip_bad_samples``; a folder without ``test/``. Asserted on the
CLI's real output and exit codes, and on the run folder.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from vitscale.cli import main

from .helpers.datasets import write_image_tree, write_jpeg_shards


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
