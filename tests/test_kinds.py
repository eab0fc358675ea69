"""Dataset kinds (vitscale.kinds): the one table every layer reads a dataset's name by,
held to the data layer, which owns what each source is."""

from __future__ import annotations

import pytest

from vitscale.config.recipes import choose
from vitscale.data.embedded import EMBEDDED, SCENE_TASKS
from vitscale.data.registry import SOURCES, dataset_names, parse_name
from vitscale.data.synthetic.permuted import TASKS as MOVED_TASKS
from vitscale.kinds import FOLDER_KINDS, GLYPHS, SCENES, control_worlds, kind_of


def test_every_embedded_task_is_rendered_by_its_own_world():
    for name in EMBEDDED:
        assert kind_of(name).world == (SCENES if name in SCENE_TASKS else GLYPHS), name
        assert kind_of(name).folder is None
    for name in SOURCES:  # read from files, never rendered
        assert kind_of(f"{name}:/data/x" if name in FOLDER_KINDS else name).world is None


def test_folder_kinds_are_the_registry_sources_named_with_a_path():
    assert set(FOLDER_KINDS) <= set(SOURCES)
    for kind in FOLDER_KINDS:
        assert parse_name(f"{kind}:/data/x")[0] == kind == kind_of(f"{kind}:/data/x").folder
    assert {n for n in dataset_names() if ":" in n} == {f"{k}:/path" for k in FOLDER_KINDS}


@pytest.mark.parametrize(
    "dataset, recipe",
    [
        ("synthetic", "synthetic"),
        ("synthetic-permuted-75", "synthetic"),
        ("scenes", "scenes"),  # multi-label: the sigmoid loss
        ("scenes-count", "synthetic"),  # a single-label scenes task, from scratch
        ("imagenet", "imagenet"),
        ("multilabel:/data/jft", "jft"),
        ("imagefolder:/data/mine", "small"),
        ("shards:/data/in21k/train-{000000..000099}.tar", "small"),
        ("cifar100", "imagenet21k"),
    ],
)
def test_a_dataset_gets_its_kinds_recipe(dataset, recipe):
    assert choose(dataset) == recipe


def test_only_shards_refuse_a_class_balanced_subset():
    refused = [k for k in FOLDER_KINDS if not kind_of(f"{k}:/x").class_balanced]
    assert refused == ["shards"]
    assert all(kind_of(n).class_balanced for n in EMBEDDED)


def test_the_control_worlds_are_the_moved_glyph_worlds_and_the_glyph_world():
    worlds = control_worlds()
    moved = {t.world: t.percent for t in MOVED_TASKS.values()}
    assert set(worlds) == {GLYPHS, *moved}
    assert worlds[GLYPHS] == (0.0, f"{GLYPHS}-glyphs")
    for world, percent in moved.items():
        fraction, transfer = worlds[world]
        assert fraction == (None if percent is None else percent / 100)
        assert transfer in MOVED_TASKS and MOVED_TASKS[transfer].world == world
