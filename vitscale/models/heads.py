"""Classification heads for pre-training and fine-tuning (paper Sec. 3.1 and 3.2;
docs/protocol.md, "Models").

The pre-training classifier's bias starts at -10: with the sigmoid loss the paper uses for
its multi-label sets, every class then starts at p = 4.5e-5, near the prior of a label
among thousands, so the first steps do not spend themselves pushing every logit down;
with softmax the constant bias changes nothing.
"""

from __future__ import annotations

import torch
from torch import nn

HEAD_KINDS = ("pretrain", "finetune")
PRETRAIN_BIAS = -10.0


class Head(nn.Module):
    def __init__(
        self, *, width: int, num_classes: int, kind: str, pre_logits_layer: bool = True
    ) -> None:
        super().__init__()
        if kind not in HEAD_KINDS:
            raise ValueError(f"unknown head {kind!r}; valid: {', '.join(map(repr, HEAD_KINDS))}")
        if num_classes < 1:
            raise ValueError(f"num_classes must be a positive integer, got {num_classes}")
        self.kind = kind
        self.dense = nn.Linear(width, width) if kind == "pretrain" and pre_logits_layer else None
        self.classifier = nn.Linear(width, num_classes)
        if self.dense is not None:
            nn.init.xavier_uniform_(self.dense.weight)
            nn.init.zeros_(self.dense.bias)
        self.reset_classifier()

    def reset_classifier(self) -> None:
        """The paper's fresh classifier: zero kernel, bias -10 (pre-training) or 0."""
        nn.init.zeros_(self.classifier.weight)
        nn.init.constant_(self.classifier.bias, PRETRAIN_BIAS if self.kind == "pretrain" else 0.0)

    def pre_logits(self, pooled: torch.Tensor) -> torch.Tensor:
        return pooled if self.dense is None else torch.tanh(self.dense(pooled))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(features)
