"""Pre-training compute of published checkpoints, so they land on Fig. 5 beside our runs.

A published cell (``model.pretrained: PATH``, ``train.steps: 0``) is evaluated with our
few-shot and fine-tuning protocol, but was pre-trained by others: its x on Fig. 5 comes
from its recipe, not from our step counter. One small table holds those recipes:

- the paper's own models on JFT-300M: paper Table 6's exaFLOPs, as printed;
- anything else: the documented epochs on the documented dataset, counted with our
  convention (:mod:`vitscale.flops`, with the dataset's classifier).

Imports no torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .catalog import parse
from .flops import count
from .paper import JFT_IMAGES, table6

PRETRAIN_RESOLUTION = 224  # every published ViT / BiT pre-training (paper Sec. 4.1; BiT)


@dataclass(frozen=True)
class Dataset:
    images: int
    classes: int
    source: str


DATASETS: dict[str, Dataset] = {
    "jft300m": Dataset(JFT_IMAGES, 18_291, "paper Table 6's epoch (303M images); 18,291 classes"),
    "imagenet21k": Dataset(14_197_122, 21_843, "ImageNet-21k fall 2011 release (paper: 14M)"),
    "imagenet": Dataset(1_281_167, 1_000, "ILSVRC-2012 train split"),
}

# The released checkpoints' documented epochs, by (family, dataset): ViT paper Sec. 4.1 /
# Appendix B.1 (ImageNet-21k 90 epochs, ImageNet 300, JFT 7 for most Table 6 rows) and
# BiT (Kolesnikov et al. 2020, Sec. 3.1: BiT-S on ImageNet and BiT-M on ImageNet-21k for
# 90 epochs). A checkpoint trained otherwise (e.g. AugReg's 300 epochs of ImageNet-21k,
# the paper's ViT-L at 30) gives ``model.pretrained_epochs``.
DEFAULT_EPOCHS: dict[tuple[str, str], float] = {
    ("ViT", "jft300m"): 7,
    ("Hybrid", "jft300m"): 7,
    ("ResNet", "jft300m"): 7,
    ("ViT", "imagenet21k"): 90,
    ("Hybrid", "imagenet21k"): 90,
    ("ResNet", "imagenet21k"): 90,
    ("ViT", "imagenet"): 300,
    ("Hybrid", "imagenet"): 300,
    ("ResNet", "imagenet"): 90,
}


@dataclass(frozen=True)
class Published:
    """Where a published checkpoint's pre-training compute comes from."""

    model: str
    dataset: str
    epochs: float
    examples: int  # images seen in its pre-training
    exaflops: float
    source: str  # "paper Table 6" or how it was counted

    def as_dict(self) -> dict:
        return asdict(self)


def _table6(model: str, epochs: float) -> float | None:
    for row in table6():
        if parse(row["model"]).name == model and float(row["pretrain_epochs"]) == epochs:
            return float(row["pretrain_exaflops"])
    return None


def published_compute(model: str, dataset: str, epochs: float | None = None) -> Published:
    """The pre-training compute of ``model`` published after ``epochs`` of ``dataset``."""
    name = parse(model).name
    if dataset not in DATASETS:
        raise ValueError(
            f"unknown pre-training dataset {dataset!r}; valid: {', '.join(map(repr, DATASETS))}"
        )
    if epochs is None:
        epochs = DEFAULT_EPOCHS[(parse(model).family, dataset)]
    if epochs <= 0:
        raise ValueError(f"pre-training epochs must be positive, got {epochs}")
    data = DATASETS[dataset]
    examples = round(epochs * data.images)
    if dataset == "jft300m" and (paper := _table6(name, epochs)) is not None:
        return Published(name, dataset, epochs, examples, paper, "paper Table 6")
    per_example = count(
        name, PRETRAIN_RESOLUTION, num_classes=data.classes, head="pretrain"
    ).train_flops_per_example
    return Published(
        name,
        dataset,
        epochs,
        examples,
        per_example * examples / 1e18,
        f"{epochs:g} epochs x {data.images:,} images x 3 x 2 x forward multiply-adds at "
        f"{PRETRAIN_RESOLUTION} px (vitscale.flops)",
    )
