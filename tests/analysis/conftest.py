"""The analysis tests run without torch: with ``VITSCALE_WITHOUT_TORCH=1`` (``make check``)
importing torch, torchvision or accelerate fails here as it would on a laptop that never
installed them, so a test (or the code it runs) that needs them fails loudly instead of
passing on a machine that happens to have them."""

from __future__ import annotations

import importlib.abc
import os
import sys

BLOCKED = ("torch", "torchvision", "accelerate")


class _WithoutTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: VITSCALE_WITHOUT_TORCH)")
        return None


if os.environ.get("VITSCALE_WITHOUT_TORCH") == "1":
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    if loaded:
        raise RuntimeError(f"VITSCALE_WITHOUT_TORCH=1, but these are loaded already: {loaded}")
    sys.meta_path.insert(0, _WithoutTorch())
