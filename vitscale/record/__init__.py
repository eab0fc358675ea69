"""The run record: what a cell leaves behind, the only interface between training and
analysis (docs/design.md, "The run folder").

``from vitscale import record as rf`` gives :mod:`.folder`, :mod:`.keys` and
:mod:`.result` without pandas or torch; :mod:`.cells` (run folders -> one pandas frame)
and :mod:`.wandb` (the same from W&B runs) are imported on their own.
"""

from .folder import *  # noqa: F403
from .folder import __all__ as _folder
from .keys import *  # noqa: F403
from .keys import __all__ as _keys
from .result import *  # noqa: F403
from .result import __all__ as _result

__all__ = [*_folder, *_keys, *_result]
