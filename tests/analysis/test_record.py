"""vitscale.results: run folders -> one row per cell, statuses, histories, broken folders."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vitscale import record as rf
from vitscale.record import cells as results

from ..helpers import run_folders as fixtures


def _write(root, grid, name, **kw):
    config, rows, result = fixtures.cell(grid=grid, **kw)
    return (
        config,
        rows,
        result,
        fixtures.write_cell(root / grid / name, config=config, metrics=rows, result=result),
    )


@pytest.fixture
def runs(tmp_path):
    """runs/ with a grid of two finished cells, one failed, one running, one pending, and
    four broken folders."""
    root = tmp_path / "runs"
    grid = "g"
    _write(
        root, grid, "done1", model="ViT-Pico/4", subset=1000, steps=40, finetune={"imagenet": 0.5}
    )
    _write(root, grid, "done2", model="BiT-R11x0.5", subset=3000, steps=80, seed=1)
    config, rows, result = fixtures.cell(model="ViT-Pico/8", subset=1000, steps=40, grid=grid)
    failed = result | {"status": rf.STATUS_FAILED, "error": "NaN loss", "failed_step": 20}
    fixtures.write_cell(root / grid / "failed", config=config, metrics=rows[:2], result=failed)
    running = root / grid / "running"
    fixtures.write_cell(running, config=config, metrics=rows[:3])
    with open(running / rf.METRICS, "a") as fh:
        fh.write('{"step": 999, "examples_')  # torn last line: a crash mid-write
    fixtures.write_cell(root / grid / "pending", config=config)
    # Broken: malformed config, malformed result, a result without a config, a bad status.
    bad = root / grid / "bad_config"
    bad.mkdir()
    (bad / rf.CONFIG).write_text("{not json")
    bad_result = fixtures.write_cell(root / grid / "bad_result", config=config)
    (bad_result / rf.RESULT).write_text('{"status": "done", ')
    orphan = root / grid / "orphan"
    orphan.mkdir()
    (orphan / rf.RESULT).write_text(json.dumps(result))
    bad_status = fixtures.write_cell(
        root / grid / "bad_status", config=config, result=result | {"status": "finished"}
    )
    assert bad_status.is_dir()
    return root


def test_load_runs_rows_statuses_and_problems(runs):
    cells, problems = results.load_runs(runs)
    by_name = {r["path"].rsplit("/", 1)[-1]: r for r in cells.to_dict("records")}
    assert set(by_name) == {"done1", "done2", "failed", "running", "pending"}
    assert {k: v["status"] for k, v in by_name.items()} == {
        "done1": "done",
        "done2": "done",
        "failed": "failed",
        "running": "running",
        "pending": "pending",
    }
    broken = sorted(p.path.rsplit("/", 1)[-1] for p in problems)
    assert broken == ["bad_config", "bad_result", "bad_status", "orphan"]
    assert all(str(p) for p in problems)
    assert "valid: done, failed" in next(p.message for p in problems if "bad_status" in p.path)


def test_columns_units_and_names(runs):
    cells, _ = results.load_runs(runs / "g")
    assert list(cells.columns[: len(results.BASE_COLUMNS)]) == list(results.BASE_COLUMNS)
    row = cells.set_index(cells["path"].str.rsplit("/", n=1).str[-1]).loc["done1"]
    config, _, result = fixtures.cell(
        model="ViT-Pico/4", subset=1000, steps=40, grid="g", finetune={"imagenet": 0.5}
    )
    assert (row["model"], row["family"], row["size"], row["patch"]) == (
        "ViT-Pico/4",
        "ViT",
        "Pico",
        4,
    )
    assert row["num_examples"] == 1000 and row["subset"] == 1000
    assert row["examples_seen"] == result["examples_seen"]
    assert row["epochs"] == pytest.approx(result["examples_seen"] / 1000)
    assert row["exaflops"] == pytest.approx(result["pretrain_exaflops"])
    assert row["params"] == result["params"] and row["steps"] == 40 and row["seed"] == 0
    key = rf.fewshot_key("synthetic-shapes", 5)
    # Best values under the metric name, finals prefixed, accuracies in percent.
    assert row[key] == pytest.approx(100 * result["best"][key])
    assert row[rf.FINAL + key] == pytest.approx(100 * result["final"][key])
    assert row[rf.FINAL + rf.TRAIN_LOSS] == pytest.approx(result["final"][rf.TRAIN_LOSS])
    assert row[rf.finetune_key("imagenet")] == pytest.approx(50.0)
    assert row["config.optim.lr"] == config["optim"]["lr"]
    assert row["config.eval.fewshot.shots"] == (1, 5, 10, 25)
    assert set(results.metric_columns(cells)) >= {key, rf.FINAL + key}
    assert not any(c.startswith("config.") for c in results.metric_columns(cells))


def test_resnet_and_hybrid_decoding(tmp_path):
    _write(tmp_path, "g", "r", model="BiT-R20x0.5", subset=100, steps=8)
    _write(tmp_path, "g", "h", model="R50x1+ViT-Pico/16", subset=100, steps=8)
    cells, problems = results.load_runs(tmp_path / "g")
    assert not problems
    got = {r.model: (r.family, r.size, r.patch) for r in cells.itertuples()}
    assert got["BiT-R20x0.5"][:2] == ("ResNet", "R20x0.5") and pd.isna(got["BiT-R20x0.5"][2])
    assert got["R50x1+ViT-Pico/16"] == ("Hybrid", "Pico", 16)


def test_unfinished_cells_use_the_last_metrics_row(runs):
    cells, _ = results.load_runs(runs)
    row = cells[cells["path"].str.endswith("running")].iloc[0]
    _, rows, _ = fixtures.cell(model="ViT-Pico/8", subset=1000, steps=40, grid="g")
    assert row["last_step"] == rows[2][rf.STEP]  # the torn line after it is skipped
    assert row["examples_seen"] == rows[2][rf.EXAMPLES_SEEN]
    assert row["exaflops"] == pytest.approx(rows[2][rf.EXAFLOPS])
    pending = cells[cells["path"].str.endswith("pending")].iloc[0]
    assert pd.isna(pending["last_step"]) and pd.isna(pending["exaflops"])


def test_cell_state_for_status(runs):
    g = runs / "g"
    assert results.cell_status(g / "done1") == "done"
    assert results.cell_status(g / "pending") == "pending"
    assert results.cell_status(g / "running") == "running"
    failed = results.cell_state(g / "failed")
    assert (failed.status, failed.last_step, failed.error) == ("failed", 20, "NaN loss")
    _, rows, result = fixtures.cell(model="ViT-Pico/8", subset=1000, steps=40, grid="g")
    running = results.cell_state(g / "running")
    key = rf.fewshot_key("synthetic-shapes", 5)
    assert running.last_step == rows[2][rf.STEP]
    assert running.best[key] == pytest.approx(max(r[key] for r in rows[:3]))  # fractions
    assert results.cell_state(g / "running", scan_metrics=False).best == {}
    assert (
        results.cell_state(g / "done1").best
        == fixtures.cell(
            model="ViT-Pico/4", subset=1000, steps=40, grid="g", finetune={"imagenet": 0.5}
        )[2]["best"]
    )
    for broken in ("bad_result", "orphan", "bad_status"):
        with pytest.raises(results.RunFolderError, match=broken):
            results.cell_state(g / broken)


def test_long_metrics_file_last_row(tmp_path):
    config, rows, _ = fixtures.cell(model="ViT-Pico/4", subset=10, steps=4000, evals=400)
    run = fixtures.write_cell(tmp_path / "g" / "c", config=config, metrics=rows)
    assert (run / rf.METRICS).stat().st_size > 4 * 4096  # the tail read must look back
    assert results.cell_state(run, scan_metrics=False).last_step == 4000


def test_paths_as_run_grid_or_parent_and_duplicates(runs):
    one, _ = results.load_runs(runs / "g" / "done1")
    assert len(one) == 1
    both, _ = results.load_runs([runs, runs / "g"])  # the same folders twice: read once
    assert len(both) == 5
    with pytest.raises(FileNotFoundError, match="nope"):
        results.load_runs(runs / "nope")


def test_empty_folder_is_a_problem_not_an_error(tmp_path):
    cells, problems = results.load_runs(tmp_path)
    assert cells.empty and list(cells.columns) == list(results.BASE_COLUMNS)
    assert len(problems) == 1 and "no run folders" in problems[0].message


def test_unknown_model_is_reported(tmp_path):
    config, rows, result = fixtures.cell(model="ViT-Pico/4", subset=10, steps=4)
    config["model"]["name"] = "ViT-Q/4"
    fixtures.write_cell(tmp_path / "g" / "c", config=config, result=result)
    cells, problems = results.load_runs(tmp_path)
    assert cells.empty and "unknown ViT size 'Q'" in problems[0].message


def test_load_history(runs):
    cells, _ = results.load_runs(runs)
    history, problems = results.load_history(cells)
    assert not problems
    _, rows, _ = fixtures.cell(model="ViT-Pico/4", subset=1000, steps=40, grid="g")
    key = rf.fewshot_key("synthetic-shapes", 5)
    mine = history[
        history["cell_id"] == cells.loc[cells["path"].str.endswith("done1"), "cell_id"].iloc[0]
    ]
    assert list(mine["step"]) == [r[rf.STEP] for r in rows]
    assert list(mine[key]) == pytest.approx([100 * r[key] for r in rows])
    assert list(mine[rf.LR]) == pytest.approx([r[rf.LR] for r in rows])  # not an accuracy
    # 4 rows for each finished cell, 2 for the failed one, 3 for the running one.
    assert len(history) == 4 + 4 + 2 + 3
    slim, _ = results.load_history(runs, metrics=[key])
    assert set(slim.columns) == {
        *results.HISTORY_COLUMNS,
        rf.STEP,
        rf.EXAMPLES_SEEN,
        rf.EXAFLOPS,
        key,
    }


def test_result_from_summary_accepts_both_spellings():
    nested = {
        "status": "done",
        "best": {"fewshot/a/5shot": 0.5},
        "final": {"lr": 0.1},
        "finetune": {"imagenet": 0.7},
        "steps": 3,
    }
    flat = {
        "status": "done",
        "best/fewshot/a/5shot": 0.5,
        "final/lr": 0.1,
        "finetune/imagenet/top1": 0.7,
        "steps": 3,
        "fewshot/a/5shot": 0.1,
    }
    for summary in (nested, flat):
        got = rf.RunResult.from_summary(summary)
        assert got.best == {"fewshot/a/5shot": 0.5}
        assert got.final == {"lr": 0.1}
        assert got.finetune == {"imagenet": 0.7}
        assert got.steps == 3 and got.restarts is None


def test_results_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, vitscale.record.cells, vitscale.record.wandb_runs; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


_NAMES = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=12)
_METRIC = st.builds(rf.fewshot_key, _NAMES, st.integers(1, 25)) | st.sampled_from(
    [rf.TRAIN_LOSS, rf.LR, rf.UPSTREAM_TOP1, rf.EXAFLOPS, rf.THROUGHPUT]
)
_FLOAT = st.floats(allow_nan=False, allow_infinity=False, width=64)
_COUNT = st.integers(0, 10**12)


def _every_field_set() -> st.SearchStrategy[rf.RunResult]:
    """Results with every field away from its default: a field a conversion forgets
    cannot hide behind a default value."""
    return st.builds(
        rf.RunResult,
        status=st.sampled_from(rf.RESULT_STATUSES),
        error=_NAMES,
        failed_step=_COUNT,
        cell_id=_NAMES,
        model=st.sampled_from(["ViT-B/16", "BiT-R50x1", "R50x1+ViT-B/16"]),
        steps=_COUNT,
        examples_seen=_COUNT,
        pretrain_exaflops=_FLOAT,
        params=_COUNT,
        wall_clock_s=_FLOAT,
        device_hours=_FLOAT,
        final=st.dictionaries(_METRIC, _FLOAT, min_size=1),
        best=st.dictionaries(_METRIC, _FLOAT, min_size=1),
        finetune=st.dictionaries(_NAMES, _FLOAT, min_size=1),
        precision=st.sampled_from(["bf16", "fp32"]),
        num_processes=st.integers(1, 4096),
        restarts=_COUNT,
        time_s=st.dictionaries(
            st.sampled_from(["setup", "data", "step", "eval"]), _FLOAT, min_size=1
        ),
        skipped_samples=_COUNT,
        skipped=st.lists(_NAMES, min_size=1),
        published=st.dictionaries(
            st.sampled_from(["dataset", "exaflops", "epochs"]), _NAMES, min_size=1
        ),
        branched_from=st.fixed_dictionaries({"trunk": _NAMES, "step": _COUNT, "exaflops": _FLOAT}),
    )


@settings(max_examples=200, deadline=None)
@given(_every_field_set())
def test_a_result_survives_json_and_the_wandb_summary_field_for_field(result):
    defaults = rf.RunResult(status=result.status).to_json()
    changed = {k for k, v in result.to_json().items() if v != defaults[k]}
    assert changed | {"status"} == set(defaults)  # the example covers every field
    as_json = json.loads(json.dumps(result.to_json()))
    assert rf.RunResult.from_json(as_json) == result
    flat = json.loads(json.dumps(result.to_summary()))  # W&B stores JSON values
    assert all(not isinstance(v, dict) for v in flat.values())  # flat, as W&B shows it
    assert rf.RunResult.from_summary(flat) == result
    nested = flat | {"best": result.best, "final": result.final}  # W&B may nest these
    assert rf.RunResult.from_summary(nested) == result


def test_old_result_files_and_wandb_runs_read_with_defaults():
    old = {"status": "done", "steps": 3, "best": {"fewshot/a/5shot": 0.5}, "obsolete": 1}
    result = rf.RunResult.from_json(old)
    assert result.steps == 3 and result.restarts is None and result.skipped == []
    summary = {"status": "failed", "_wandb": {"runtime": 3}, "family": "ViT", "train/loss": 2.0}
    assert rf.RunResult.from_summary(summary) == rf.RunResult(status="failed")
    with pytest.raises(ValueError, match="no valid status"):
        rf.RunResult.from_json({"status": "running"})


def test_a_grids_cells_of_an_earlier_version_are_not_counted_but_said(tmp_path):
    """The grid folder's cells.json (written by `vitscale grid`) names its current cells;
    a run folder beside them is from an earlier version: not read, said once. A folder
    named by itself is read; an unreadable cells.json counts every cell, as before."""
    root = tmp_path / "runs"
    for name in ("now1", "now2", "old"):
        _write(root, "g", name, model="ViT-Pico/4", subset=1000, steps=40)
    versions = [
        {"grid_file": "/a/g.yaml", "overrides": [], "cells": ["now1"]},
        {"grid_file": "/a/g.yaml", "overrides": ["seed=2"], "cells": ["now2"]},
    ]
    rf.write_json_atomic(root / "g" / rf.GRID_CELLS, {"grid": "g", "versions": versions})
    frame, problems = results.load_runs(root)
    assert sorted(p.rsplit("/", 1)[-1] for p in frame["path"]) == ["now1", "now2"]
    (stale,) = problems
    assert stale.stale and "1 cell(s) from an earlier version of this grid" in str(stale)
    assert "`vitscale grid /a/g.yaml --set seed=2 --prune`" in str(stale)  # the latest
    assert [str(p) for p in results.find_run_folders(root / "g" / "old")[0]] == [
        str(root / "g" / "old")
    ]
    (root / "g" / rf.GRID_CELLS).write_text("{not json")
    assert len(results.find_run_folders(root)[0]) == 3
