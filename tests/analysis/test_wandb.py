"""W&B as a second source: the online API (a fake Api object: no network) and real
offline run files written by the wandb client, read back with wandb's own reader."""

from __future__ import annotations

import pandas as pd
import pytest

from vitscale import record as rf
from vitscale.record.cells import load_history, load_runs
from vitscale.record.wandb_runs import load_wandb, load_wandb_history, load_wandb_offline

from ..helpers import run_folders as fixtures

SHAPES5 = rf.fewshot_key("synthetic-shapes", 5)


def _cell(seed=0, model="ViT-Pico/4"):
    return fixtures.cell(
        model=model, subset=1000, steps=40, seed=seed, grid="demo", finetune={"imagenet": 0.5}
    )


def _same_rows(a: pd.Series, b: pd.Series, columns) -> None:
    for c in columns:
        if c in ("source", "path"):
            continue
        va, vb = a[c], b[c]
        if isinstance(va, float) or isinstance(vb, float):
            assert va == pytest.approx(vb, nan_ok=True), c
        else:
            assert va == vb, c


class FakeRun:
    def __init__(self, config, rows, summary, state="finished", group="demo"):
        self.id = config["cell_id"]
        self.group = group
        self.config = config
        self.summary_metrics = summary
        self.state = state
        self._rows = rows

    def scan_history(self, keys=None):
        for row in self._rows:
            yield {"_step": row["step"], "_runtime": 1.0} | (
                {k: row[k] for k in keys if k in row} if keys else row
            )


class FakeApi:
    def __init__(self, runs):
        self._runs = runs
        self.calls = []

    def runs(self, path, filters=None):
        self.calls.append((path, filters))
        group = (filters or {}).get("group")
        return [r for r in self._runs if group is None or r.group == group]


@pytest.fixture
def folder_and_api(tmp_path):
    config, rows, result = _cell()
    fixtures.write_cell(
        tmp_path / "demo" / config["cell_id"], config=config, metrics=rows, result=result
    )
    # The trainer's W&B summary mirrors result.json; here flattened, as W&B may show it.
    flat = {k: v for k, v in result.items() if k not in ("best", "final", "finetune")}
    flat |= {f"best/{k}": v for k, v in result["best"].items()}
    flat |= {f"final/{k}": v for k, v in result["final"].items()}
    flat |= {rf.finetune_key(k): v for k, v in result["finetune"].items()}
    c2, r2, _ = _cell(seed=1)
    c3, r3, _ = _cell(seed=2)
    c4, _, res4 = _cell(seed=3)
    c4["model"]["name"] = "ViT-Q/4"  # broken: unknown model
    api = FakeApi(
        [
            FakeRun(config, rows, flat | {"_runtime": 5}),
            FakeRun(c2, r2[:2], {SHAPES5: 0.3}, state="running"),
            FakeRun(c3, r3[:1], {}, state="crashed"),
            FakeRun(c4, [], res4),
            FakeRun(_cell(seed=4)[0], [], {}, group="other-grid"),
        ]
    )
    return tmp_path, api


def test_online_api_gives_the_run_folder_columns(folder_and_api):
    root, api = folder_and_api
    cells, problems = load_wandb(project="vitscale", group="demo", entity="me", api=api)
    assert api.calls == [("me/vitscale", {"group": "demo"})]
    assert len(problems) == 1 and "unknown ViT size" in problems[0].message
    assert problems[0].path.startswith("wandb:me/vitscale/")
    assert list(cells["status"]) == ["done", "running", "failed"]
    assert set(cells["source"]) == {"wandb"} and set(cells["grid"]) == {"demo"}
    ours, _ = load_runs(root)
    assert list(ours.columns) == list(cells.columns)
    _same_rows(cells.iloc[0], ours.iloc[0], ours.columns)
    assert cells.iloc[0][SHAPES5] > 1  # percent
    assert cells.iloc[1][["exaflops", SHAPES5]].isna().all()  # running: no result yet


def test_online_history(folder_and_api):
    root, api = folder_and_api
    history = load_wandb_history(project="vitscale", group="demo", api=api, metrics=[SHAPES5])
    ours, _ = load_history(root)
    first = history[history["cell_id"] == ours["cell_id"].iloc[0]]
    assert list(first["step"]) == list(ours["step"])
    assert list(first[SHAPES5]) == pytest.approx(list(ours[SHAPES5]))
    assert not any(c.startswith("_") for c in history.columns)


def test_offline_run_read_with_wandbs_reader(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    for key, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_DIR": str(tmp_path),
    }.items():
        monkeypatch.setenv(key, value)
    config, rows, result = _cell()
    folder = fixtures.write_cell(
        tmp_path / "runs" / "demo" / config["cell_id"], config=config, metrics=rows, result=result
    )
    run = wandb.init(
        project="vitscale",
        dir=tmp_path,
        id=config["cell_id"],
        group="demo",
        config=config,
        mode="offline",
        settings=wandb.Settings(x_disable_stats=True),
    )
    for row in rows:
        run.log(row, step=row[rf.STEP])
    run.summary.update(result)
    run.finish()

    cells, history, problems = load_wandb_offline(tmp_path / "wandb", history=True)
    assert not problems
    ours, _ = load_runs(folder)
    assert list(cells.columns) == list(ours.columns)
    assert cells.iloc[0]["source"] == "wandb" and cells.iloc[0]["path"].endswith(".wandb")
    _same_rows(cells.iloc[0], ours.iloc[0], ours.columns)

    ours_history, _ = load_history(folder)
    assert list(history.columns) == list(ours_history.columns)
    assert list(history["step"]) == list(ours_history["step"])
    assert list(history[SHAPES5]) == pytest.approx(list(ours_history[SHAPES5]))


def test_offline_missing_path():
    with pytest.raises(FileNotFoundError, match="no such W&B run"):
        load_wandb_offline("/no/such/wandb")
