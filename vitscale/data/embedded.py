"""The embedded worlds' tasks by name: procedural datasets, nothing on disk (torch-free).

Two worlds (docs/studies.md, "The study"): the glyph world (``synthetic``, ``synthetic-*``:
:mod:`vitscale.data.synthetic`), where one large glyph's local shape decides the label,
the convolution's prior; and the scenes world (``scenes``, ``scenes-*``:
:mod:`vitscale.data.scenes`), whose labels also depend on how the parts of a scene are
arranged, counted and repeated. Beside them, the glyph world with its pixels moved
(``synthetic-permuted-<p>``, ``synthetic-patchperm`` and their ``-glyphs``:
:mod:`vitscale.data.synthetic.permuted`), the control that takes the convolution's prior
away by degrees. Each task has ``name``, ``description``, ``num_classes``,
``classes``, ``splits`` and ``split_size(split)``; :func:`open_task` draws one split.
"""

from __future__ import annotations

from .scenes.world import TASKS as SCENE_TASKS
from .synthetic.permuted import TASKS as MOVED_TASKS
from .synthetic.vocabulary import TASKS as GLYPH_TASKS

EMBEDDED = {**GLYPH_TASKS, **MOVED_TASKS, **SCENE_TASKS}


def open_task(name: str, split: str, image_size: int):
    """The ``Dataset`` of one split of an embedded task (imports torch)."""
    if name in SCENE_TASKS:
        from .scenes.render import SceneImages

        return SceneImages(name, split=split, image_size=image_size)
    from .synthetic.render import SyntheticImages

    return SyntheticImages(name, split=split, image_size=image_size)
