"""W&B's service process (``wandb-core``, which the trainer's ``wandb.init`` starts)
killed mid-run, as the out-of-memory killer or a stray ``kill`` would: W&B is switched
off for the run, said in one warning, and training goes on to the end, equal to a run
without W&B; nothing is left behind and nothing prints a traceback at exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest
import yaml

from vitscale import runfolder as rf

from .conftest import (
    TOKEN,
    assert_same_cell,
    cell_config,
    children,
    env,
    last_logged,
    left_behind,
    no_traceback,
    wait_for,
)

pytestmark = pytest.mark.slow  # each trains a cell in a process of its own


def _wandb_core(pid: int) -> int | None:
    for child in children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as fh:
                if fh.read().split(b"\0")[0].endswith(b"wandb-core"):
                    return child
        except OSError:
            continue
    return None


def test_wandb_service_killed_mid_run_training_goes_on(tmp_path, reference):
    config = tmp_path / "cell.yaml"
    config.write_text(yaml.safe_dump(cell_config(0) | {"wandb": {"mode": "offline"}}))
    run = tmp_path / "run"
    token = uuid.uuid4().hex
    train = subprocess.Popen(
        [sys.executable, "-m", "vitscale.cli", "train", str(config), "--workdir", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(**{TOKEN: token}),
        start_new_session=True,
    )
    service = wait_for(lambda: _wandb_core(train.pid), what="wandb-core to start")
    wait_for(
        lambda: (run / rf.METRICS).is_file() and (last_logged(run) or 0) >= 2,
        what="training to log",
    )
    os.kill(service, signal.SIGKILL)
    killed_at = last_logged(run)
    out, err = train.communicate(timeout=300)

    assert train.returncode == 0, err[-3000:]
    assert killed_at < rf.read_json(run / rf.RESULT)["steps"]  # it was mid-run
    assert "W&B disabled for this run after an error: " in err
    assert "training goes on, metrics.jsonl keeps every row" in err
    no_traceback(out, err)
    assert left_behind(token) == []
    assert_same_cell(run, reference.cells[0])
