"""Metric names: one spelling for the trainer's rows, result.json, the W&B run and the
analysis frames (accuracies are fractions there, percentages in the analysis frames:
:func:`vitscale.record.cells.to_percent`).
"""

from __future__ import annotations

import re

__all__ = [
    "STEP",
    "EXAMPLES_SEEN",
    "TRAIN_LOSS",
    "LR",
    "EXAFLOPS",
    "THROUGHPUT",
    "MFU",
    "UPSTREAM_TOP1",
    "BEST",
    "FINAL",
    "fewshot_key",
    "parse_fewshot_key",
    "finetune_key",
    "parse_finetune_key",
    "is_accuracy",
]

# Step metrics: every metrics.jsonl row has these.
STEP = "step"
EXAMPLES_SEEN = "examples_seen"
TRAIN_LOSS = "train/loss"
LR = "lr"
EXAFLOPS = "compute/exaflops"
THROUGHPUT = "throughput/images_per_s"
MFU = "throughput/mfu"
UPSTREAM_TOP1 = "upstream/top1"

# Prefixes of a run's summary values (W&B summary and analysis frames): the best value of
# an accuracy seen during training (Fig. 4's early stopping) and the last logged value.
BEST = "best/"
FINAL = "final/"

# A dataset name may hold slashes (an own set: "imagefolder:/data/shapes"); the key ends
# in "/<k>shot" (a per-seed key, ".../<k>shot/seed<i>", is not a metric column).
_FEWSHOT_RE = re.compile(r"fewshot/(?P<dataset>.+)/(?P<shots>\d+)shot")
_FINETUNE_RE = re.compile(r"finetune/(?P<dataset>.+)/top1")


def fewshot_key(dataset: str, shots: int) -> str:
    """``fewshot/<dataset>/<k>shot``: mean accuracy over the sampling seeds."""
    return f"fewshot/{dataset}/{shots}shot"


def parse_fewshot_key(key: str) -> tuple[str, int] | None:
    """``(dataset, k)`` for a few-shot metric name, else None."""
    m = _FEWSHOT_RE.fullmatch(key)
    return (m["dataset"], int(m["shots"])) if m else None


def finetune_key(dataset: str) -> str:
    """``finetune/<dataset>/top1``: test accuracy after fine-tuning."""
    return f"finetune/{dataset}/top1"


def parse_finetune_key(key: str) -> str | None:
    """The dataset of a fine-tuning metric name, else None."""
    m = _FINETUNE_RE.fullmatch(key)
    return m["dataset"] if m else None


def is_accuracy(key: str) -> bool:
    """Accuracy metrics (higher is better): the ones ``best`` keeps."""
    return key.startswith(("fewshot/", "finetune/")) or key == UPSTREAM_TOP1
