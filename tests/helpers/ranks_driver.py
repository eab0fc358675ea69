"""Run under ``torchrun --nproc_per_node 2`` by tests/faults/test_ranks.py: several runs of
one tiny cell in one launch (a launch costs seconds of start-up), each rank writing what it
saw to ``<out>/rank<r>.json``: a run uninterrupted (``whole``: the first dropout mask each
rank drew recorded), then the same run stopped and resumed (``stopped``). The faults are
injected on one rank only, in this process:

- ``stopped``: rank 0 alone gets SIGUSR1 during step 7 (the ranks must agree to stop),
  and rank 1's filesystem lists step 7's checkpoint as there before it is (a stale entry);
- ``load fails on rank 1``: resuming it, rank 1 cannot read its checkpoint files;
- ``verify fails on rank 1``: resuming it again, rank 1 alone would find the latest
  checkpoint unreadable (a transient read error) if it looked.

Then a run that fine-tunes (``finetune``): rank 0 alone gets SIGUSR1 during fine-tuning
step 2; resuming it, rank 1 alone would find no fine-tuning checkpoint if it looked (a
listing that lags on a shared filesystem): the step each rank goes on from.

Last, a run with ``data.download`` is set up and opened (``download``): when each rank
built its datasets; the stop signal's group is created as beside NCCL: its timeout; and
the training loop's stop check, between sync steps, with a signal on rank 0 alone at step
:data:`SIGNAL_STEP`: the step each rank stops at.

    torchrun --standalone --nproc_per_node 2 ranks_driver.py CONFIG.json OUT
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys
import time
from pathlib import Path

import torch.nn.functional as F

from vitscale import record as rf
from vitscale.evals import transfer
from vitscale.train import Preempted, checkpoint, finetune_progress, run, step, train
from vitscale.train.signals import PreemptionFlag

RANK = int(os.environ.get("RANK", "0"))  # torchrun sets it
STOP_AT = 7  # between the periodic checkpoints at 4 and 8
STOP_GROUP_TIMEOUT_S = 4321.0  # a process group's timeout no default has


def main(config: dict, out: Path) -> None:
    seen: dict = {}
    with _Patch(F, "dropout", _recording_first_mask(seen), ranks=(0, 1)):
        train(config, out / "whole")
    stopped = out / "stopped"
    with (
        _on_rank0(step, "loss_fn", _signal_at(STOP_AT)),
        _on_rank1(pathlib.Path, "exists", _listed(checkpoint._name(STOP_AT))),
    ):
        try:
            train(config, stopped)
        except Preempted as e:
            seen["stopped"] = e.step
    seen["stopped_files"] = sorted(os.listdir(stopped / rf.CHECKPOINTS / checkpoint._name(STOP_AT)))
    with _on_rank1(checkpoint, "load", _fails):
        try:
            train(config, stopped)
        except checkpoint.CheckpointError as e:
            seen["load_error"] = str(e)
            if RANK == 0:  # written by rank 0 before it raised
                seen["load_result"] = rf.read_json(stopped / rf.RESULT)
    unreadable = _latest_unreadable(stopped / rf.CHECKPOINTS)
    with _on_rank1(checkpoint, "verify", unreadable), _recording_resume(seen):
        seen["status"] = train(config, stopped).status
    seen["finetune"] = _finetune_stopped_and_resumed(config, out / "finetune")
    seen["builds"] = _builds_when_downloading(config, out / "download")
    seen["stop_group_timeout_s"] = _stop_group_timeout_beside_nccl()
    seen["stopped_between_syncs"] = _stop_between_sync_steps()
    (out / f"rank{RANK}.json").write_text(json.dumps(seen))


FINETUNE_STOP_AT = 2  # of FINETUNE_STEPS
FINETUNE_STEPS = 4


def _finetune_stopped_and_resumed(config: dict, run_dir: Path) -> dict:
    """Two pre-training steps, then one fine-tune stopped at step :data:`FINETUNE_STOP_AT`
    (the signal on rank 0 only) and resumed with rank 1 blind to the fine-tuning
    checkpoints: the step it stopped at, the step each rank resumed from, the status."""
    config = config | {
        "train": config["train"] | {"steps": 2, "checkpoint_every": None},
        "optim": config["optim"] | {"warmup_steps": 1},
        "eval": config["eval"]
        | {
            "finetune": {
                "datasets": ["synthetic-textures"],
                "steps": FINETUNE_STEPS,
                "batch_size": 16,
                "lrs": [0.01],
                "test_examples": 32,
            }
        },
    }
    seen: dict = {}
    pretraining = config["train"]["steps"]
    with _on_rank0(step, "loss_fn", _signal_at(pretraining + FINETUNE_STOP_AT)):
        try:
            train(config, run_dir)
        except Preempted as e:
            seen["stopped"] = e.step
    real_resume = finetune_progress.FinetuneProgress.resume

    def resume(self, key):
        state = real_resume(self, key)
        seen["resumed_at"] = None if state is None else state["step"]
        return state

    finetune_progress.FinetuneProgress.resume = resume
    try:
        with _on_rank1(checkpoint, "latest", lambda real: lambda directory: None):
            seen["status"] = train(config, run_dir).status
    finally:
        finetune_progress.FinetuneProgress.resume = real_resume
    return seen


def _stop_group_timeout_beside_nccl() -> float:
    """The timeout of the stop signal's gloo group as a run on NCCL creates it (the launch
    is gloo: the default group's backend is said to be NCCL while it is created)."""
    import datetime as dt

    import torch
    import torch.distributed as dist

    from vitscale.train import signals

    with _Patch(dist, "get_backend", lambda real: lambda *a: "nccl", ranks=(0, 1)):
        group = signals.agreement_group(timeout=dt.timedelta(seconds=STOP_GROUP_TIMEOUT_S))
    return group._get_backend(torch.device("cpu")).options._timeout.total_seconds()


SIGNAL_STEP, STEP_S, SYNC_EVERY = 5, 0.25, 24


def _stop_between_sync_steps() -> int | None:
    """The step at which :class:`~vitscale.train.signals.StopCheck` says stop, with steps
    of :data:`STEP_S`, sync steps every :data:`SYNC_EVERY` and rank 0 alone signalled at
    :data:`SIGNAL_STEP`."""
    import torch.distributed as dist

    from vitscale.train.signals import StopCheck

    flag = PreemptionFlag()
    check = StopCheck(flag, dist.group.WORLD)
    for at in range(1, SYNC_EVERY + 1):
        time.sleep(STEP_S)
        flag.requested |= RANK == 0 and at == SIGNAL_STEP
        if check.after_step(sync=at % SYNC_EVERY == 0):
            return at
    return None


def _builds_when_downloading(config: dict, run_dir: Path) -> list:
    """Set up a run with ``data.download`` (and its upstream evaluation) and open it:
    ``[name, split, started, ended]`` of every dataset it built, each build taking 0.3 s
    longer (as a download would)."""
    builds = []

    def wrap(real):
        def build(name, split, **kwargs):
            started = time.time()
            time.sleep(0.3)
            dataset = real(name, split, **kwargs)
            builds.append([name, split, started, time.time()])
            return dataset

        return build

    config = config | {
        "data": config["data"] | {"download": True},
        "eval": config["eval"] | {"upstream": {"examples": 32}},
    }
    both = (0, 1)
    with (
        _Patch(run, "build_dataset", wrap, ranks=both),
        _Patch(transfer, "build_dataset", wrap, ranks=both),
    ):
        opened = run.setup(config, run_dir, PreemptionFlag())
        opened.open()
        opened.tracker.close()
    return builds


class _Patch:
    """``module.name = value`` for the duration, on the ranks ``ranks`` only."""

    def __init__(self, module, name: str, value, *, ranks: tuple[int, ...]) -> None:
        self.module, self.name, self.value, self.ranks = module, name, value, ranks

    def __enter__(self) -> None:
        self.real = getattr(self.module, self.name)
        if RANK in self.ranks:
            setattr(self.module, self.name, self.value(self.real))

    def __exit__(self, *exc) -> None:
        setattr(self.module, self.name, self.real)


def _on_rank0(module, name: str, value) -> _Patch:
    return _Patch(module, name, value, ranks=(0,))


def _on_rank1(module, name: str, value) -> _Patch:
    return _Patch(module, name, value, ranks=(1,))


def _listed(name: str):
    """``Path.exists`` that says yes for every path called ``name``."""

    def wrap(real):
        return lambda path: path.name == name or real(path)

    return wrap


def _signal_at(call: int):
    def wrap(real):
        calls = [0]

        def loss_then_signal(*args, **kwargs):
            calls[0] += 1
            if calls[0] == call:
                os.kill(os.getpid(), signal.SIGUSR1)
            return real(*args, **kwargs)

        return loss_then_signal

    return wrap


def _recording_first_mask(seen: dict):
    """Record which units the first dropout in training dropped (its zeros)."""

    def wrap(real):
        def dropout(x, p=0.5, training=True, inplace=False):
            y = real(x, p, training, inplace)
            if training and p > 0 and "mask" not in seen:
                seen["mask"] = y.eq(0).flatten()[:4096].tolist()
            return y

        return dropout

    return wrap


def _fails(real):
    def load(path, *, rank):
        raise OSError(5, "Input/output error (injected)", str(path / f"rng_rank{rank}.pt"))

    return load


def _latest_unreadable(directory: Path):
    def wrap(real):
        latest = checkpoint.latest(directory)

        def verify(path):
            return f"{path} cannot be read (injected)" if path == latest else real(path)

        return verify

    return wrap


class _recording_resume:
    """Record the step each rank resumed at."""

    def __init__(self, seen: dict) -> None:
        self.seen = seen

    def __enter__(self) -> None:
        self.real = real = run.Run.resume
        seen = self.seen

        def resume(self_run):
            real(self_run)
            seen["resumed_at"] = self_run.step

        run.Run.resume = resume

    def __exit__(self, *exc) -> None:
        run.Run.resume = self.real


if __name__ == "__main__":
    main(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
