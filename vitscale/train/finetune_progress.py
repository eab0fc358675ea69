"""Fine-tuning's share of a run's resumable state, under ``<run>/checkpoints/finetune/``.

Fig. 5 fine-tunes every cell on five datasets with a learning-rate grid each: up to 25
fine-tunes, hours at the paper's sizes. A time limit or preemption during them must not
repeat the phase in the next slice, so:

- ``results.json``: the score of every finished fine-tune (dataset, stage, learning
  rate), and the trainer's clock (wall-clock, per-phase time, restarts) as of the last
  write; rank 0 writes it atomically after each fine-tune;
- ``step_<n>/``: the checkpoint of the fine-tune a preemption signal stopped (model,
  SGD momentum, schedule, step), written like a pre-training checkpoint
  (:mod:`vitscale.train.checkpoint`) and removed once that fine-tune finishes.

Every process agrees on the signal after every step (on the CPU, as in pre-training), so
they all checkpoint and stop together; rank 0 reads what is done and which checkpoint to
go on from, and every process takes its answer (as in pre-training's resume): processes
that read alone could disagree after one transient read error, fine-tune from different
steps and hang at the next collective.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import record as rf
from . import checkpoint
from .runtime import from_rank0
from .signals import Preempted, PreemptionFlag

FOLDER = "finetune"
RESULTS = "results.json"


class FinetuneProgress:
    """:class:`vitscale.train.finetune.Progress` for one run."""

    def __init__(
        self,
        run_dir: Path,
        *,
        accelerator,
        preemption: PreemptionFlag,
        group,
        clock: Callable[[], dict[str, Any]],
    ) -> None:
        self.directory = Path(run_dir) / rf.CHECKPOINTS / FOLDER
        self.accelerator = accelerator
        self.preemption = preemption
        self.group = group  # vitscale.train.signals.agreement_group()
        self.clock = clock  # the trainer's progress (elapsed, time per phase, restarts) now
        saved = from_rank0(accelerator, read(run_dir) if self._rank == 0 else None)
        self.results: dict[str, float] = dict(saved.get("results", {}))

    @property
    def _rank(self) -> int:
        return self.accelerator.process_index

    def result(self, key: str) -> float | None:
        return self.results.get(key)

    def record(self, key: str, value: float) -> None:
        self.results[key] = value
        if self._rank == 0:
            self._write()
            for done in self.directory.glob(f"{checkpoint.PREFIX}*"):  # its stop checkpoint
                shutil.rmtree(done, ignore_errors=True)
        self.accelerator.wait_for_everyone()

    def resume(self, key: str) -> dict[str, Any] | None:
        mine = checkpoint.latest(self.directory) if self._rank == 0 else None
        latest = from_rank0(self.accelerator, mine)
        if latest is None:
            return None
        state, _ = checkpoint.load(latest, rank=self._rank)
        return state if state.get("key") == key else None

    def maybe_stop(self, key: str, step: int, state: Callable[[], dict[str, Any]]) -> None:
        if not self.preemption.agreed(self.group):
            return
        checkpoint.save(
            self.directory,
            step=step,
            state={"key": key, "step": step, **state()},
            accelerator=self.accelerator,
        )
        if self._rank == 0:
            self._write()
        self.accelerator.wait_for_everyone()
        raise Preempted(step, self.preemption.signal_name, during=f"fine-tuning {key}")

    def _write(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        rf.write_json_atomic(
            self.directory / RESULTS, {"results": self.results, "progress": self.clock()}
        )


def read(run_dir: Path) -> dict[str, Any]:
    """``results.json`` of a run (empty when fine-tuning never finished one)."""
    path = Path(run_dir) / rf.CHECKPOINTS / FOLDER / RESULTS
    try:
        return rf.read_json(path) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
