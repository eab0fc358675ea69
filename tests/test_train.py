"""One cell end to end: the run folder, exact resume after a signal (with loader workers
signalled too, as SLURM does) or a SIGKILL mid-checkpoint, a non-finite loss, no host
sync between log steps, compilation and channels-last changing nothing, 2 CPU processes
against 1 (per-device MFU, the process group's timeout and its end), and the W&B mirror."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vitscale import record as rf
from vitscale.train import Preempted, checkpoint, step, train
from vitscale.train.timing import PHASES

from .helpers.configs import tiny_config
from .helpers.runs import ALONE, assert_same_run, rows_of, signal_at, weights


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("uninterrupted")
    result = train(tiny_config(), run)
    assert result.status == rf.STATUS_DONE and result.restarts == 0
    return run


def _steps_only(*, steps: int, log_every: int) -> dict:
    """A tiny cell of ``steps`` that logs every ``log_every``: no evaluation, no
    periodic checkpoint (what the step-loop tests time)."""
    return tiny_config(
        train={
            "steps": steps,
            "log_every": log_every,
            "eval_every": None,
            "checkpoint_every": None,
        },
        eval={"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
    )


def test_run_folder_contract(uninterrupted):
    config = rf.read_json(uninterrupted / rf.CONFIG)
    result = rf.read_json(uninterrupted / rf.RESULT)
    assert set(result) == set(rf.RunResult(status=rf.STATUS_DONE).to_json())  # every field
    assert config["cell_id"] == result["cell_id"] and config["data"]["num_examples"] == 512
    rows = list(rf.iter_metrics(uninterrupted / rf.METRICS))
    assert [r[rf.STEP] for r in rows] == list(range(1, 13))
    for row in rows:
        for key in (rf.EXAMPLES_SEEN, rf.TRAIN_LOSS, rf.LR, rf.EXAFLOPS):
            assert key in row
        assert row[rf.EXAMPLES_SEEN] == 16 * row[rf.STEP]
    # a rate from every row but the first step's own (the warm-up: no rate to give)
    assert [rf.THROUGHPUT in r for r in rows] == [False] + [True] * 11
    # Compute is cumulative, paper convention: 3 x 2 x MACs per example seen.
    from vitscale.flops import count

    per_example = count("ViT-Pico/4", 32, num_classes=256, head="pretrain").train_flops_per_example
    assert rows[-1][rf.EXAFLOPS] == pytest.approx(per_example * 12 * 16 / 1e18)
    assert result["pretrain_exaflops"] == pytest.approx(rows[-1][rf.EXAFLOPS])
    # Few-shot at steps 6 and 12: each seed and the mean; best kept over the run.
    key = rf.fewshot_key("synthetic-textures", 2)
    evals = [r for r in rows if key in r]
    assert [r[rf.STEP] for r in evals] == [6, 12]
    assert result["best"][key] == max(r[key] for r in evals)
    assert rows[-1][key] == pytest.approx((rows[-1][key + "/seed0"] + rows[-1][key + "/seed1"]) / 2)
    # Where the time went, by phase (benchmarks/overhead.py reads it).
    assert set(result["time_s"]) == set(PHASES) and result["time_s"]["step"] > 0
    assert sum(result["time_s"].values()) <= result["wall_clock_s"]
    # One complete checkpoint, loadable without unpickling code.
    (ckpt,) = (uninterrupted / rf.CHECKPOINTS).iterdir()
    state = torch.load(ckpt / checkpoint.STATE, weights_only=True)
    assert state["progress"]["step"] == 12


def test_the_console_says_each_logged_step(tmp_path, capsys):
    train(tiny_config(train={"steps": 4, "log_every": 2, "eval_every": 4}), tmp_path / "run")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split(";")[0] for line in lines] == ["step 2/4", "step 4/4"]
    assert " loss " in lines[0] and lines[0].endswith(" images/s")
    assert "; fewshot/synthetic-textures/1shot " in lines[-1] and lines[-1].endswith("%")


@pytest.mark.parametrize("interrupt_step", [3, 8])
def test_resume_after_signal_is_exact(tmp_path, monkeypatch, uninterrupted, interrupt_step):
    """SIGUSR1 at a step between periodic checkpoints: checkpoint there, stop, resume."""
    with monkeypatch.context() as patch:
        signal_at(patch, interrupt_step)
        with pytest.raises(Preempted) as stopped:
            train(tiny_config(), tmp_path)
    assert stopped.value.step == interrupt_step and stopped.value.signal_name == "SIGUSR1"
    assert not (tmp_path / rf.RESULT).exists()
    assert checkpoint.latest(tmp_path / rf.CHECKPOINTS).name.endswith(f"{interrupt_step:09d}")
    result = train(tiny_config(), tmp_path)
    assert result.status == rf.STATUS_DONE and result.restarts == 1
    assert_same_run(uninterrupted, tmp_path)


@pytest.mark.parametrize("eval_step", [6, 12])
def test_a_stop_during_an_evaluation_leaves_it_and_the_resume_is_exact(
    tmp_path, monkeypatch, uninterrupted, eval_step
):
    """SIGUSR1 while step N's few-shot probes run (the middle evaluation, then the last):
    the evaluation stops before its next dataset (upstream top-1), the run checkpoints at
    step N with that step's row unwritten, and the resumed run evaluates step N again and
    ends as the uninterrupted run, bit for bit."""
    from vitscale.evals import transfer

    calls, real = {"n": 0}, transfer.ridge_fewshot_accuracy
    first_of_eval = {6: 1, 12: 5}[eval_step]  # 2 shots x 2 seeds per evaluation

    def probe_then_signal(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == first_of_eval:
            os.kill(os.getpid(), signal.SIGUSR1)
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(transfer, "ridge_fewshot_accuracy", probe_then_signal)
        with pytest.raises(Preempted) as stopped:
            train(tiny_config(), tmp_path)
    assert stopped.value.step == eval_step
    assert calls["n"] == first_of_eval + 3  # this dataset's probes ran; nothing after them
    assert checkpoint.latest(tmp_path / rf.CHECKPOINTS).name.endswith(f"{eval_step:09d}")
    assert [r[rf.STEP] for r in rf.iter_metrics(tmp_path / rf.METRICS)][-1] == eval_step - 1
    result = train(tiny_config(), tmp_path)
    assert result.status == rf.STATUS_DONE and result.restarts == 1
    assert_same_run(uninterrupted, tmp_path)


def test_the_loaded_checkpoint_is_let_go_before_training_goes_on(tmp_path, monkeypatch):
    """On resume the checkpoint's model tensors are copied into the model and then
    dropped: none is alive at the first step after it (kept, they would hold 4 bytes per
    parameter, 12 with the optimiser's copies, in host memory on every rank all run)."""
    import gc
    import weakref

    with monkeypatch.context() as patch:
        signal_at(patch, 3)
        with pytest.raises(Preempted):
            train(tiny_config(), tmp_path)
    loaded, alive_at_first_step = [], []
    real_load, real_loss = checkpoint.load, step.loss_fn

    def load_and_watch(path, *, rank):
        state, rng = real_load(path, rank=rank)
        loaded.extend(weakref.ref(t) for t in state["model"].values())
        return state, rng

    def loss_after_looking(*args, **kwargs):
        if not alive_at_first_step:
            gc.collect()
            alive_at_first_step.append(sum(ref() is not None for ref in loaded))
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(checkpoint, "load", load_and_watch)
    monkeypatch.setattr(step, "loss_fn", loss_after_looking)
    assert train(tiny_config(), tmp_path).status == rf.STATUS_DONE
    assert loaded and alive_at_first_step == [0]


_DIE_DURING_SECOND_CHECKPOINT = """
import json, os, signal, sys
from vitscale.train import checkpoint, train

real, written = checkpoint._save, []

def save_then_die(obj, path):
    if path.name == checkpoint.STATE:
        written.append(path)
        if len(written) == 2:  # half of the second checkpoint's state, then SIGKILL
            path.write_bytes(b"partial")
            os.kill(os.getpid(), signal.SIGKILL)
    real(obj, path)

checkpoint._save = save_then_die
train(json.loads(sys.argv[1]), sys.argv[2])
"""


_SIGNAL_THE_STEP = """
import os, signal, subprocess, sys
from vitscale.cli import main
from vitscale.train import step

calls, real = [0], step.loss_fn

def loss_then_signal(*args, **kwargs):
    calls[0] += 1
    if calls[0] == int(sys.argv[3]):  # as SLURM does: every process of the job step, from
        # another process (torch's workers exit quietly on a SIGTERM from their parent)
        sig = getattr(signal, sys.argv[4])
        subprocess.run(["kill", "-s", sig.name[3:], "--", f"-{os.getpgid(0)}"], start_new_session=True)
    return real(*args, **kwargs)

step.loss_fn = loss_then_signal
sys.exit(main(["train", sys.argv[1], "--workdir", sys.argv[2]]))
"""


def _gpus(monkeypatch, *, visible: int, local_rank: int) -> tuple[torch.Generator, ...]:
    """A node's ``visible`` GPUs as torch.cuda's RNG functions see them (what
    ``--gpu-bind=none`` shows every process), this process on ``cuda:local_rank``: torch's
    own get/set_rng_state(_all), on one generator per GPU (CPU generators standing in)."""
    import torch.cuda.random as cuda_random

    generators = tuple(torch.Generator().manual_seed(1000 + i) for i in range(visible))
    monkeypatch.setattr(torch.cuda, "default_generators", generators)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: local_rank)
    monkeypatch.setattr(cuda_random, "_lazy_init", lambda: None)
    monkeypatch.setattr(cuda_random, "_lazy_call", lambda cb, **kwargs: cb())
    monkeypatch.setattr(cuda_random, "is_initialized", lambda: True)
    monkeypatch.setattr(cuda_random, "current_device", lambda: local_rank)
    monkeypatch.setattr(cuda_random, "device_count", lambda: visible)
    return generators


def test_each_process_resumes_its_own_gpus_rng_on_any_number_of_gpus(monkeypatch):
    """Each process saved every visible GPU's RNG and restored one per
    saved state, so a cell checkpointed on 1 x 8 GPUs and resumed on 2 x 4 indexed past
    the 4 GPUs it sees (IndexError, before the trainer could record it). Now each process
    saves its own GPU's and restores it into its own: 1 x 8 -> 2 x 4 -> 1 x 1."""
    with torch.random.fork_rng(devices=[]):
        saved, drawn = {}, {}
        for rank in range(8):  # 1 node x 8 GPUs: each process advanced its own GPU's RNG
            with monkeypatch.context() as patch:
                gpus = _gpus(patch, visible=8, local_rank=rank)
                torch.rand(rank + 1, generator=gpus[rank])
                drawn[rank] = gpus[rank].get_state()
                saved[rank] = checkpoint.rng_state()
        for rank in range(8):  # 2 nodes x 4 GPUs: rank r is cuda:(r % 4) on node r // 4
            with monkeypatch.context() as patch:
                gpus = _gpus(patch, visible=4, local_rank=rank % 4)
                untouched = [g.get_state() for g in gpus]
                checkpoint.set_rng_state(saved[rank])
                for i, g in enumerate(gpus):
                    expected = drawn[rank] if i == rank % 4 else untouched[i]
                    assert torch.equal(g.get_state(), expected), (rank, i)
                saved[rank] = checkpoint.rng_state()
        with monkeypatch.context() as patch:  # then 1 process on 1 GPU: rank 0's
            (gpu,) = _gpus(patch, visible=1, local_rank=0)
            checkpoint.set_rng_state(saved[0])
            assert torch.equal(gpu.get_state(), drawn[0])


def test_a_failure_while_resuming_is_recorded_like_any_other(tmp_path, monkeypatch):
    """A resume that raised outside the checkpoint's loading (restoring
    its RNG: the IndexError above) left no result.json, so every ``vitscale grid``
    submitted the cell again, for ever. Now it is the cell's recorded failure, which the
    grid retries as many times as the grid says, then reports."""
    config = tiny_config(train={"steps": 4, "checkpoint_every": 2, "eval_every": None})
    with monkeypatch.context() as patch:
        signal_at(patch, 3)
        with pytest.raises(Preempted):
            train(config, tmp_path)

    def resume_on_fewer_gpus(state):
        raise IndexError("tuple index out of range")

    monkeypatch.setattr(checkpoint, "set_rng_state", resume_on_fewer_gpus)
    with pytest.raises(checkpoint.CheckpointError, match="IndexError: tuple index out of range"):
        train(config, tmp_path)
    result = rf.read_json(tmp_path / rf.RESULT)
    assert result["status"] == rf.STATUS_FAILED
    assert "step_000000003" in result["error"] and "IndexError" in result["error"]


def test_loader_workers_survive_slurms_signal_and_the_run_resumes_exactly(tmp_path, uninterrupted):
    """SIGTERM (a preemption) to the trainer and its two loader workers at once, mid-step:
    the workers live on, the trainer checkpoints at the end of that step (not at the next
    log step) and exits to be requeued (75), no process of the group is left, and the
    resumed run (loader and evaluation workers) equals the uninterrupted one."""
    config = tiny_config(data={"num_workers": 2}, train={"log_every": 4})
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(config))
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGNAL_THE_STEP, str(path), str(run), "3", "SIGTERM"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a SLURM job step
    )
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 75, err[-3000:]
    assert "preempted by SIGTERM: checkpointed at step 3" in err
    with pytest.raises(ProcessLookupError):  # no worker outlived it
        os.killpg(proc.pid, 0)
    assert [p.name for p in (run / rf.CHECKPOINTS).iterdir()] == ["step_000000003"]
    result = train(config, run)
    assert result.status == rf.STATUS_DONE and result.restarts == 1
    wa, wb = weights(uninterrupted), weights(run)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    logged = {r[rf.STEP]: r for r in rows_of(uninterrupted)}
    ours = rows_of(run)
    assert [r[rf.STEP] for r in ours] == [4, 6, 8, 12]  # log steps and evaluations
    for row in ours:  # what the uninterrupted run logged at those steps
        assert row.items() <= logged[row[rf.STEP]].items()
    reference = rf.read_json(uninterrupted / rf.RESULT)
    assert result.best == reference["best"] and result.final.keys() <= reference["final"].keys()


def test_sigkill_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, uninterrupted):
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            _DIE_DURING_SECOND_CHECKPOINT,
            json.dumps(tiny_config()),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    ckpts = tmp_path / rf.CHECKPOINTS
    names = sorted(p.name for p in ckpts.iterdir())
    assert names == [".tmp-step_000000010", "step_000000005"]  # the torn one never published
    assert checkpoint.latest(ckpts).name == "step_000000005"
    result = train(tiny_config(), tmp_path)
    assert result.restarts == 1
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_000000012"]
    assert_same_run(uninterrupted, tmp_path)


def test_non_finite_loss_stops_and_marks_the_run_failed(tmp_path, monkeypatch):
    real, calls = step.loss_fn, {"n": 0}

    def nan_at_step_4(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] == 4 else loss

    monkeypatch.setattr(step, "loss_fn", nan_at_step_4)
    cfg = tiny_config(train={"checkpoint_every": 2})
    result = train(cfg, tmp_path)
    assert result.status == rf.STATUS_FAILED and result.failed_step == 4
    assert "non-finite loss at step 4" in result.error
    assert rf.read_json(tmp_path / rf.RESULT) == json.loads(json.dumps(result.to_json()))
    # The last good state (step 2) is kept; no update from the bad step was applied.
    assert checkpoint.latest(tmp_path / rf.CHECKPOINTS).name == "step_000000002"
    assert [r[rf.STEP] for r in rf.iter_metrics(tmp_path / rf.METRICS)] == [1, 2, 3]


_LAUNCHED = """
import atexit, json, os, sys
import torch
import torch.distributed as dist
from vitscale.cli import main
from vitscale.train import checkpoint, pretrain

seen = {}

def report():  # registered first, so it runs last: after the command has returned
    seen["group_alive_at_exit"] = dist.is_available() and dist.is_initialized()
    # gloo's threads (pt_gloo_runloop, gloo_tcp_loop) end with their group; alive into
    # the interpreter's finalisation they can abort the process as it exits
    seen["threads_at_exit"] = sorted(
        open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")
    )
    print("LAUNCHED " + json.dumps(seen), flush=True)

atexit.register(report)
real_save = checkpoint.save

def save(*args, **kwargs):  # rank 0 writes while the others wait: the group's timeout
    if dist.is_initialized():
        group = dist.distributed_c10d._get_default_group()
        seen["timeout_s"] = group._get_backend(torch.device("cpu")).options._timeout.total_seconds()
    return real_save(*args, **kwargs)

checkpoint.save = save
pretrain.peak_flops = lambda device, precision: 1e12  # a device with a known peak, so MFU is logged
sys.exit(main(["train", sys.argv[1], "--workdir", sys.argv[2]]))
"""


def test_two_cpu_processes_match_one(tmp_path):
    """torchrun --nproc_per_node 2 (gloo) and 1 process with the same global batch: the
    same examples per step, the same loss curve within float tolerance; MFU per device;
    the process group waits as long as a checkpoint write needs and is destroyed at exit,
    its threads with it (alive into the interpreter's finalisation, one aborted rank 1)."""
    from vitscale.flops import count
    from vitscale.train.runtime import process_group_timeout

    config = tiny_config(
        model={"dropout": 0.0},  # dropout masks depend on how the batch is split
        train={"precision": "fp32", "steps": 6, "eval_every": None, "checkpoint_every": None},
        eval={"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
    )
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(config))
    driver = tmp_path / "launched.py"
    driver.write_text(_LAUNCHED)
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    runs, seen = {}, {}
    for procs in (1, 2):
        run = tmp_path / f"p{procs}"
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={procs}",
        ]
        done = subprocess.run(
            [*launcher, str(driver), str(path), str(run)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs[procs] = run
        # torchrun interleaves the ranks' output: another rank's line may follow a report
        # on the same line, so each report is read as the JSON object that starts there
        decode = json.JSONDecoder().raw_decode
        seen[procs] = [decode(part)[0] for part in done.stdout.split("LAUNCHED ")[1:]]
        assert len(seen[procs]) == procs, done.stdout
    result = rf.read_json(runs[2] / rf.RESULT)
    assert result["num_processes"] == 2  # a silent single-process fallback fails here
    assert result["device_hours"] == pytest.approx(2 * result["wall_clock_s"] / 3600)
    one, two = rows_of(runs[1]), rows_of(runs[2])
    assert [r[rf.STEP] for r in one] == [r[rf.STEP] for r in two]
    for a, b in zip(one, two, strict=True):
        assert a[rf.TRAIN_LOSS] == pytest.approx(b[rf.TRAIN_LOSS], rel=1e-5)
        assert a[rf.EXAMPLES_SEEN] == b[rf.EXAMPLES_SEEN]
    # MFU is per device: the global rate over the processes, at one device's peak.
    flops = count("ViT-Pico/4", 32, num_classes=256, head="pretrain").flops
    for procs in (1, 2):
        for row in list(rf.iter_metrics(runs[procs] / rf.METRICS))[1:]:  # [0]: the warm-up
            expected = row[rf.THROUGHPUT] / procs * 3 * flops / 1e12
            assert row[rf.MFU] == pytest.approx(expected, rel=1e-6)
    # Both ranks wait on a group sized for a checkpoint write, and end it before exiting.
    timeout = process_group_timeout(count("ViT-Pico/4", 32).params).total_seconds()
    assert [s["timeout_s"] for s in seen[2]] == [timeout, timeout]
    assert not any(s["group_alive_at_exit"] for s in (*seen[1], *seen[2]))
    assert [[t for t in s["threads_at_exit"] if "gloo" in t] for s in seen[2]] == [[], []]


def test_no_host_sync_between_log_steps(tmp_path, monkeypatch):
    """The device never waits on the host between log steps: the trainer (or Accelerate on
    its behalf) reads nothing back (``item``, ``bool``, ``float``, ...) until the log step;
    the finite-loss check and the stop signal wait for it."""
    reads, per_step = [0], []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__"):
        real = getattr(torch.Tensor, name)

        def counted(self, *args, _real=real, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if os.path.join("vitscale", "train", "") in caller or (
                f"{os.sep}accelerate{os.sep}" in caller
            ):
                reads[0] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    real_loss = step.loss_fn

    def loss_at_step_start(*args, **kwargs):  # one micro-batch per step here
        per_step.append(reads[0])
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(step, "loss_fn", loss_at_step_start)
    config = _steps_only(steps=6, log_every=6)
    result = train(config, tmp_path)
    monkeypatch.undo()
    assert result.status == rf.STATUS_DONE and len(per_step) == 6
    assert len(set(per_step)) == 1, per_step  # steps 1-5 read nothing back
    assert reads[0] > per_step[-1]  # the log step does


def test_phase_times_include_the_time_the_host_waits_for_the_device(tmp_path, monkeypatch):
    """On a GPU a step only queues work, and the host waits for it where it first reads a
    result back (the finite-loss check at a sync step). A fake device here takes 0.3 s per
    step, the wait falling on whichever readback comes first: that time is the step's,
    and no phase may lose it (it used to fall between the phases, time_s['step'] counting
    only the launches)."""
    import time

    from vitscale.train import step as step_module

    busy_until = [0.0]
    real_loss = step_module.loss_fn

    def queued(*args, **kwargs):  # the device takes 0.3 s for each step it is given
        busy_until[0] = max(busy_until[0], time.perf_counter()) + 0.3
        return real_loss(*args, **kwargs)

    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        real = getattr(torch.Tensor, name)

        def waits(self, *args, _real=real, **kwargs):  # a readback waits for the device
            caller = sys._getframe(1).f_code.co_filename  # not torch's own of CPU scalars
            if os.path.join("vitscale", "") in caller or f"{os.sep}accelerate{os.sep}" in caller:
                time.sleep(max(busy_until[0] - time.perf_counter(), 0.0))
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, waits)
    monkeypatch.setattr(step_module, "loss_fn", queued)
    config = _steps_only(steps=8, log_every=4)
    result = train(config, tmp_path)
    monkeypatch.undo()
    assert result.status == rf.STATUS_DONE
    t = result.time_s
    assert t["step"] >= 8 * 0.3 - 0.05, t  # every step's device time, in its phase
    assert t["log"] < 0.3, t  # nothing left to wait for when the row is made


def test_the_stop_agreement_overlaps_the_next_step_between_sync_steps(tmp_path, monkeypatch):
    """Ranks agree on a stop signal, a round trip over the network (tens of ms at 64
    ranks, benchmarks/stop_check.py). A fake stop group here takes 0.1 s to agree and
    the host 0.1 s to queue a step: between sync steps the loop starts a sum about once a
    second and reads it when it starts the next, so the round trips overlap the steps
    instead of adding to each (it used to wait for one after every step: 12 x 0.1 s). A
    stop signal still stops every rank
    at the same step (tests/faults/test_ranks.py)."""
    import time

    import torch.distributed as dist

    from vitscale.train import run as run_module

    group, latency, waited = object(), 0.1, [0.0]

    class Work:
        def __init__(self) -> None:
            self.done_at = time.perf_counter() + latency

        def wait(self) -> bool:
            started = time.perf_counter()
            time.sleep(max(self.done_at - started, 0.0))
            waited[0] += time.perf_counter() - started
            return True

    def all_reduce(tensor, group=None, async_op=False):  # one rank: the sum is itself
        work = Work()
        return work if async_op else work.wait()

    real_loss = step.loss_fn

    def host_queues_a_step(*args, **kwargs):
        time.sleep(latency)
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(run_module, "agreement_group", lambda timeout=None: group)
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 1)
    monkeypatch.setattr(step, "loss_fn", host_queues_a_step)
    config = _steps_only(steps=12, log_every=12)
    result = train(config, tmp_path)
    monkeypatch.undo()
    assert result.status == rf.STATUS_DONE
    assert waited[0] < 3 * latency, waited  # the last step's (a sync step) and little else


def test_throughput_and_mfu_leave_out_evaluations_and_checkpoints(tmp_path, monkeypatch):
    """A row's images/s and MFU counted the time since the previous row,
    whose evaluation and checkpoint came after it was logged: a tiny CPU run logged 268 ->
    109 -> 289 img/s around an evaluation, and a GPU's MFU dipped after each one. Here each
    sync step evaluates and checkpoints for 3 s more; the time the rows' rates divide by
    adds up to the steps' own (``time_s``: data, step, log), not to that plus 6 s."""
    import time

    from vitscale.train import pretrain
    from vitscale.train.run import Run

    real_save = Run.save_checkpoint

    def slow_save(self):
        time.sleep(1.5)
        real_save(self)

    monkeypatch.setattr(Run, "evaluate", lambda self: time.sleep(1.5) or {})
    monkeypatch.setattr(Run, "save_checkpoint", slow_save)
    monkeypatch.setattr(pretrain, "peak_flops", lambda device, precision: 1e12)  # MFU is logged
    config = tiny_config(
        train={"steps": 6, "log_every": 2, "eval_every": 2, "checkpoint_every": 2},
        eval={"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
    )
    result = train(config, tmp_path)
    assert result.status == rf.STATUS_DONE
    rows = [r for r in rf.iter_metrics(tmp_path / rf.METRICS) if rf.THROUGHPUT in r]
    assert [r[rf.STEP] for r in rows] == [2, 4, 6]
    divided_by = sum(2 * 16 / r[rf.THROUGHPUT] for r in rows)  # seconds, rows 0-2, 2-4, 4-6
    t = result.time_s
    assert divided_by < t["data"] + t["step"] + t["log"] + 2.5, (
        divided_by,
        t,
    )  # one evaluation and checkpoint: 3 s
    assert t["eval"] >= 3 * 1.5 and t["checkpoint"] >= 3 * 1.5  # in their own buckets
    for row in rows:  # MFU from the same rate
        ratio = row[rf.THROUGHPUT] / rows[0][rf.THROUGHPUT]
        assert row[rf.MFU] == pytest.approx(rows[0][rf.MFU] * ratio)


def test_the_first_rows_rate_leaves_out_the_warm_up(tmp_path, monkeypatch):
    """A start's first step carries the loader's start, compilation, autotuning and NCCL's
    set-up; counted in the first row's images/s it read 2.3 against 57 after it. Here the
    first step of each start takes 5 s longer (a resume is a start too): the first row's
    rate, over the three steps after that one, must imply less time than that alone (the
    steps' own time varies with the machine's load: a second or two under the suite)."""
    import time

    from vitscale.train import pretrain

    real_step = pretrain._next_batch
    calls = [0]

    def slow_first(run, between):
        calls[0] += 1
        if calls[0] == 1:
            time.sleep(5.0)
        return real_step(run, between)

    monkeypatch.setattr(pretrain, "_next_batch", slow_first)
    config = _steps_only(steps=12, log_every=4)
    assert train(config, tmp_path).status == rf.STATUS_DONE
    rows = [r for r in rf.iter_metrics(tmp_path / rf.METRICS) if rf.THROUGHPUT in r]
    assert [r[rf.STEP] for r in rows] == [4, 8, 12]
    images = 3 * config["train"]["batch_size"]  # steps 2-4: the clock starts after step 1
    assert images / rows[0][rf.THROUGHPUT] < 4.0, rows


def test_compiled_channels_last_training_computes_the_same(tmp_path):
    """``train.compile`` and ``train.channels_last`` change speed, not results: a cell
    trained compiled (``aot_eager``: traced, no code generation) on NHWC tensors matches
    the eager NCHW run, and keeps its kernels channels-last. (A ViT: its patch embedding is
    a convolution; BiT and the hybrid under both backends: tests/test_models.py.)"""
    runs = {}
    for name, options in (
        ("eager", {}),
        ("compiled", {"compile": "aot_eager", "channels_last": True}),
    ):
        config = tiny_config(
            model={"dropout": 0.0},
            train={"precision": "fp32", "steps": 3, "eval_every": None, "checkpoint_every": None}
            | options,
            eval={"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
        )
        assert train(config, tmp_path / name).status == rf.STATUS_DONE
        runs[name] = tmp_path / name
    eager, compiled = rows_of(runs["eager"]), rows_of(runs["compiled"])
    for a, b in zip(eager, compiled, strict=True):  # losses after each update: the same steps
        assert b[rf.TRAIN_LOSS] == pytest.approx(a[rf.TRAIN_LOSS], rel=1e-4)
        assert b["train/grad_norm"] == pytest.approx(a["train/grad_norm"], rel=1e-3)
    compiled_weights = weights(runs["compiled"])
    assert any(
        w.ndim == 4 and w.is_contiguous(memory_format=torch.channels_last)
        for w in compiled_weights.values()
    )
    with pytest.raises(Exception, match=r"train.compile: unknown backend 'fast'; valid: true"):
        train(
            tiny_config(train={"compile": "fast", "steps": 1}, optim={"warmup_steps": 0}),
            tmp_path / "bad",
        )


def _rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_resuming_maps_the_checkpoint_instead_of_reading_a_copy_per_rank(tmp_path):
    """Every rank of a node loads the same state file; read into each process's memory that
    is eight copies of the weights and optimiser state at once on an 8-GPU node. Mapped,
    the pages are the page cache's until a rank writes to them."""
    big = {"model": {"w": torch.randn(32, 1024, 1024)}}  # 128 MiB
    path = checkpoint.save(tmp_path, step=1, state=big, accelerator=ALONE)
    del big
    before = _rss_bytes()
    state, _ = checkpoint.load(path, rank=0)
    grew = _rss_bytes() - before
    assert grew < 16 * 2**20, f"loading the state read {grew / 2**20:.0f} MiB into this process"
    assert state["model"]["w"].shape == (32, 1024, 1024)
    assert torch.isfinite(state["model"]["w"][-1]).all()  # the data is there when touched
