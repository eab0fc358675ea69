"""Run under ``torchrun --nproc_per_node 2`` by tests/faults/test_ranks.py: ``vitscale
train`` of one cell with one fault on one rank, which then dies of it as it would.

- ``raise-on-rank1``: rank 1's step 5 raises (its peer then loses it mid-step);
- ``checkpoint-write-on-rank0``: rank 0 cannot write the first checkpoint's state while
  rank 1 waits at the barrier after it.

    torchrun --standalone --nproc_per_node 2 rank_fault_driver.py CONFIG.json RUN FAULT
"""

from __future__ import annotations

import errno
import os
import sys

from vitscale.cli import main
from vitscale.train import checkpoint, step

RANK = int(os.environ["RANK"])
RAISE_AT = 5


def raise_on_rank1() -> None:
    real, calls = step.loss_fn, [0]

    def loss_or_raise(*args, **kwargs):
        calls[0] += 1
        if calls[0] == RAISE_AT:
            raise RuntimeError(f"injected on rank 1 at step {RAISE_AT}")
        return real(*args, **kwargs)

    if RANK == 1:
        step.loss_fn = loss_or_raise


def checkpoint_write_on_rank0() -> None:
    real = checkpoint._save

    def save(obj, path):
        if path.name == checkpoint.STATE:
            raise OSError(errno.EIO, "Input/output error (injected)", str(path))
        return real(obj, path)

    if RANK == 0:
        checkpoint._save = save


FAULTS = {"raise-on-rank1": raise_on_rank1, "checkpoint-write-on-rank0": checkpoint_write_on_rank0}

if __name__ == "__main__":
    FAULTS[sys.argv[3]]()
    sys.exit(main(["train", sys.argv[1], "--workdir", sys.argv[2]]))
