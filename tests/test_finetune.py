"""Fine-tuning as a GPU cluster runs it: no model or memory left behind after each of many
fine-tunes, gradient accumulation that changes nothing but memory, and a preemption
signal during fine-tuning that checkpoints it, requeues and resumes it exactly."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest
import torch

from vitscale import record as rf
from vitscale.config import resolve
from vitscale.data import build_dataset
from vitscale.models.vit import VisionTransformer
from vitscale.train import checkpoint, finetune, train
from vitscale.train import finetune_progress as fp
from vitscale.train.runtime import make_accelerator

from .helpers.configs import tiny_config

DATASET = "synthetic-textures"


def _cfg(**finetune_keys) -> dict:
    return tiny_config(
        train={"steps": 2, "eval_every": None, "checkpoint_every": None},
        optim={"warmup_steps": 1},
        eval={
            "fewshot": {"datasets": []},
            "upstream": {"examples": 0},
            "finetune": {
                "datasets": [DATASET],
                "steps": 2,
                "batch_size": 16,
                "lrs": [0.01, 0.03],
                "test_examples": 32,
            }
            | finetune_keys,
        },
    )


def _live_models_and_tensor_bytes() -> tuple[int, int]:
    """Models alive in the process, and the bytes of every tensor storage alive."""
    gc.collect()
    models, storages = 0, {}
    for o in gc.get_objects():
        kind = type(o)
        models += kind is VisionTransformer
        if kind in (torch.Tensor, torch.nn.Parameter):
            storage = o.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return models, sum(storages.values())


class _Recorder(finetune.NoProgress):
    """Keeps the fine-tuned model's state after its last step."""

    def __init__(self, steps: int) -> None:
        self.steps, self.final = steps, None

    def maybe_stop(self, key, step, state) -> None:
        if step == self.steps:
            self.final = {k: v.clone() for k, v in state()["model"].items()}


def test_five_finetunes_hold_no_more_than_one():
    """Each fine-tune goes through ``accelerator.prepare``; afterwards neither the
    Accelerator nor the process may keep its model, optimiser or tensors."""
    cfg = resolve(_cfg())
    accelerator, _ = make_accelerator(precision="fp32")
    from vitscale.models import create_model

    pretrained = create_model("ViT-Pico/4", num_classes=256, image_size=32)
    train_set = build_dataset(DATASET, "minitrain", image_size=32)
    test_set = build_dataset(DATASET, "val", image_size=32)
    held = []
    for lr in (0.01, 0.02, 0.03, 0.04, 0.05):
        finetune.train_and_score(
            pretrained,
            cfg=cfg,
            train_set=train_set,
            eval_set=test_set,
            lr=lr,
            steps=1,
            accelerator=accelerator,
            image_size=32,
        )
        held.append(
            (
                len(accelerator._models),
                len(accelerator._optimizers),
                *_live_models_and_tensor_bytes(),
            )
        )
    first = held[0]
    assert first[:2] == (0, 0), held  # released, not kept by the Accelerator
    assert first[2] == 1, held  # only the pre-trained model is alive
    for later in held[1:]:
        assert later[:3] == first[:3] and later[3] <= first[3], held


def test_finetune_micro_batches_accumulate_to_the_same_update():
    """Fine-tuning's batch in micro-batches (memory) gives the update of the whole batch."""
    accelerator, _ = make_accelerator(precision="fp32")
    from vitscale.models import create_model

    pretrained = create_model("ViT-Pico/4", num_classes=256, image_size=32)
    train_set = build_dataset(DATASET, "minitrain", image_size=32)
    test_set = build_dataset(DATASET, "val", image_size=32)
    finals, scores = [], []
    for micro in (None, 4):
        cfg = resolve(_cfg(micro_batch_size=micro), num_processes=1)
        recorder = _Recorder(steps=3)
        scores.append(
            finetune.train_and_score(
                pretrained,
                cfg=cfg,
                train_set=train_set,
                eval_set=test_set,
                lr=0.03,
                steps=3,
                accelerator=accelerator,
                image_size=32,
                progress=recorder,
            )
        )
        finals.append(recorder.final)
    whole, accumulated = finals
    for key in whole:
        torch.testing.assert_close(accumulated[key], whole[key], rtol=1e-4, atol=1e-6)
    assert scores[0] == scores[1]
    with pytest.raises(ValueError, match=r"eval.finetune.micro_batch_size 5 must divide"):
        resolve(_cfg(micro_batch_size=5), num_processes=1)


_SIGNAL_DURING_SECOND_FINETUNE = """
import json, os, subprocess, sys
from vitscale.cli import main
from vitscale.train import finetune, step

made, losses = [0], [0]
real_fresh, real_loss = finetune._fresh_model, step.loss_fn

def fresh(*args, **kwargs):
    made[0] += 1
    return real_fresh(*args, **kwargs)

def loss(*args, **kwargs):
    if made[0] == 2:  # the second fine-tune: SLURM signals every process of the step
        losses[0] += 1
        if losses[0] == 1:  # from another process, as slurmstepd sends it
            subprocess.run(["kill", "-s", "USR1", "--", f"-{os.getpgid(0)}"], start_new_session=True)
    return real_loss(*args, **kwargs)

finetune._fresh_model = fresh
step.loss_fn = loss
sys.exit(main(["train", sys.argv[1], "--workdir", sys.argv[2]]))
"""


@pytest.mark.slow
def test_a_signal_during_finetuning_checkpoints_and_the_run_resumes_it(tmp_path, monkeypatch):
    """SIGUSR1 to the whole process group (trainer and loader workers) during step 1 of 2 of
    the second of three fine-tunes: the first one's score is kept, the second is checkpointed
    at its next step, the process exits to be requeued (75); the rerun finishes the
    second from its checkpoint and runs the third, and every score equals an
    uninterrupted run's."""
    reference = train(_cfg(), tmp_path / "reference")
    assert reference.status == rf.STATUS_DONE

    config = tmp_path / "cell.json"
    config.write_text(json.dumps(_cfg() | {"data": _cfg()["data"] | {"num_workers": 2}}))
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGNAL_DURING_SECOND_FINETUNE, str(config), str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a SLURM job step has
    )
    _, err = proc.communicate(timeout=300)
    stopped = subprocess.CompletedProcess(proc.args, proc.returncode, "", err)
    assert stopped.returncode == 75, stopped.stderr[-3000:]
    assert "checkpointed fine-tuning synthetic-textures/select/lr=0.03 at step 1" in stopped.stderr
    assert not (run / rf.RESULT).exists()
    kept = fp.read(run)
    assert list(kept["results"]) == ["synthetic-textures/select/lr=0.01"]
    saved = checkpoint.latest(run / rf.CHECKPOINTS / fp.FOLDER)
    assert saved is not None and saved.name == "step_000000001"

    made = []
    real = finetune._fresh_model
    monkeypatch.setattr(finetune, "_fresh_model", lambda *a, **k: made.append(1) or real(*a, **k))
    result = train(_cfg(), run)
    assert result.status == rf.STATUS_DONE and result.restarts == 1
    assert len(made) == 2  # the stopped fine-tune and the last one; the first was kept
    assert result.finetune == reference.finetune
    timing = {rf.THROUGHPUT}
    assert {k: v for k, v in result.final.items() if k not in timing} == {
        k: v for k, v in reference.final.items() if k not in timing
    }
    assert fp.read(run)["results"] == fp.read(tmp_path / "reference")["results"]
    assert checkpoint.latest(run / rf.CHECKPOINTS / fp.FOLDER) is None  # done: removed
    assert result.wall_clock_s >= result.time_s["finetune"] > 0
    # No loader worker outlived the stopped run: its process group is empty.
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)


def test_fine_tuning_and_evaluation_queue_their_copies_without_waiting(monkeypatch):
    """A blocking copy to the GPU waits for everything queued before it: step i + 1 of a
    fine-tune was not queued until step i ended, and an evaluation waited per batch.
    Every copy to the device the fine-tune and the feature pass make is recorded."""
    from vitscale.models import create_model

    copies = []
    real_to = torch.Tensor.to

    def recorded(self, *args, **kwargs):
        caller = sys._getframe(1).f_code.co_filename
        if caller.endswith((f"train{os.sep}finetune.py", f"evals{os.sep}features.py")):
            copies.append((os.path.basename(caller), kwargs.get("non_blocking", False)))
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", recorded)
    accelerator, _ = make_accelerator(precision="fp32")
    finetune.train_and_score(
        create_model("ViT-Pico/4", num_classes=256, image_size=32),
        cfg=resolve(_cfg()),
        train_set=build_dataset(DATASET, "minitrain", image_size=32),
        eval_set=build_dataset(DATASET, "val", image_size=32),
        lr=0.01,
        steps=2,
        accelerator=accelerator,
        image_size=32,
    )
    monkeypatch.undo()
    assert {name for name, _ in copies} == {"finetune.py", "features.py"}, copies
    assert all(non_blocking for _, non_blocking in copies), copies
