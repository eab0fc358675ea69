"""The paper's few-shot linear evaluation as a closed-form solver (paper Sec. 4.1, App. B.1.2;
the details, as the authors' code has them: docs/protocol.md, "Transfer").

Solved in float64, in whichever of the primal (D x D) or dual (N x N) forms is smaller;
both give the same weights.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F

BIAS_FEATURE = 100.0
STD_EPS = 1e-5
DEFAULT_L2 = 1024.0  # 2^10
_PROJECTION_SEED = 0x9E0_1EC7


def project(features: torch.Tensor, width: int) -> torch.Tensor:
    """``features (N, D)`` through a fixed Gaussian random projection to ``width`` dims.

    Why: a ridge probe on more features fits more, so a 512-wide ResNet read against a
    48-wide ViT is not a comparison of what they learned. Every model's features go
    through the same kind of map, the same matrix for the same ``D`` (a seeded
    ``N(0, 1/width)`` draw), which nearly preserves distances (Johnson-Lindenstrauss) and
    is a random rotation when ``D == width``.
    """
    return features.double() @ _projection(features.shape[1], width)


@lru_cache(maxsize=16)
def _projection(d: int, width: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(_PROJECTION_SEED + d)
    return torch.randn(d, width, generator=g, dtype=torch.float64) / width**0.5


def ridge_fewshot_accuracy(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    *,
    num_classes: int,
    l2_reg: float = DEFAULT_L2,
) -> float:
    """Top-1 accuracy of ridge regression to {-1, 1}^K targets, fitted on (train_x, train_y).

    ``*_x`` are ``(N, D)`` features, ``*_y`` integer class labels in ``[0, num_classes)``.
    """
    if train_x.ndim != 2 or test_x.ndim != 2 or train_x.shape[1] != test_x.shape[1]:
        raise ValueError(
            f"features must be (N, D) with equal D, got {tuple(train_x.shape)} and {tuple(test_x.shape)}"
        )
    if len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise ValueError("features and labels must have the same number of rows")
    x = train_x.double()
    mean = x.mean(dim=0, keepdim=True)
    std = x.std(dim=0, keepdim=True, correction=0) + STD_EPS

    def design(features: torch.Tensor) -> torch.Tensor:
        z = (features.double() - mean) / std
        return F.pad(z, (0, 1), value=BIAS_FEATURE)

    a, b = design(train_x), design(test_x)
    targets = 2.0 * F.one_hot(train_y.long(), num_classes).double() - 1.0
    n, d = a.shape
    if n >= d:  # primal: (A^T A + l I)^-1 A^T Y
        w = torch.linalg.solve(a.T @ a + l2_reg * torch.eye(d, dtype=a.dtype), a.T @ targets)
    else:  # dual: A^T (A A^T + l I)^-1 Y
        w = a.T @ torch.linalg.solve(a @ a.T + l2_reg * torch.eye(n, dtype=a.dtype), targets)
    predictions = (b @ w).argmax(dim=1)
    return (predictions == test_y.to(predictions.device).long()).double().mean().item()
