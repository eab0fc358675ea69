"""A researcher's own study, start to finish, as a newcomer runs it: an ImageFolder
set this test writes (with a corrupt file), a grid of two learning rates and two seeds, the
failure, the fix, the rerun; every answer read from the real CLI's output and exit code."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from PIL import Image

from vitscale.cli import EXIT_USER_ERROR, main

CLASSES = ("circle", "hstripes", "vstripes", "dot")


def _shapes(root: Path, *, per_class: dict[str, int]) -> Path:
    """Four classes of 32 px JPEGs a tiny ViT tells apart in a few steps, noisy per image."""
    rng = np.random.default_rng(0)
    for split, n in per_class.items():
        for i in range(n * len(CLASSES)):
            k = i % len(CLASSES)
            a = np.zeros((32, 32, 3), np.uint8)
            [a[8:24, 8:24], a[::4], a[:, ::4], a[14:18, 14:18]][k][...] = 230
            a = np.clip(a + rng.integers(0, 40, a.shape), 0, 255).astype(np.uint8)
            path = root / split / CLASSES[k] / f"{i:03d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(a).save(path, quality=90)
    return root


def _cli(*args: str, cwd: Path) -> SimpleNamespace:
    """``vitscale ARGS`` run in ``cwd`` as a user types it (in this process: a subprocess
    per command only added its torch import), with its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The user's folder: their data (one corrupt training image), their grid."""
    home = tmp_path_factory.mktemp("researcher")
    data = _shapes(home / "shapes", per_class={"train": 8, "test": 4})
    (data / "train" / "dot" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    grid = {
        "name": "mine",
        "retries": 0,
        "base": {
            "data": {"dataset": f"imagefolder:{data}", "image_size": 32},
            "model": {"name": "ViT-Pico/4"},
            "train": {"steps": 4, "batch_size": 8, "log_every": 1, "eval_every": 2},
            "optim": {"warmup_steps": 1},
            "eval": {
                "fewshot": {
                    "datasets": [f"imagefolder:{data}"],
                    "shots": [1, 5],
                    "seeds": 1,
                    "test_examples": 16,
                },
                "upstream": {"examples": 16},
            },
            "wandb": {"mode": "disabled"},
        },
        "axes": {"optim.lr": [1e-3, 3e-3], "seed": [0, 1]},
    }
    (home / "grid.yaml").write_text(yaml.safe_dump(grid))
    return home


def test_a_typo_is_said_once_where_it_was_written(study):
    bad = yaml.safe_load((study / "grid.yaml").read_text())
    bad["base"]["optim"]["lrr"] = 0.1
    (study / "typo.yaml").write_text(yaml.safe_dump(bad))
    done = _cli("grid", "typo.yaml", "--dry-run", "--set", "train.stesp=3", cwd=study)
    assert done.returncode == EXIT_USER_ERROR and done.stdout == ""
    lines = done.stderr.removeprefix("error: ").splitlines()
    assert sorted(lines) == [
        "--set train.stesp=3: unknown key 'train.stesp'; did you mean train.steps?",
        "typo.yaml: base: unknown key 'optim.lrr'; did you mean optim.lr?",
    ]


@pytest.fixture(scope="module")
def ran(study):
    """The study as the user runs it: the dry-run, a failure on the corrupt file, a rerun
    that changes nothing, the fix, the rerun that retries the failed cells."""
    out = {"dry": _cli("grid", "grid.yaml", "--dry-run", cwd=study)}
    out["dry_verify"] = _cli("grid", "grid.yaml", "--dry-run", "--verify", cwd=study)
    out["failed"] = _cli("grid", "grid.yaml", "--runs", "runs", cwd=study)
    out["stuck"] = _cli("grid", "grid.yaml", "--runs", "runs", cwd=study)
    out["verify"] = _cli("data", "shard", "imagefolder:shapes", "shards", "--verify", cwd=study)
    (study / "shapes" / "train" / "dot" / "broken.jpg").unlink()  # the fix
    out["rerun"] = _cli("grid", "grid.yaml", "--runs", "runs", "--retry-failed", cwd=study)
    return out


def test_the_dry_run_says_the_recipe_it_fills_in_once(ran):
    assert ran["dry"].returncode == 0, ran["dry"].stderr
    note = ran["dry"].stderr
    assert note.count("recipe 'small', chosen for imagefolder:") == 1
    assert "train.loss=softmax" in note and "optim.warmup_steps" not in note  # user-set


def _variant(study: Path, name: str, **base) -> str:
    """The user's grid with ``base`` sections changed (``data={"subset": 400}``), as a file."""
    grid = yaml.safe_load((study / "grid.yaml").read_text())
    for section, values in base.items():
        for key, value in values.items():
            *parents, last = key.split(".")
            node = grid["base"].setdefault(section, {})
            for parent in parents:
                node = node.setdefault(parent, {})
            node[last] = value
    (study / f"{name}.yaml").write_text(yaml.safe_dump(grid))
    return f"{name}.yaml"


def test_the_dry_run_reads_the_data_and_says_each_problem_once(study):
    """Paths that do not exist, a subset larger than the split, more shots than the smallest
    class holds: each one line, before anything runs, whatever the number of cells."""
    fewshot = yaml.safe_load((study / "grid.yaml").read_text())["base"]["eval"]["fewshot"]
    gone = _variant(
        study,
        "gone",
        data={"dataset": "imagefolder:shapez"},
        eval={"fewshot.datasets": [*fewshot["datasets"], "imagefolder:transfer"]},
    )
    axes = yaml.safe_load((study / gone).read_text())  # an axis under data: blamed on base
    axes["axes"]["data.subset"] = [8, 16]
    (study / gone).write_text(yaml.safe_dump(axes))
    big = _variant(study, "big", data={"subset": 400}, eval={"fewshot.shots": [1, 9]})
    for grid, said in (
        (
            gone,
            [
                "gone.yaml: base: data.dataset: imagefolder:shapez: nothing under",
                "gone.yaml: base: eval.fewshot.datasets: imagefolder:transfer: nothing under",
            ],
        ),
        (big, ["data.subset: 400 asks for more examples than", "9-shot needs 9 train examples"]),
    ):
        done = _cli("grid", grid, "--dry-run", cwd=study)
        assert done.returncode == EXIT_USER_ERROR and done.stdout == "", done.stderr
        lines = done.stderr.splitlines()
        for text in said:
            assert sum(text in line for line in lines) == 1, (text, lines)
    # with a cluster profile the grid is planned away from its data: one note names the sets
    away = _cli("grid", gone, "--dry-run", "--profile", "h100x8", cwd=study)
    assert away.returncode == 0, away.stderr
    notes = [line for line in away.stderr.splitlines() if "not on this machine" in line]
    assert [n.split()[1] for n in notes] == ["imagefolder:shapez", "imagefolder:transfer"]


def test_the_dry_run_says_what_the_set_holds_and_verify_finds_the_bad_file(ran):
    dry, verify = ran["dry"], ran["dry_verify"]
    (data,) = [line for line in dry.stdout.splitlines() if line.startswith("data: ")]
    # 8 train images of each of 4 classes and the truncated one (listed; it decodes late)
    assert "4 classes (the smallest with 8 train examples), train 33, test 16" in data
    assert verify.returncode == EXIT_USER_ERROR and verify.stdout == ""
    bad = [line for line in verify.stderr.splitlines() if "broken.jpg" in line]
    assert len(bad) == 1 and bad[0].strip().endswith(
        "/shapes/train/dot/broken.jpg: Truncated File Read"
    )


def test_the_dry_runs_exaflops_are_the_runs(study, ran):
    """The head is sized with the set's 4 classes, not an assumed 1000."""
    dry = _cli("grid", "grid.yaml", "--dry-run", "--json", cwd=study)
    cells = json.loads(dry.stdout)["cells"]
    assert {c["action"] for c in cells} == {"skip-done"}
    for cell in cells:
        result = json.loads((study / "runs" / "mine" / cell["id"] / "result.json").read_text())
        assert cell["exaflops"] == pytest.approx(result["pretrain_exaflops"], rel=1e-9)


def test_failed_cells_exit_non_zero_say_how_to_retry_and_rerun_after_the_fix(ran):
    failed, stuck, rerun = ran["failed"], ran["stuck"], ran["rerun"]
    assert failed.returncode == 1 and "broken.jpg" in failed.stdout
    assert "4 cell(s) failed" in failed.stderr and "--retry-failed" in failed.stderr
    assert stuck.returncode == 1  # nothing changed: nothing runs
    assert stuck.stdout.startswith("0 cells to run, 0 done, 4 failed")
    assert "--retry-failed" in stuck.stderr
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "4 cells run, 0 failed" in rerun.stdout


def test_shard_verify_names_the_bad_file_with_its_reason_alone(ran):
    verify = ran["verify"]
    assert verify.returncode == EXIT_USER_ERROR
    (bad,) = [line for line in verify.stderr.splitlines() if "broken.jpg" in line]
    assert bad.strip().startswith("shapes/train/dot/broken.jpg: ") and "avif" not in bad


def test_fit_says_once_what_this_design_can_support(study, ran):
    fit = _cli("fit", "runs/mine", cwd=study)
    assert fit.returncode == EXIT_USER_ERROR
    (line,) = [line for line in fit.stderr.splitlines() if "error:" in line]  # said once
    assert "a frontier needs >= 4 compute points" in line
    assert line.endswith("train for at least 8 steps (train.steps is 4), evaluating every 1/8")


def test_status_labels_each_setting_and_shows_the_own_sets_accuracy(study, ran):
    status = _cli("status", "runs/mine", cwd=study)
    assert status.returncode == 0
    rows = [line.split() for line in status.stdout.splitlines() if line.startswith("mine ")]
    done = [r for r in rows if r[5] == "done"]
    assert sorted((r[2], r[3], r[4]) for r in done) == sorted(
        [("ViT-Pico/4", f"lr={lr}", "all") for lr in ("0.001", "0.003")] * 2
    )
    assert all(r[7].endswith("%") for r in done)  # the own set's 5-shot accuracy, shown
    # The fix changed the set (one file fewer): its cells are new ones; the failed cells of
    # the set as it was are not the grid's any more, so not counted, and said so.
    assert sorted(r[5] for r in rows) == ["done"] * 4
    assert "8 cells" not in status.stdout and "4 cells: 4 done" in status.stdout
    (note,) = [line for line in status.stdout.splitlines() if line.startswith("note: ")]
    assert "4 cell(s) from an earlier version of this grid, not counted" in note
    assert f"`vitscale grid {study / 'grid.yaml'} --prune`" in note


def test_prune_moves_the_earlier_versions_cells_aside(study, ran):
    before = sorted(p.name for p in (study / "runs" / "mine").iterdir())
    would = _cli("grid", "grid.yaml", "--runs", "runs", "--prune", "--dry-run", cwd=study)
    assert would.returncode == 0 and "would move 4 cell(s)" in would.stdout
    assert sorted(p.name for p in (study / "runs" / "mine").iterdir()) == before
    pruned = _cli("grid", "grid.yaml", "--runs", "runs", "--prune", cwd=study)
    assert pruned.returncode == 0 and "moved 4 cell(s)" in pruned.stdout
    assert len(list((study / "runs" / "mine" / ".stale").iterdir())) == 4  # kept, aside
    status = _cli("status", "runs/mine", cwd=study)
    assert "4 cells: 4 done" in status.stdout and "note:" not in status.stdout


def test_a_variant_of_the_grid_run_beside_it_hides_none_of_its_cells(study, ran):
    """Another file of the same name, or the grid with --set, run into the same folder:
    its cells are its own version's, and the grid's cells still count."""
    variant = _variant(study, "variant", train={"steps": 2})
    (study / "other").mkdir(exist_ok=True)
    other = study / "other" / "grid.yaml"
    one_cell = yaml.safe_load((study / variant).read_text()) | {"axes": {"seed": [0]}}
    other.write_text(yaml.safe_dump(one_cell))
    for args in (("--set", "train.steps=3"), ()):
        ran = _cli("grid", str(other), "--runs", "runs", *args, cwd=study)
        assert ran.returncode == 0, ran.stderr
    status = _cli("status", "runs/mine", cwd=study)
    assert "6 cells: 6 done" in status.stdout and "note:" not in status.stdout
    assert _cli("grid", "grid.yaml", "--runs", "runs", "--prune", cwd=study).stdout.startswith(
        "moved 0 cell(s)"
    )


def test_two_learning_rates_are_two_settings_of_two_seeds_never_four(study, ran):
    text = _cli("summary", "runs/mine", cwd=study).stdout
    assert "2 seed(s) per cell" in text and "4 seed" not in text
    assert "ViT-Pico/4 lr=0.001" in text and "ViT-Pico/4 lr=0.003" in text
    assert "shapes 5-shot accuracy" in text  # the folder's name; 5 shots, measured
    summary = _cli("summary", "runs/mine", "--json", cwd=study)
    assert json.loads(summary.stdout)["settings"]["differing_keys"] == ["optim.lr"]
    best = _cli("summary", "runs/mine", "--settings", "best", cwd=study).stdout
    assert "best of 2 lr settings" in best


def test_the_summary_fig5_and_table6_read_one_named_metric(study, ran):
    """The compute views read one metric, decided in one place, and each names it."""
    frontiers = [
        line
        for line in _cli("summary", "runs/mine", cwd=study).stdout.splitlines()
        if "compute frontier" in line
    ]
    assert frontiers and all("(shapes 5-shot accuracy" in line for line in frontiers)
    drawn = _cli("figures", "runs/mine", "--out", "figs", cwd=study)
    assert drawn.returncode == 0, drawn.stderr
    table = (study / "figs" / "table6.md").read_text()
    assert "shapes 5-shot accuracy" in table.splitlines()[0], table
