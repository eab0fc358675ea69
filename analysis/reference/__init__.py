"""Published data other than the ViT paper's own tables, shipped as package data beside
its source and license (README.md in this folder), read into the frames our runs give.

- ``jft-curves`` (:mod:`analysis.reference.jft`): the 72 JFT-300M few-shot learning curves
  of Alabdulmohsin, Neyshabur & Zhai (NeurIPS 2022).
"""

from __future__ import annotations

__all__ = ["NAMES", "check_name"]

NAMES = ("jft-curves",)


def check_name(name: str) -> str:
    """``name`` if it is a reference data set, else ``ValueError`` naming the valid ones."""
    if name not in NAMES:
        raise ValueError(f"unknown reference {name!r}; valid: {', '.join(NAMES)}")
    return name
