"""Pre-training one cell: ``train(config, workdir)``; see :mod:`vitscale.train.loop`."""

from .loop import TrainingFailed, train
from .signals import Preempted

__all__ = ["train", "Preempted", "TrainingFailed"]
