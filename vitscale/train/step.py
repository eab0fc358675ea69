"""One optimiser step, the same for pre-training and fine-tuning.

A process's share of the global batch is cut into micro-batches (gradient accumulation:
the same update in less memory); every micro-batch but the last skips DDP's gradient
all-reduce (``no_sync``), each runs under the Accelerator's autocast and adds
``loss / micro-batches`` to the gradients; then the global gradient norm is clipped, the
optimiser and the learning-rate schedule step, and the gradients are dropped. Nothing
here reads a value back from the device: the loss and gradient norm are returned as
tensors, and the caller decides when to look at them (pre-training, at its sync steps).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def loss_fn(
    logits: torch.Tensor, targets: torch.Tensor, *, kind: str, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Softmax cross-entropy, or sigmoid cross-entropy summed over classes (multi-label,
    as JFT's pre-training uses)."""
    logits = logits.float()
    if kind == "softmax":
        return F.cross_entropy(logits, targets, label_smoothing=label_smoothing)
    if targets.ndim == 1:
        targets = F.one_hot(targets, logits.shape[-1])
    targets = targets.float()
    if label_smoothing:
        targets = targets * (1 - label_smoothing) + label_smoothing / logits.shape[-1]
    return F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(-1).mean()


@dataclass
class Step:
    """``step(images, targets) -> (mean loss, gradient norm)`` for one process's batch.

    ``model`` is the prepared (DDP-wrapped) module whose gradients are synchronised;
    ``forward`` is what computes the logits (the same module, or its compiled form).
    ``loss_kind`` and ``label_smoothing`` are :func:`loss_fn`'s. ``grad_clip`` 0 leaves
    the norm unclipped (it is still measured)."""

    accelerator: object
    model: torch.nn.Module
    forward: Callable[[torch.Tensor], torch.Tensor]
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    loss_kind: str
    label_smoothing: float
    micro_batch: int
    grad_clip: float

    def __call__(
        self, images: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        acc = self.accelerator
        parts = list(
            zip(images.split(self.micro_batch), targets.split(self.micro_batch), strict=True)
        )
        loss_sum = torch.zeros((), device=images.device)
        for i, (x, y) in enumerate(parts):
            last = i == len(parts) - 1
            with (
                contextlib.nullcontext() if last else acc.no_sync(self.model),
                acc.autocast(),
            ):
                loss = loss_fn(
                    self.forward(x), y, kind=self.loss_kind, label_smoothing=self.label_smoothing
                )
            acc.backward(loss / len(parts))
            loss_sum += loss.detach()
        grad_norm = acc.clip_grad_norm_(self.model.parameters(), self.grad_clip or float("inf"))
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_sum / len(parts), grad_norm
