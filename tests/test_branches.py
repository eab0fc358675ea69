"""Cells that share their stable phase (docs/schedules.md): a branch started from its
trunk's checkpoint at its cooldown start is the same cell as one run alone, bit for bit,
through a preemption of the trunk too."""

from __future__ import annotations

import pytest

from vitscale import record as rf
from vitscale.train import Preempted, checkpoint, train

from .helpers.configs import tiny_config
from .helpers.runs import assert_same_run, signal_at

# Cooldown 4 steps: the 16-step trunk's starts at 12, the 10-step cell's at 6 (not a
# periodic checkpoint: the trunk keeps it because it is told to).
WSD = {"schedule": "wsd", "cooldown": 4, "cooldown_shape": "1-sqrt", "warmup_steps": 2}


def _cell(steps: int, **branch) -> dict:
    return tiny_config(
        train={"steps": steps, "checkpoint_every": 5, "eval_every": 5}, optim=WSD, branch=branch
    )


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    run = tmp_path_factory.mktemp("alone")
    assert train(_cell(10), run).done
    return run


@pytest.mark.parametrize("stop_trunk_at", [None, 3])
def test_a_branch_is_the_cell_run_alone(tmp_path, monkeypatch, alone, stop_trunk_at):
    trunk, branch = tmp_path / "trunk", tmp_path / "branch"
    if stop_trunk_at:  # a real SIGUSR1 before the branch point: the trunk resumes
        with monkeypatch.context() as patch:
            signal_at(patch, stop_trunk_at)
            with pytest.raises(Preempted):
                train(_cell(16, keep=[6]), trunk)
    done = train(_cell(16, keep=[6]), trunk)
    assert done.done and done.branched_from is None
    assert done.restarts == (1 if stop_trunk_at else 0)
    steps = [rf.checkpoint_step(p) for p in checkpoint.complete(trunk / rf.CHECKPOINTS)]
    assert steps == [6, 16]  # the branch point is kept, the rest pruned as usual

    result = train(_cell(10, trunk="trunk", step=6), branch)
    assert result.done and result.restarts == 0
    assert result.branched_from["trunk"] == "trunk" and result.branched_from["step"] == 6
    assert result.cell_id == rf.read_json(alone / rf.RESULT)["cell_id"]  # the same cell
    assert_same_run(alone, branch)  # weights, every metrics row, best, steps, compute


def test_a_branch_whose_trunk_has_no_checkpoint_there_runs_alone(tmp_path, alone, capsys):
    result = train(_cell(10, trunk="trunk", step=6), tmp_path / "branch")
    assert result.done and result.branched_from is None
    assert "has no checkpoint at step 6 to branch from: this cell runs alone" in (
        capsys.readouterr().out
    )
    assert_same_run(alone, tmp_path / "branch")
