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
