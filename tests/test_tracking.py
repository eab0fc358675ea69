"""The W&B mirror, read back with wandb's own reader (`wandb leet inspect --json`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vitscale import record as rf
from vitscale.record.wandb import wandb_mode
from vitscale.train import train

from .helpers.configs import tiny_config

FAKE_KEY = "local-0123456789abcdef0123456789abcdef01234567"
WANDB = str(Path(sys.executable).with_name("wandb"))


def _records(run_dir: Path) -> list[dict]:
    done = subprocess.run(
        [WANDB, "leet", "inspect", "--json", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("wandb_run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_API_KEY", FAKE_KEY)  # a key, but offline: nothing leaves the machine
        mp.delenv("WANDB_DIR", raising=False)
        mp.setenv("WANDB_SILENT", "true")
        cfg = tiny_config(wandb={"mode": "offline", "tags": ["test"]}, grid="wandb_test")
        result = train(cfg, run)
    assert result.status == rf.STATUS_DONE
    return run, result


def test_offline_run_holds_the_same_history_as_metrics_jsonl(offline_run):
    run, result = offline_run
    (wandb_dir,) = (run / "wandb").glob("offline-run-*")  # inside the run folder
    records = _records(wandb_dir)
    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    rows = list(rf.iter_metrics(run / rf.METRICS))
    assert len(history) == len(rows)
    for logged, row in zip(history, rows, strict=True):
        assert logged["_step"] == row[rf.STEP]
        for key, value in row.items():
            if key != rf.STEP:
                assert logged[key] == pytest.approx(value), key
    (header,) = [r["run"] for r in records if r["type"] == "run"]
    assert header["run_id"] == result.cell_id and header["run_group"] == "wandb_test"
    assert {"family:ViT", "size:Pico", "patch:4", "subset:512", "test"} <= set(header["tags"])
    config = header["config"]["update"]
    assert config["model"]["name"] == "ViT-Pico/4" and config["cell_id"] == result.cell_id
    # examples_seen and compute/exaflops are declared as step metrics for the x-axis.
    metrics = {r["metric"].get("name"): r["metric"] for r in records if r["type"] == "metric"}
    assert {rf.EXAMPLES_SEEN, rf.EXAFLOPS} <= set(metrics)
    summary = {}
    for r in records:
        if r["type"] == "summary":
            summary.update(r["summary"].get("update", {}))
    key = rf.fewshot_key("synthetic-textures", 2)
    assert summary[f"best/{key}"] == pytest.approx(result.best[key])
    assert summary["status"] == rf.STATUS_DONE
    # The W&B summary reads back as the run's result.json, field for field.
    assert rf.RunResult.from_summary(summary) == rf.RunResult.read(run)


def test_api_key_is_never_written(offline_run):
    run, _ = offline_run
    for path in run.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), path


def test_a_wandb_failure_never_stops_training(tmp_path, monkeypatch):
    import wandb

    def broken_init(*args, **kwargs):
        raise RuntimeError("wandb backend unavailable")

    monkeypatch.setattr(wandb, "init", broken_init)
    with pytest.warns(UserWarning, match="W&B disabled for this run"):
        result = train(tiny_config(wandb={"mode": "offline"}), tmp_path)
    assert result.status == rf.STATUS_DONE
    assert len(list(rf.iter_metrics(tmp_path / rf.METRICS))) == 12


def test_mode_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert wandb_mode("auto") == "offline"  # no key: offline, sync later
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    assert wandb_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode("auto") == "disabled"
    assert wandb_mode("offline") == "offline"  # an explicit config wins
