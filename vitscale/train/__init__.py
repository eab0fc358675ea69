"""Pre-training one cell and fine-tuning it: ``train(config, workdir)``; see
:mod:`vitscale.train.pretrain`."""

from .pretrain import TrainingFailed, train
from .signals import Preempted

__all__ = ["train", "Preempted", "TrainingFailed"]
