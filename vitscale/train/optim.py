"""Optimiser and learning-rate schedules (paper Table 3, Appendix B.1; docs/protocol.md,
"Pre-training"): torch's AdamW, weight decay decoupled from the gradient. As in the authors'
code, decay applies to the kernels of dense and convolution layers only, not to biases,
norms, the class token or position embeddings.

Schedules: linear warm-up, then linear decay to ``end_lr`` (pre-training) or cosine
decay (ImageNet pre-training, fine-tuning); or a schedule whose steps before its cooldown
do not depend on the run's length (docs/schedules.md): ``wsd`` holds the peak rate
(Hägele et al., NeurIPS 2024), ``rsqrt`` decays it as 1/sqrt(1 + (step - warm-up) /
timescale) (big_vision; Zhai et al., CVPR 2022), and the cooldown takes the last steps down
to ``end_lr``, linearly or as 1 - sqrt (Hägele et al.'s better shape).
"""

from __future__ import annotations

import math

import torch
from torch import nn

SCHEDULES = ("linear", "cosine", "wsd", "rsqrt")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    kernels = {
        id(m.weight)
        for m in model.modules()
        if isinstance(m, nn.Linear | nn.Conv2d) and m.weight is not None
    }
    decay = [p for p in model.parameters() if p.requires_grad and id(p) in kernels]
    other = [p for p in model.parameters() if p.requires_grad and id(p) not in kernels]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": other, "weight_decay": 0.0},
    ]


def build_adamw(
    model: nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float]
) -> torch.optim.AdamW:
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=tuple(betas))


def lr_factor(
    step: int,
    *,
    total_steps: int,
    warmup_steps: int,
    schedule: str,
    base_lr: float,
    end_lr: float,
    cooldown: int = 0,
    cooldown_shape: str | None = None,
    timescale: int | None = None,
) -> float:
    """Multiplier of ``base_lr`` at ``step`` (0-based, before the update of that step).
    ``cooldown``: a wsd or rsqrt schedule's last steps (:func:`vitscale.config.cooldown_steps`)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; valid: {', '.join(map(repr, SCHEDULES))}")
    warmup_steps = min(warmup_steps, total_steps)
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    floor = min(end_lr / base_lr, 1.0) if base_lr > 0 else 0.0
    if schedule in ("wsd", "rsqrt"):  # the same before the cooldown whatever total_steps is
        stable = (
            1.0 if schedule == "wsd" else 1.0 / math.sqrt(1.0 + (step - warmup_steps) / timescale)
        )
        start = total_steps - cooldown
        if step < start or not cooldown:
            return stable
        progress = min((step - start) / cooldown, 1.0)
        done = math.sqrt(progress) if cooldown_shape == "1-sqrt" else progress
        return stable - (stable - floor) * done  # exactly the stable rate where it starts
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    progress = min(progress, 1.0)
    if schedule == "linear":
        return floor + (1.0 - floor) * (1.0 - progress)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_schedule(
    optimizer: torch.optim.Optimizer,
    *,
    total_steps: int,
    warmup_steps: int,
    schedule: str,
    end_lr: float,
    cooldown: int = 0,
    cooldown_shape: str | None = None,
    timescale: int | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    base_lr = optimizer.param_groups[0]["lr"]
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_factor(
            step,
            total_steps=total_steps,
            warmup_steps=warmup_steps,
            schedule=schedule,
            base_lr=base_lr,
            end_lr=end_lr,
            cooldown=cooldown,
            cooldown_shape=cooldown_shape,
            timescale=timescale,
        ),
    )
