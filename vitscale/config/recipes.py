"""Paper training recipes as config defaults (paper Table 3 and Appendix B.1; docs/protocol.md).

A recipe fills only the keys a config leaves unset. Which recipe applies is ``recipe:``
in the config, or else the pre-training dataset's kind's (:data:`vitscale.kinds.KINDS`:
an own single-label set gets ``small``, the CPU recipe's values a few thousand images can
run). The resolved config names the recipe applied, and
:func:`vitscale.plan.plan` says which values it filled. Imports no torch.
"""

from __future__ import annotations

from ..catalog import parse
from ..kinds import kind_of

_COMMON = {"optim": {"name": "adamw", "end_lr": 1e-5}, "train": {"grad_clip": 1.0}}

_CPU = {
    "model": {"dropout": 0.0},
    "train": {"batch_size": 256, "loss": "softmax"},
    "optim": {"lr": 1e-3, "weight_decay": 0.1, "schedule": "linear", "warmup_steps": 50},
}
_BY_RECIPE = {
    # JFT-300M: Adam(0.9, 0.999), batch 4096, wd 0.1, no dropout, 10k warm-up, linear decay.
    "jft": {
        "model": {"dropout": 0.0},
        "train": {"batch_size": 4096, "loss": "sigmoid"},
        "optim": {"weight_decay": 0.1, "schedule": "linear", "warmup_steps": 10_000},
    },
    # ImageNet-21k: wd 0.03, dropout 0.1, lr 1e-3.
    "imagenet21k": {
        "model": {"dropout": 0.1},
        "train": {"batch_size": 4096, "loss": "sigmoid"},
        "optim": {"lr": 1e-3, "weight_decay": 0.03, "schedule": "linear", "warmup_steps": 10_000},
    },
    # ImageNet: wd 0.3, dropout 0.1, lr 3e-3, cosine, clip 1.
    "imagenet": {
        "model": {"dropout": 0.1},
        "train": {"batch_size": 4096, "loss": "softmax"},
        "optim": {"lr": 3e-3, "weight_decay": 0.3, "schedule": "cosine", "warmup_steps": 10_000},
    },
    # Ours: CPU-sized runs on the synthetic set (the demo and tests); also an own
    # single-label set (imagefolder:, shards:) of any size, "small": values a few thousand
    # images and a few hundred steps can run (a paper-scale set names its paper recipe,
    # recipe: imagenet21k, instead).
    "synthetic": _CPU,
    "small": _CPU,
    # Ours: the scenes world (multi-label, JFT-like): the synthetic recipe, sigmoid loss.
    "scenes": _CPU | {"train": {"batch_size": 256, "loss": "sigmoid"}},
    # Training from scratch on a small transfer set (rare; fine-tuning has its own recipe).
    "transfer": {
        "model": {"dropout": 0.1},
        "train": {"batch_size": 512, "loss": "softmax"},
        "optim": {"lr": 1e-3, "weight_decay": 0.1, "schedule": "cosine", "warmup_steps": 500},
    },
}

RECIPES = tuple(_BY_RECIPE)  # the values of the config's ``recipe`` key


def choose(dataset: str) -> str:
    """The recipe a pre-training ``dataset`` gets when the config names none."""
    return kind_of(dataset).recipe


def recipe(model: str, dataset: str, name: str | None = None) -> dict:
    """Config defaults for pre-training ``model`` on ``dataset`` (nested dict); ``name``
    is one of RECIPES (the schema checks it), None: chosen by the dataset."""
    name = name or choose(dataset)
    out = {section: dict(values) for section, values in _COMMON.items()}
    for section, values in _BY_RECIPE[name].items():
        out.setdefault(section, {}).update(values)
    if name == "jft":
        out["optim"]["lr"] = parse(model).jft_lr()
    return out
