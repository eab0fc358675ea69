"""Sharded sets: :mod:`.index` (torch-free), :mod:`.read`, :mod:`.order` (the stream's windows),
:mod:`.dataset` (the torch dataset and its stream), :mod:`.device` (decoding on the training
device) and :mod:`.write` (``vitscale data shard``)."""
