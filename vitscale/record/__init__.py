"""The run record: what a cell leaves behind, the only interface between training and
analysis (docs/design.md, "The run folder").

- :mod:`.folder`: the run folder's files and their atomic writes, metrics rows, checkpoints;
- :mod:`.keys`: metric names;
- :mod:`.result`: :class:`RunResult`, ``result.json`` and its W&B-summary form;
- :mod:`.cells`: run folders -> one tidy pandas frame (imported on its own: pandas);
- :mod:`.wandb`: the same frame from W&B runs, online or offline, and the names a cell's
  W&B run is given.

``from vitscale import record as rf`` gives the first three without pandas or torch.
"""

from .folder import *  # noqa: F403
from .folder import __all__ as _folder
from .keys import *  # noqa: F403
from .keys import __all__ as _keys
from .result import *  # noqa: F403
from .result import __all__ as _result

__all__ = [*_folder, *_keys, *_result]
