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
from .schema import OPERATIONAL, UNLESS_DEFAULT, WHEN_SET, Config, marked

# Each key's part in the cell id is declared with the key (vitscale.config.schema).
OPERATIONAL_KEYS = marked(OPERATIONAL)
HASHED_WHEN_SET = marked(WHEN_SET)
HASHED_UNLESS_DEFAULT = marked(UNLESS_DEFAULT)

# Keys the trainer adds to config.json once it knows them; a resolved config read back
# (``vitscale train runs/g/id/config.json``) drops them before validation.
DERIVED_KEYS = (
    "cell_id",
    "data_content",  # the own datasets' fingerprints the id holds (vitscale.plan)
    "data.num_examples",
    "data.num_classes",
    "data.selection",
    "train.total_steps",
)


def cell_id(config: Config | dict, *, data: dict[str, str] | None = None, length: int = 10) -> str:
    """Short stable hash of everything that determines a run's results.

    Key order does not matter (canonical JSON); operational keys (OPERATIONAL_KEYS) are
    left out. ``data``: the fingerprints of the own datasets the cell reads
    (:func:`vitscale.data.fingerprint`), hashed with the config when there are any.
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
    if data:
        d["data_content"] = dict(sorted(data.items()))
    blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]
