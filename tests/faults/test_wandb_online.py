"""W&B online, and its server goes away mid-run (tests/helpers/wandb_server.py: a local
server that answers as W&B does, then closes its socket):

    training goes on at its speed to the end; metrics.jsonl keeps every row; the run's
    end waits at most the finish timeout for the upload, then says in one warning where
    W&B's record of the run is kept; exit 0, no process left behind
    -> once the server answers again, `vitscale wandb sync` uploads every step
"""

from __future__ import annotations

import statistics

import pytest
import yaml

from vitscale import record as rf
from vitscale.config import cell_id, resolve
from vitscale.record.wandb import FINISH_TIMEOUT_ENV, UPLOAD_UNFINISHED

from ..helpers.faults import Foreground, cell_config, cli, last_logged, no_traceback, wait_for
from ..helpers.wandb_server import FakeWandb

pytestmark = pytest.mark.slow  # a trainer and wandb's service in processes of their own

STEPS = 120  # a few seconds of training: room to stop the server in the middle
FINISH_TIMEOUT_S = 5


def test_the_server_going_away_mid_run_loses_nothing_and_sync_uploads_it_later(tmp_path):
    server = FakeWandb().start()
    config = cell_config(0)
    config["train"] |= {"steps": STEPS, "checkpoint_every": 40}
    config["wandb"] = {"mode": "online", "entity": "e", "project": "p"}
    path = tmp_path / "cell.yaml"
    path.write_text(yaml.safe_dump(config))
    run_id = cell_id(resolve(config))
    run = tmp_path / run_id
    env = server.env() | {FINISH_TIMEOUT_ENV: str(FINISH_TIMEOUT_S)}
    try:
        job = Foreground.start(tmp_path / "logs", "train", str(path), "--workdir", str(run), **env)
        wait_for(lambda: (run / rf.METRICS).is_file() and (last_logged(run) or 0) >= 20)
        assert "UpsertBucket" in server.operations  # the run began online
        server.stop()
        stopped_at = last_logged(run)
        code, output = job.finish(timeout=180)
        assert code == 0, output[-3000:]
        assert job.left_behind() == [], output[-3000:]
    finally:
        server.stop()
    no_traceback(output)
    assert stopped_at < STEPS - 20  # the server went away mid-run

    rows = list(rf.iter_metrics(run / rf.METRICS))
    assert [r[rf.STEP] for r in rows] == list(range(1, STEPS + 1))
    assert rf.read_json(run / rf.RESULT)["status"] == rf.STATUS_DONE
    # The same speed without a server (within what the neighbours' load moves it): W&B's
    # uploads never wait in the training loop, where each row would cost a retry's wait.
    before = statistics.median(r[rf.THROUGHPUT] for r in rows[5:stopped_at])
    after = statistics.median(r[rf.THROUGHPUT] for r in rows[stopped_at + 5 :])
    assert after > 0.25 * before, (before, after)
    (local,) = (run / "wandb").glob(f"run-*-{run_id}")
    (warning,) = [line for line in output.splitlines() if "W&B could not finish" in line]
    assert (
        f"within {FINISH_TIMEOUT_S} s (its server does not answer): metrics.jsonl keeps every "
        f"row, W&B's record of the run is kept in {local}; `vitscale wandb sync` uploads it "
        "once the server answers"
    ) in warning
    assert (local / UPLOAD_UNFINISHED).exists()

    server.history.clear()
    server.start()  # it answers again: everything is uploaded from the kept record
    try:
        synced = cli("wandb", "sync", str(run), **server.env())
    finally:
        server.stop()
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert server.steps(run_id) == set(range(1, STEPS + 1))
    assert {"config.yaml", "wandb-summary.json"} <= server.uploads[run_id]
    again = cli("wandb", "sync", str(run), **server.env())  # nothing left to upload
    assert again.returncode == 0 and "synced already" in again.stdout, again.stdout
