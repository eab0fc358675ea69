"""Every value validated before anything runs: a table of bad configs and grid files fed
through the CLI (``vitscale train --dry-run``, ``vitscale grid --dry-run``). Each gets
exit code 2 and one line naming the key, the value and what is allowed; none a traceback.
Intervals longer than the run are allowed, and said."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from vitscale.cli import main

from .helpers.configs import AWAY, tiny_config

NAN, INF = float("nan"), float("inf")


def _config(**sections) -> dict:
    """tiny_config (12 steps of 16 on 512 synthetic images) with ``sections`` merged."""
    config = tiny_config()
    for section, values in sections.items():
        for key, value in values.items():
            node = config.setdefault(section, {})
            *parents, leaf = key.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
    return config


def _grid(*blocks: dict, **top) -> dict:
    return {"name": "bad", "base": tiny_config(), "blocks": list(blocks) or [{"name": "a"}]} | top


# id: (command, file content (a dict is written as YAML), extra arguments, what the one
# line must say: the key, the value, what is allowed)
BAD = {
    "subset larger than synthetic": (
        "train",
        _config(data={"subset": "2000M"}),
        [],
        ["data.subset: '2000M'", "than synthetic holds", "allowed: a count up to 1,000,000,000"],
    ),
    "subset larger than a transfer set": (
        "train",
        _config(data={"dataset": "synthetic-glyphs", "subset": 5000}),
        [],
        ["data.subset: 5000", "synthetic-glyphs holds (2,000)", "allowed: a count up to 2,000"],
    ),
    "warm-up as long as the run": (
        "train",
        _config(optim={"warmup_steps": 12}),
        [],
        ["optim.warmup_steps: 12", "the run (12 steps)", "allowed: 0 to 11"],
    ),
    "warm-up longer than a run in epochs": (
        "train",
        _config(train={"steps": None, "epochs": 1}, optim={"warmup_steps": 40}),
        [],
        ["optim.warmup_steps: 40", "the run (32 steps)", "allowed: 0 to 31"],
    ),
    "batch the processes cannot divide": (
        "grid",
        _grid({"name": "a", "set": {"train.batch_size": 15}}),
        ["--processes", "2"],
        ["block 'a': train.batch_size: 15", "over 2 processes", "allowed: a multiple of 2"],
    ),
    "zero steps": (
        "train",
        _config(train={"steps": 0}),
        [],
        ["train.steps must be positive, got 0"],
    ),
    "negative steps in a grid": (
        "grid",
        _grid({"name": "a", "set": {"train.steps": -5}}),
        [],
        ["block 'a': train.steps must be positive, got -5"],
    ),
    "zero epochs": (
        "train",
        _config(train={"steps": None, "epochs": 0}),
        [],
        ["train.epochs must be positive, got 0"],
    ),
    "negative examples": (
        "train",
        _config(train={"steps": None, "examples": -100}),
        [],
        ["train.examples must be positive, got -100"],
    ),
    "zero fine-tuning steps": (
        "train",
        _config(eval={"finetune.steps": 0}),
        [],
        ["eval.finetune.steps must be positive, got 0"],
    ),
    "learning rate NaN": (
        "train",
        _config(optim={"lr": NAN}),
        [],
        ["optim.lr: expected finite numbers, got nan"],
    ),
    "learning rate infinite in a grid axis": (
        "grid",
        _grid({"name": "a", "axes": {"optim.lr": [0.001, INF]}}),
        [],
        ["block 'a': optim.lr: expected finite numbers, got inf"],
    ),
    "fine-tuning learning rates with a NaN": (
        "train",
        _config(eval={"finetune.lrs": [0.01, NAN]}),
        [],
        ["eval.finetune.lrs: expected finite numbers, got [0.01, nan]"],
    ),
    "negative learning rate": (
        "train",
        _config(optim={"lr": -0.1}),
        [],
        ["optim.lr must be non-negative, got -0.1"],
    ),
    "a beta of 1 in a grid axis": (
        "grid",
        _grid({"name": "a", "axes": {"optim.betas": [[0.9, 0.999], [0.9, 1.0]]}}),
        [],
        ["block 'a': optim.betas must be a list of 2 values, each in [0, 1), got [0.9, 1.0]"],
    ),
    "no fine-tuning learning rates": (
        "train",
        _config(eval={"finetune.lrs": []}),
        [],
        ["eval.finetune.lrs must be a list of at least 1 value, each positive, got []"],
    ),
    "an end learning rate that is infinite": (
        "train",
        _config(optim={"end_lr": INF}),
        [],
        ["optim.end_lr: expected finite numbers, got inf"],
    ),
    "a zero timescale is said once": (
        "train",
        _config(optim={"schedule": "rsqrt", "timescale": 0}),
        [],
        ["optim.timescale must be positive, got 0"],
    ),
    "unknown key": (
        "train",
        _config(train={"stpes": 3}),
        [],
        ["unknown key 'train.stpes'; did you mean train.steps?"],
    ),
    "unknown value": (
        "train",
        _config(optim={"schedule": "step"}),
        [],
        ["optim.schedule: unknown value 'step'; valid: 'linear', 'cosine'"],
    ),
    "wrong type": (
        "train",
        _config(train={"batch_size": "big"}),
        [],
        ["train.batch_size: expected a whole number, got 'big'"],
    ),
    "unknown key set on the command line": (
        "train",
        _config(),
        ["--set", "optim.lrr=0.1"],
        ["unknown key 'optim.lrr'; did you mean optim.lr?"],
    ),
    "unknown grid key": (
        "grid",
        _grid(blockz=[]),
        [],
        ["unknown key 'blockz'; did you mean blocks?"],
    ),
    "unknown model size in a block": (
        "grid",
        _grid({"name": "a", "set": {"model.name": "ViT-Q/16"}}),
        [],
        ["block 'a': model.name: unknown ViT size 'Q' in 'ViT-Q/16'; valid sizes: Femto"],
    ),
    "a resource that is no number": (
        "grid",
        _grid(resources={"default": {"gpus": "two"}}),
        [],
        ["resources.default: gpus: expected a whole number, got 'two'"],
    ),
    "resources that are no mapping": (
        "grid",
        _grid(resources={"ViT": 4}),
        [],
        ["resources.ViT: must be a section (mapping), got 4"],
    ),
    "a resources entry named by a number": (
        "grid",
        _grid(resources={1: {"gpus": 1}}),
        [],
        ["resources: keys must be strings, got 1"],
    ),
    "a block that is no mapping": (
        "grid",
        _grid({"name": "a"}, "vit"),
        [],
        ["block '#1': must be a section (mapping), got 'vit'"],
    ),
    "empty axis": (
        "grid",
        _grid({"name": "a", "axes": {"seed": []}}),
        [],
        ["block 'a': axes.seed must be a list of at least 1 value, got []"],
    ),
    "empty top-level axis": (
        "grid",
        _grid(axes={"seed": []}),
        [],
        ["file.yaml: axes.seed must be a list of at least 1 value, got []"],
    ),
    "grid file not YAML": (
        "grid",
        "name: bad\nbase: [1, 2\n",
        [],
        ["not valid YAML at line 3, column 1: expected ',' or ']', but got '<stream end>'"],
    ),
    "config file not YAML": (
        "train",
        "train: {steps: 3\n",
        [],
        ["not valid YAML at line 2, column 1: expected ',' or '}', but got '<stream end>'"],
    ),
    "--set value not YAML": (
        "grid",
        _grid(),
        ["--set", "train.steps=[1"],
        ["--set train.steps=[1: not valid YAML at line 1, column 3"],
    ),
    "no workers": ("grid", _grid(), ["--workers", "0"], ["--workers must be at least 1, got 0"]),
    "no processes": (
        "grid",
        _grid(),
        ["--processes", "0"],
        ["--processes must be at least 1, got 0"],
    ),
    "negative stop timeout": (
        "grid",
        _grid(),
        ["--stop-timeout", "-1"],
        ["--stop-timeout must be a number of seconds >= 0, got -1.0"],
    ),
}


def _write(tmp_path, content) -> str:
    path = tmp_path / "file.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return str(path)


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_value_is_one_line_and_exit_code_2(case, tmp_path, capsys):
    command, content, extra, says = BAD[case]
    path = _write(tmp_path, content)
    assert main([command, path, "--dry-run", *extra]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    (line,) = err.splitlines()
    assert line.startswith("error: "), line
    for words in says:
        assert words in line, (words, line)


def test_intervals_longer_than_the_run_are_allowed_and_said(tmp_path, capsys):
    train = _config(train={"eval_every": 100, "checkpoint_every": 50, "log_every": 13})
    assert main(["train", _write(tmp_path, train), "--dry-run"]) == 0
    *err, recipe = capsys.readouterr().err.splitlines()
    assert recipe.startswith("note: recipe 'synthetic', chosen for synthetic, sets ")
    assert "optim.lr=0.001" in recipe and "(set any of them, or recipe: " in recipe
    assert err == [
        "note: train.eval_every: 100 is longer than the run (12 steps): it evaluates at the "
        "end only",
        "note: train.checkpoint_every: 50 is longer than the run (12 steps): it checkpoints at "
        "the end (and on a stop signal) only",
        "note: train.log_every: 13 is longer than the run (12 steps): it logs the last step only",
    ]
    grid = _grid({"name": "a", "axes": {"seed": [0, 1]}, "set": {"train.eval_every": 1000}})
    assert main(["grid", _write(tmp_path, grid), "--dry-run"]) == 0
    notes = capsys.readouterr().err.splitlines()
    assert notes == [  # once, not once per cell
        "note: train.eval_every: 1,000 is longer than the run (12 steps): it evaluates at the "
        "end only",
        recipe,
    ]


def test_a_recipe_is_said_once_per_grid_with_the_values_that_differ_between_cells(capsys):
    """The paper's Fig. 5 grid: the jft recipe's learning rate differs per model; one note
    lists them, not one note per learning rate."""
    assert main(["grid", "experiments/fig5_compute.yaml", "--dry-run", *AWAY]) == 0
    notes = [n for n in capsys.readouterr().err.splitlines() if "recipe 'jft'" in n]
    assert len(notes) == 1, notes
    assert "optim.lr=0.0008|0.0006|0.0004|0.001|0.0002|0.0003" in notes[0]


def test_the_real_entry_point_says_it_in_one_line(tmp_path):
    """The issue's case as a user meets it: a subset synthetic cannot hold, in a grid."""
    grid = _grid({"name": "a", "axes": {"data.subset": [100, "2000M"]}})
    done = subprocess.run(
        [sys.executable, "-m", "vitscale.cli", "grid", _write(tmp_path, grid), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: {tmp_path / 'file.yaml'}: block 'a': data.subset: '2000M' asks for more "
        "examples than synthetic holds (1,000,000,000); allowed: a count up to 1,000,000,000 "
        "or a fraction in (0, 1]"
    ]


def test_grid_problems_are_blamed_on_the_key_that_caused_them_once(tmp_path, capsys):
    """A typo in base:, one in the top-level axes: and one in --set, in a grid of two
    blocks: each is said once, at its own place, not once per block as 'block ...'."""
    grid = {
        "name": "typo",
        "base": {"data": {"dataset": "synthetic"}, "optim": {"lrr": 1e-3}},
        "axes": {"seed": [0, 1], "optim.warmup_step": [5]},
        "blocks": [
            {"name": "vit", "axes": {"model.name": ["ViT-Femto/8"]}},
            {"name": "resnet", "axes": {"model.name": ["BiT-R11x0.5"]}},
        ],
    }
    path = _write(tmp_path, grid)
    args = ["grid", path, "--dry-run", "--set", "optim.weight_decy=0.1"]
    assert main(args) == 2
    lines = capsys.readouterr().err.removeprefix("error: ").splitlines()
    assert len(lines) == 4, lines
    assert lines[3] == (  # no duration anywhere: a rule, said once for the grid
        f"{path}: train: give the duration exactly once as train.steps, train.epochs or "
        "train.examples (got none)"
    )
    assert f"{path}: base: unknown key 'optim.lrr'; did you mean optim.lr?" in lines
    assert any(s.startswith(f"{path}: axes: unknown key 'optim.warmup_step'") for s in lines)
    assert (
        "--set optim.weight_decy=0.1: unknown key 'optim.weight_decy'; did you mean "
        "optim.weight_decay?"
    ) in lines


@pytest.mark.parametrize(
    "where, extra",
    [
        ("block", []),
        ("set", ["--set", "optim.lr=fast"]),
    ],
)
def test_a_bad_value_the_user_wrote_is_never_blamed_on_the_recipe(where, extra, tmp_path, capsys):
    block = {"name": "a", "set": {"optim.lr": "fast"}} if where == "block" else {"name": "a"}
    path = _write(tmp_path, _grid(block))
    assert main(["grid", path, "--dry-run", *extra]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "optim.lr: expected a number or null, got 'fast'" in line
    assert "recipe" not in line, line
