"""One plan per entry point: the config resolved and checked against everything known
before a run starts (the set's size, the run's length, the launch, the datasets), every
problem once; what is known only later (a folder's size, the launch started) checked by
the same functions."""

from __future__ import annotations

import pytest

from vitscale.config import ConfigError, cell_id, resolve
from vitscale.plan import Plan, plan

from .helpers.configs import tiny_config

FOLDER = "imagefolder:/nowhere"  # a size known only once read (not read here)


def _problems(config, **kwargs) -> list[str]:
    with pytest.raises(ConfigError) as e:
        plan(config, **kwargs)
    return e.value.problems


def test_a_plan_carries_the_config_its_id_and_its_length():
    p = plan(tiny_config(train={"eval_every": 100}), num_processes=2)
    assert isinstance(p, Plan) and p.config == resolve(tiny_config(train={"eval_every": 100}))
    assert p.cell_id == cell_id(p.config)
    assert (p.num_examples, p.total_steps, p.num_processes) == (512, 12, 2)
    assert p.notes == (
        "train.eval_every: 100 is longer than the run (12 steps): it evaluates at the end only",
    )


def test_epochs_of_a_synthetic_set_are_steps_before_anything_is_read():
    p = plan(tiny_config(train={"steps": None, "epochs": 1}))
    assert (p.num_examples, p.total_steps) == (512, 32)  # 512 / 16


def test_a_folder_is_sized_once_read_by_the_same_checks():
    p = plan(
        tiny_config(data={"dataset": FOLDER, "subset": 0.5}, train={"steps": None, "epochs": 2})
    )
    assert (p.num_examples, p.total_steps) == (None, None)
    assert p.notes == (
        f"{FOLDER} cannot be read here: the ids of its cells leave its content out, so they "
        "may not match cells run where it can",
    )
    read = p.with_num_examples(100)
    assert (read.num_examples, read.total_steps) == (100, 13)  # 200 / 16, rounded up
    assert read.config is p.config and read.cell_id == p.cell_id
    with pytest.raises(ConfigError, match="optim.warmup_steps: 2 is not shorter than the run"):
        p.with_num_examples(10)  # 20 examples: 2 steps, no longer than the warm-up
    # A count is the subset's size whatever the folder holds (more is the data's error).
    counted = plan(
        tiny_config(data={"dataset": FOLDER, "subset": 300}, train={"epochs": 2, "steps": None})
    )
    assert (counted.num_examples, counted.total_steps) == (300, 38)


def test_the_launch_is_checked_now_or_once_known():
    assert _problems(tiny_config(), num_processes=3) == [
        "train.batch_size: 16 does not split evenly over 3 processes; allowed: a multiple of 3"
    ]
    seen = []
    p = plan(tiny_config(), num_processes=lambda cfg: seen.append(cfg.model.name) or 4)
    assert (seen, p.num_processes) == (["ViT-Pico/4"], 4)  # a function of the config
    assert plan(tiny_config()).with_num_processes(8).num_processes == 8
    with pytest.raises(ConfigError, match="over 5 processes"):
        plan(tiny_config()).with_num_processes(5)
    # fine-tuning's batch too, when there is fine-tuning: never rounded per process silently
    tuned = tiny_config(eval={"finetune": {"datasets": ["synthetic-glyphs"], "batch_size": 30}})
    assert _problems(tuned, num_processes=4) == [
        "eval.finetune.batch_size: 30 does not split evenly over 4 processes; allowed: a "
        "multiple of 4"
    ]
    assert plan(tuned, num_processes=2).num_processes == 2


def test_every_problem_is_reported_at_once_and_once():
    problems = _problems(
        tiny_config(
            data={"dataset": FOLDER, "subset": 300},
            optim={"warmup_steps": 40},
            eval={"finetune": {"datasets": ["cifar10", "cifar10"]}},
        ),
        num_processes=3,
        check_data=True,
        extra_checks=lambda cfg: ["resources: too big", "resources: too big"],
    )
    assert [p.split(":")[0] for p in problems] == [
        "data.dataset",  # the data first: what a missing set rules out is not checked
        "eval.finetune.datasets",
        "optim.warmup_steps",
        "train.batch_size",
        "eval.finetune.batch_size",  # 512 over 3
        "resources",
    ]
    assert problems[0].startswith(f"data.dataset: {FOLDER}: nothing under /nowhere")
    assert problems[1].startswith("eval.finetune.datasets: cifar10: nothing under")


def test_datasets_are_checked_only_when_asked():
    config = tiny_config(eval={"fewshot": {"datasets": [FOLDER]}})
    assert plan(config).cell_id
    (problem,) = _problems(config, check_data=True)
    assert problem.startswith(f"eval.fewshot.datasets: {FOLDER}: nothing under /nowhere")


def test_a_subset_the_set_cannot_hold_names_the_file():
    (problem,) = _problems(tiny_config(data={"subset": "2000M"}), source="cell.yaml")
    with pytest.raises(ConfigError) as e:
        plan(tiny_config(data={"subset": "2000M"}), source="cell.yaml")
    assert str(e.value) == f"cell.yaml: {problem}"
    assert problem.startswith("data.subset: '2000M' asks for more examples than synthetic holds")


def test_the_config_alone_is_checked_first():
    """Problems of the config stop the plan before the checks that need valid values."""
    problems = _problems(tiny_config(train={"batch_size": 0}), num_processes=3)
    assert problems == ["train.batch_size must be positive, got 0"]


def test_an_own_sets_content_is_part_of_its_cells_identity(tmp_path):
    """A changed folder set (a file added or removed, pre-training or transfer) makes new
    cells instead of passing for the old ones; the same files again, or new file times,
    keep them; the embedded worlds' ids are the pinned ones (tests/test_config.py)."""
    import os

    from .helpers.datasets import write_image_tree, write_jpeg

    mine = write_image_tree(tmp_path / "mine", ["ant", "bee"], {"train": 8, "test": 4})
    transfer = write_image_tree(tmp_path / "transfer", ["cow", "dog"], {"train": 6, "test": 4})
    config = tiny_config(
        data={"dataset": f"imagefolder:{mine}", "subset": None},
        eval={"fewshot": {"datasets": [f"imagefolder:{transfer}"], "shots": [1]}},
    )
    first = plan(config).cell_id
    assert first != cell_id(plan(config).config)  # the content is hashed beside the config
    os.utime(mine / "train" / "ant" / "0000.jpg", (0, 0))
    assert plan(config).cell_id == first  # times are not content
    extra = mine / "train" / "ant" / "extra.jpg"
    write_jpeg(extra, 99)
    grown = plan(config).cell_id
    assert grown != first
    extra.unlink()
    assert plan(config).cell_id == first
    write_jpeg(transfer / "test" / "cow" / "extra.jpg", 98)
    assert plan(config).cell_id not in (first, grown)
    synthetic = tiny_config()
    assert plan(synthetic).cell_id == cell_id(plan(synthetic).config)
    # A run folder's config.json records the content its cell was planned with: a resume
    # keeps its id whatever the set holds now.
    planned = plan(config)
    written = planned.config.to_dict() | {"cell_id": planned.cell_id}
    written["data_content"] = planned.data_content
    (mine / "train" / "bee" / "0001.jpg").unlink()
    assert plan(written).cell_id == planned.cell_id != plan(config).cell_id
    # A link that points nowhere is content (the walk does not fail on it).
    (mine / "train" / "bee" / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    assert plan(config).cell_id not in (planned.cell_id, first)


def test_an_own_set_that_cannot_be_read_here_is_said(tmp_path):
    config = tiny_config(data={"dataset": f"imagefolder:{tmp_path / 'elsewhere'}", "subset": None})
    p = plan(config)
    assert p.cell_id == cell_id(p.config) and p.data_content == {}
    assert any("cannot be read here" in note for note in p.notes)


def test_a_set_not_on_this_machine_is_a_note_when_planned_away_from_it():
    """A grid planned for a cluster (a dry-run with a profile) names the sets it cannot see
    in one note; planned to run here, each is a problem."""
    config = tiny_config(eval={"fewshot": {"datasets": [FOLDER]}})
    planned = plan(config, check_data=True, absent_ok=True)
    (note,) = [n for n in planned.notes if "not on this machine" in n]
    assert note.startswith(f"{FOLDER} is not on this machine, so not checked here")
    (problem,) = _problems(config, check_data=True)
    assert FOLDER in problem


def test_a_set_is_read_and_verified_once_per_process_while_unchanged(tmp_path, monkeypatch):
    """A grid plans every cell: an own set's file list is read, and with verify its images
    decoded, once; a file added makes it read again."""
    from vitscale.data import build

    from .helpers.datasets import write_image_tree

    tree = write_image_tree(tmp_path / "own", ["a", "b"], {"train": 6, "test": 2})
    own = f"imagefolder:{tree}"
    calls = []

    def counted(real, name):
        def call(dataset, **kw):
            calls.extend([name] if dataset == own else [])
            return real(dataset, **kw)

        return call

    for name in ("describe_dataset", "verify_dataset"):
        monkeypatch.setattr(build, name, counted(getattr(build, name), name))
    for seed in (0, 1, 2):
        config = tiny_config(seed=seed, data={"dataset": own, "subset": None})
        plan(config, check_data=True, verify=True)
    assert calls == ["describe_dataset", "verify_dataset"]
    image = next((tree / "train" / "a").iterdir())
    (tree / "train" / "a" / "new.jpg").write_bytes(image.read_bytes())
    plan(config, check_data=True, verify=True)
    assert calls[2:] == ["describe_dataset", "verify_dataset"]
