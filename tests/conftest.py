"""Shared fixtures and helpers for the suite."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from vitscale import record as rf
from vitscale.catalog import smallest_resolution

# Real (CPU) forward/backward for models up to this size; larger ones are checked on the
# meta device (shapes, gradients reaching every parameter) to keep the suite fast.
REAL_PARAM_LIMIT = 30_000_000


small_resolution = smallest_resolution  # the smallest resolution each model tiles, >= 32 px


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_wandb_login_left_behind():
    """Each test starts logged out of W&B, as a new process does: ``wandb.init`` with a key
    logs the whole process in, and a later test asking "is a key configured?" would see it."""
    yield
    if "wandb" in sys.modules:
        try:
            from wandb.sdk.lib.wbauth.authenticate import unauthenticate_session
        except ImportError:  # an older wandb keeps no session login
            return
        unauthenticate_session()


def tiny_config(**sections) -> dict:
    """A cell that trains in seconds on a CPU: ViT-Pico/4 on 512 synthetic images at
    32 px, few-shot on one small transfer task. ``sections`` update the defaults
    section by section (``train={"steps": 20}``)."""
    config = {
        # Dropout on: resuming must restore the RNG streams too, not only the data position.
        "model": {"name": "ViT-Pico/4", "dropout": 0.1},
        "data": {"dataset": "synthetic", "image_size": 32, "subset": 512},
        "train": {
            "steps": 12,
            "batch_size": 16,
            "log_every": 1,
            "checkpoint_every": 5,
            "eval_every": 6,
        },
        "optim": {"warmup_steps": 2},
        "eval": {
            "batch_size": 64,
            "fewshot": {
                "datasets": ["synthetic-textures"],
                "shots": [1, 2],
                "seeds": 2,
                "test_examples": 40,
            },
            "upstream": {"examples": 32},
        },
        "wandb": {"mode": "disabled"},
    }
    for section, values in sections.items():
        if isinstance(values, dict):
            config.setdefault(section, {}).update(values)
        else:
            config[section] = values
    return config


# metrics.jsonl entries that depend on the wall clock: left out when runs are compared
TIMING_KEYS = {rf.THROUGHPUT, rf.MFU}


def rows_of(run_dir: Path) -> list[dict]:
    """A run's metrics.jsonl rows without the wall-clock-dependent entries."""
    return [
        {k: v for k, v in row.items() if k not in TIMING_KEYS}
        for row in rf.iter_metrics(run_dir / rf.METRICS)
    ]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """The model weights of a run's latest checkpoint."""
    from vitscale.train import checkpoint

    latest = checkpoint.latest(run_dir / rf.CHECKPOINTS)
    return torch.load(latest / checkpoint.STATE, weights_only=True)["model"]
