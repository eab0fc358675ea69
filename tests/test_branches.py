"""Cells that share their stable phase (docs/schedules.md): a branch started from its
trunk's checkpoint at its cooldown start is the same cell as one run alone, bit for bit,
through a preemption of the trunk too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vitscale import record as rf
from vitscale.train import Preempted, checkpoint, train

from .helpers.configs import AWAY, tiny_config
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


# --------------------------------------------------------------------------- the grid


def _grid(tmp_path) -> Path:
    import yaml

    base = tiny_config(train={"log_every": 2, "checkpoint_every": 5, "eval_every": 4})
    base["optim"] = {"schedule": "wsd", "cooldown": 0.25, "warmup_steps": 2}
    grid = {"name": "wsd4", "base": base, "axes": {"train.steps": [4, 8, 12, 16]}}
    path = tmp_path / "wsd4.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def test_a_grid_of_four_durations_runs_one_trunk_and_spends_trunk_plus_cooldowns(tmp_path, capsys):
    from vitscale.cli import main
    from vitscale.flops import count

    path, runs = _grid(tmp_path), tmp_path / "runs"
    assert main(["grid", str(path), "--dry-run", "--json", "--runs", str(runs)]) == 0
    planned = json.loads(capsys.readouterr().out)["total"]
    args = ["grid", str(path), "--executor", "local", "--workers", "2", "--runs", str(runs)]
    assert main(args) == 0  # a second worker waits for the trunk, then takes a branch
    results = [rf.RunResult.read(d) for d in (runs / "wsd4").iterdir() if (d / rf.CONFIG).is_file()]
    assert len(results) == 4 and all(r.done and r.restarts == 0 for r in results)
    (trunk,) = [r for r in results if r.branched_from is None]  # one run from step 0
    assert trunk.steps == 16
    branched = {r.steps: r.branched_from for r in results if r.branched_from}
    assert {s: b["step"] for s, b in branched.items()} == {4: 3, 8: 6, 12: 9}  # 25% cooldowns
    assert {b["trunk"] for b in branched.values()} == {trunk.cell_id}
    per_step = (
        16 * count("ViT-Pico/4", 32, num_classes=256, head="pretrain").train_flops_per_example
    )
    cooldowns = (4 - 3) + (8 - 6) + (12 - 9)
    spent = sum(r.spent_exaflops for r in results)
    assert spent == pytest.approx((16 + cooldowns) * per_step / 1e18)
    assert sum(r.pretrain_exaflops for r in results) == pytest.approx(40 * per_step / 1e18)
    # The dry-run said so before (its FLOPs count a head of the default width: ~0.3% off).
    assert planned["saving"] == pytest.approx(1 - (16 + cooldowns) / 40)
    assert planned["spent_exaflops"] == pytest.approx(spent, rel=0.01)
    assert (planned["trunks"], planned["branches"]) == (1, 3)
    assert main(["status", str(runs)]) == 0
    out = capsys.readouterr().out
    assert f"branch of {trunk.cell_id} at step 3" in out
    assert "compute spent (trunks once + cooldowns) of what the cells embody: wsd4 " in out
    assert "exaFLOPs (45% saved); ViT " in out  # per grid, then per family


# --------------------------------------------------------------------------- SLURM


@pytest.mark.parametrize("trunk_queued_before", [False, True])
def test_slurm_submits_branches_after_their_trunks_job(tmp_path, monkeypatch, trunk_queued_before):
    """What sbatch is given, without a cluster: the trunk's array first, then the branches'
    with --dependency=afterok on the trunk's job (an earlier submission's, if still queued)
    and --kill-on-invalid-dep (a trunk that fails cancels them; the next submission reruns)."""
    from submitit.slurm.slurm import _make_sbatch_string

    from vitscale.grid import slurm
    from vitscale.grid.profile import load_profile
    from vitscale.grid.spec import load_grid

    grid = load_grid(_grid(tmp_path))
    runs = tmp_path / "runs"
    (trunk,) = [c for c in grid.cells if c.config.branch.keep]
    if trunk_queued_before:  # an earlier submission's trunk, still pending
        (runs / "wsd4" / trunk.id).mkdir(parents=True)
        rf.write_json_atomic(runs / "wsd4" / trunk.id / "job.json", {"job_id": "41_0"})
    monkeypatch.setattr(slurm, "is_queued", lambda d: trunk_queued_before and d.name == trunk.id)
    calls = []

    def submit_cells(planned, shape, profile, *, folder, job_name, after=None):
        params = slurm.executor_parameters(shape, profile, job_name=job_name, after=after)
        script = _make_sbatch_string(command="python -m x", folder="/logs/%j", **params)
        calls.append(([p.cell.id for p in planned], script))
        return [f"{50 + len(calls)}_{i}" for i in range(len(planned))]

    monkeypatch.setattr(slurm, "submit_cells", submit_cells)
    profile = load_profile(Path(__file__).resolve().parents[1] / "slurm/profiles/local.yaml")
    assert slurm.submit(grid, runs_root=runs, profile=profile) == 0
    branches = sorted(c.id for c in grid.cells if c.config.branch.trunk)
    if trunk_queued_before:
        ((ids, script),) = calls
        assert sorted(ids) == branches and "#SBATCH --dependency=afterok:41_0\n" in script
    else:
        (first, after), (then, script) = calls
        assert first == [trunk.id] and "--dependency" not in after
        assert sorted(then) == branches and "#SBATCH --dependency=afterok:51_0\n" in script
    assert "#SBATCH --kill-on-invalid-dep=yes\n" in script


def test_the_fig5_grid_with_wsd_says_what_its_trunks_save(capsys):
    from vitscale.cli import main

    experiments = Path(__file__).resolve().parents[1] / "experiments"
    assert main(["grid", str(experiments / "fig5_compute.yaml"), "--dry-run", "--json", *AWAY]) == 0
    paper = json.loads(capsys.readouterr().out)
    assert (
        main(["grid", str(experiments / "fig5_compute_wsd.yaml"), "--dry-run", "--json", *AWAY])
        == 0
    )
    wsd = json.loads(capsys.readouterr().out)
    total = wsd["total"]
    assert len(wsd["cells"]) == len(paper["cells"]) == 18
    assert total["exaflops"] == pytest.approx(paper["total"]["exaflops"])  # what they embody
    # ViT-L/16, BiT-R152x2 and R50x1+ViT-L/16 at 7 epochs branch off their 14-epoch runs
    # at 80% of 7 epochs: each spends only its cooldown.
    assert (total["trunks"], total["branches"]) == (3, 3)
    shared = sum(c["exaflops"] * 0.8 for c in wsd["cells"] if c["branch"]["trunk"])
    assert total["spent_exaflops"] == pytest.approx(total["exaflops"] - shared, rel=1e-4)
    assert set(total["by_family"]) == {"ViT", "ResNet", "Hybrid"}
