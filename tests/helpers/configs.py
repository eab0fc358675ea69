"""Configs of cells that train in seconds on a CPU."""

from __future__ import annotations


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


# What a study's or the demo's grid cells are cut to in tests: a few steps each, with every
# part of a cell (evaluations, checkpoint, fine-tune) still run.
SECONDS_BUDGET = {
    "train": {"steps": 4, "eval_every": 2, "checkpoint_every": 4, "log_every": 2},
    "optim": {"warmup_steps": 1},
    "eval": {
        "fewshot": {"seeds": 2, "test_examples": 40},
        "upstream": {"examples": 40},
        "finetune": {"steps": 1, "test_examples": 40},
    },
    "wandb": {"mode": "disabled"},
}


def in_seconds(grid: dict) -> dict:
    """A grid file's mapping with :data:`SECONDS_BUDGET` merged into its ``base`` (in
    place; returned for chaining)."""
    _merge(grid.setdefault("base", {}), SECONDS_BUDGET)
    return grid


def _merge(base: dict, update: dict) -> dict:
    for key, value in update.items():
        base[key] = _merge(base.get(key) or {}, value) if isinstance(value, dict) else value
    return base


# The paper's grids read JFT and ImageNet, not on this machine: their dry-runs plan them for
# a cluster (a profile), where a set not here is a note instead of a refusal.
AWAY = ("--profile", "h100x8")
