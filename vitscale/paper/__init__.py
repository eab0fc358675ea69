"""The paper's own numbers, shipped as package data (Dosovitskiy et al., ICLR 2021).

- ``table5()``: Table 5, transfer accuracy of ViTs pre-trained on ImageNet, ImageNet-21k
  and JFT-300M (the points of Fig. 3).
- ``table6()``: Table 6, transfer accuracy and pre-training exaFLOPs of ViT, BiT ResNet
  and hybrid models pre-trained on JFT-300M (the points of Fig. 5).

Rows come back as plain dicts of strings (``csv.DictReader``) so this module needs
neither torch nor pandas; ``analysis`` turns them into tidy frames.
"""

from __future__ import annotations

import csv
from functools import cache
from importlib.resources import files

__all__ = ["table5", "table6", "JFT_IMAGES", "TABLE5_FILE", "TABLE6_FILE"]

# JFT-300M as the paper counts an epoch for Table 6 (docs/protocol.md: "epochs x 303M images").
JFT_IMAGES = 303_000_000

TABLE5_FILE = "table5_pretrain_dataset_vs_transfer.csv"
TABLE6_FILE = "table6_compute_vs_transfer.csv"


@cache
def _read(filename: str) -> tuple[dict[str, str], ...]:
    with files(__package__).joinpath(filename).open(newline="") as fh:
        return tuple(csv.DictReader(fh))


def table5() -> list[dict[str, str]]:
    return [dict(r) for r in _read(TABLE5_FILE)]


def table6() -> list[dict[str, str]]:
    return [dict(r) for r in _read(TABLE6_FILE)]
