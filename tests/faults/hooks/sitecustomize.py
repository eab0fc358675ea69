"""Loaded by every Python process of a fault test (the test puts this folder first on
``PYTHONPATH``), so that a signal lands at a known point, not by luck. Nothing else
changes; a process that never imports the trainer pays nothing.

``FAULT_STUCK=cell,...``: the process training one of these cells stops for good halfway
through writing a checkpoint's ``state.pt``, as on a stuck filesystem (a SIGKILL
mid-checkpoint, an interrupt the cell cannot answer).

``FAULT_HOLD=cell,...`` and ``FAULT_HOLD_AFTER=k``: after k steps in this process, the
trainer of one of these cells waits for a stop signal before its next step (it then
checkpoints and stops as it would have anyway). A held cell makes a bounded number of
steps however long the test takes to send its signal, and a SIGKILL there lands between
two steps, never in a checkpoint.

``FAULT_ABORT=cell,...`` and ``FAULT_ABORT_AFTER=k``: after k steps in this process, the
trainer of one of these cells aborts (SIGABRT, no Python cleanup), as NCCL's watchdog
ends a process whose collective failed or timed out.

Either of the first two writes its pid to ``FAULT_MARKERS/<cell>.stuck`` or ``<cell>.held``
when it gets there."""

import importlib.abc
import importlib.machinery
import os
import sys
import time
from pathlib import Path

_STUCK = set(filter(None, os.environ.get("FAULT_STUCK", "").split(",")))
_HOLD = set(filter(None, os.environ.get("FAULT_HOLD", "").split(",")))
_ABORT = set(filter(None, os.environ.get("FAULT_ABORT", "").split(",")))


def _mark(cell: str, what: str) -> None:
    marker = Path(os.environ["FAULT_MARKERS"]) / f"{cell}.{what}"
    marker.write_text(str(os.getpid()))


def _patch_checkpoint(module) -> None:
    real = module._save

    def save_half_then_hang(obj, path):
        cell = path.parent.parent.parent.name  # <run>/checkpoints/.tmp-step_N/state.pt
        if path.name != module.STATE or cell not in _STUCK:
            return real(obj, path)
        import io

        import torch

        buffer = io.BytesIO()
        torch.save(obj, buffer)
        path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        _mark(cell, "stuck")
        while True:  # signals are handled (and ignored) between sleeps
            time.sleep(60)

    module._save = save_half_then_hang


def _patch_loop(module) -> None:
    real = module._train
    after = int(os.environ.get("FAULT_HOLD_AFTER", "0"))

    def train_held(config, run_dir, preemption):
        if run_dir.name in _HOLD:
            agreed, steps = preemption.agreed, [0]

            def agreed_after_a_signal(group=None):  # after every step of one process
                steps[0] += 1
                if steps[0] > after and not preemption.requested:
                    _mark(run_dir.name, "held")
                    while not preemption.requested:
                        time.sleep(0.01)
                return agreed(group)

            preemption.agreed = agreed_after_a_signal
        if run_dir.name in _ABORT:
            agreed, steps = preemption.agreed, [0]
            abort_after = int(os.environ.get("FAULT_ABORT_AFTER", "0"))

            def agreed_or_abort(group=None):
                steps[0] += 1
                if steps[0] > abort_after:
                    os.abort()
                return agreed(group)

            preemption.agreed = agreed_or_abort
        return real(config, run_dir, preemption)

    module._train = train_held


_PATCHES = {"vitscale.train.checkpoint": _patch_checkpoint, "vitscale.train.pretrain": _patch_loop}


class _Patch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _PATCHES[name](module)

        spec.loader.exec_module = exec_module
        return spec


if _STUCK or _HOLD or _ABORT:
    sys.meta_path.insert(0, _Patch())
