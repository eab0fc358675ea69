"""Loaded by every Python process of a fault test (the test puts this folder first on
``PYTHONPATH``). When ``FAULT_PAUSE_CELL`` names a cell, the process training that cell
stops for good halfway through writing a checkpoint's ``state.pt``, as on a stuck
filesystem, after writing its pid to ``FAULT_PAUSE_MARKER``: the test then sends a real
signal at a known moment (a SIGKILL mid-checkpoint, an interrupt the cell cannot answer).
Nothing else changes; a process that never imports the trainer pays nothing."""

import importlib.abc
import importlib.machinery
import os
import sys

_CELL = os.environ.get("FAULT_PAUSE_CELL")


def _patch(module) -> None:
    real = module._save

    def save_half_then_hang(obj, path):
        if path.name != module.STATE or _CELL not in str(path):
            return real(obj, path)
        import io
        import time

        import torch

        buffer = io.BytesIO()
        torch.save(obj, buffer)
        path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        with open(os.environ["FAULT_PAUSE_MARKER"], "w") as marker:
            marker.write(str(os.getpid()))
        while True:  # signals are handled (and ignored) between sleeps
            time.sleep(60)

    module._save = save_half_then_hang


class _PatchCheckpoints(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "vitscale.train.checkpoint":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


if _CELL:
    sys.meta_path.insert(0, _PatchCheckpoints())
