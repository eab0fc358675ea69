"""A cell's id: a short hash of everything that determines its results.

Finished run folders are named by it, so it must never change for a config that did not:
new keys are hashed only when set, keys that only change how a run is operated are left
out, and numbers are hashed as written (``7`` and ``7.0`` differ).
"""

from __future__ import annotations

import copy
import hashlib
import json

from .load import get_key, pop_key
from .recipes import choose
from .schema import Config

# Keys that change how a run is operated, not what it computes: left out of the cell id
# so that moving a dataset or turning W&B off does not orphan finished cells.
OPERATIONAL_KEYS = (
    "grid",
    "data.root",
    "data.num_workers",
    "data.download",
    "data.skip_bad_samples",
    "data.decode",
    "train.micro_batch_size",
    "train.compile",
    "train.channels_last",
    "eval.finetune.micro_batch_size",
    "train.log_every",
    "train.checkpoint_every",
    "eval.batch_size",
    "wandb",
)

# Keys the trainer adds to config.json once it knows them; a resolved config read back
# (``vitscale train runs/g/id/config.json``) drops them before validation.
DERIVED_KEYS = (
    "cell_id",
    "data.num_examples",
    "data.num_classes",
    "data.selection",
    "train.total_steps",
)

# Keys added after cells were run: hashed only when set, so that cells which never set
# them keep their ids (and their finished run folders).
HASHED_WHEN_SET = (
    "data.shuffle_shards",
    "model.pre_logits",
    "model.pretrained",
    "model.pretrained_dataset",
    "model.pretrained_epochs",
    "eval.fewshot.width",
)

# Keys added after cells were run, with a default that computes what those cells did
# (data.holdout: they all had a test folder): hashed only when they differ from it, so
# the value used is in every resolved config and old cells keep their ids.
HASHED_UNLESS_DEFAULT = ("data.holdout",)


def cell_id(config: Config | dict, *, length: int = 10) -> str:
    """Short stable hash of everything that determines a run's results.

    Key order does not matter (canonical JSON); operational keys (OPERATIONAL_KEYS) are
    left out.
    """
    d = config.to_dict() if isinstance(config, Config) else copy.deepcopy(config)
    dataset = get_key(d, "data.dataset")
    if isinstance(dataset, str) and d.get("recipe") == choose(dataset):
        d["recipe"] = None  # the dataset's own recipe, named or not: hashed as before it was named
    for key in (*OPERATIONAL_KEYS, *DERIVED_KEYS):
        pop_key(d, key)
    for key in HASHED_WHEN_SET:  # null or missing alike: left out
        if get_key(d, key) is None:
            pop_key(d, key)
    defaults = Config().to_dict()
    for key in HASHED_UNLESS_DEFAULT:
        if get_key(d, key) in (None, get_key(defaults, key)):
            pop_key(d, key)
    blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]
