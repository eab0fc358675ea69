"""Pre-train one cell, evaluate its transfer, write its run folder. Read top to bottom.

    train(config, workdir) -> result dict (also written to <workdir>/result.json)

1. Resolve and validate the config; build the Accelerator (devices, processes, precision).
2. Data: the pre-training subset, its exact resumable batch stream, the transfer sets.
3. Model, optimiser, schedule; compute per example from :mod:`vitscale.flops`.
4. Resume from the latest complete checkpoint if the run folder has one.
5. The loop: micro-batches with gradient accumulation fill the global batch; clip; step;
   log; evaluate; checkpoint periodically and on SIGUSR1/SIGTERM; stop on a non-finite
   loss and record the step.
6. Final evaluation and fine-tuning; ``result.json`` written last, atomically.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .. import flops
from .. import runfolder as rf
from ..config import Config, ConfigError, cell_id, resolve, to_steps
from ..data import build_dataset, build_loader
from ..evals.transfer import TransferEvaluator
from ..models import create_model
from ..published import published_compute
from ..tracking import Tracker
from . import checkpoint
from .optim import build_adamw, build_schedule
from .runtime import make_accelerator, peak_flops
from .signals import Preempted, PreemptionFlag
from .timing import Stopwatch

__all__ = ["train", "Preempted", "TrainingFailed"]


class TrainingFailed(RuntimeError):
    """The run stopped and was marked failed in result.json (e.g. a non-finite loss)."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


def loss_fn(
    logits: torch.Tensor, targets: torch.Tensor, *, kind: str, label_smoothing: float
) -> torch.Tensor:
    """Softmax cross-entropy, or sigmoid cross-entropy summed over classes (multi-label)."""
    logits = logits.float()
    if kind == "softmax":
        return F.cross_entropy(logits, targets, label_smoothing=label_smoothing)
    if targets.ndim == 1:
        targets = F.one_hot(targets, logits.shape[-1])
    targets = targets.float()
    if label_smoothing:
        targets = targets * (1 - label_smoothing) + label_smoothing / logits.shape[-1]
    return F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(-1).mean()


def _micro_batches(images: torch.Tensor, targets: torch.Tensor, size: int):
    for start in range(0, len(images), size):
        yield images[start : start + size], targets[start : start + size]


def train(config: dict | Config, workdir: str | Path) -> dict[str, Any]:
    run_dir = Path(workdir)
    started = time.time()
    setup_started = time.perf_counter()

    # 1. Config and launch ------------------------------------------------------------
    cfg = config if isinstance(config, Config) else resolve(config)
    accelerator, precision = make_accelerator(
        precision=cfg.train.precision, seed_everything=cfg.seed
    )
    cfg = resolve(cfg, num_processes=accelerator.num_processes)
    world, rank, is_main = (
        accelerator.num_processes,
        accelerator.process_index,
        accelerator.is_main_process,
    )
    per_process = cfg.train.batch_size // world
    micro = cfg.train.micro_batch_size or per_process
    accumulation = per_process // micro

    # 2. Data -------------------------------------------------------------------------
    d = cfg.data
    train_set = build_dataset(
        d.dataset,
        "train",
        root=d.root,
        image_size=d.image_size,
        subset=d.subset,
        seed=cfg.seed,
        download=d.download,
        class_balanced=d.class_balanced,
        shuffle_shards=d.shuffle_shards,
        skip_bad_samples=d.skip_bad_samples,
    )
    num_examples = len(train_set)
    total_steps = to_steps(
        steps=cfg.train.steps,
        epochs=cfg.train.epochs,
        examples=cfg.train.examples,
        batch_size=cfg.train.batch_size,
        num_examples=num_examples,
    )
    loss_kind = cfg.train.loss
    if train_set.multilabel and loss_kind == "softmax":
        raise ConfigError([f"train.loss: {d.dataset} is multi-label; use 'sigmoid'"])

    cid = cell_id(cfg)
    resolved = cfg.to_dict()
    resolved["cell_id"] = cid
    resolved["data"]["num_examples"] = num_examples
    resolved["data"]["num_classes"] = train_set.num_classes
    if getattr(train_set, "selection", None):  # a sharded subset: exactly which examples
        resolved["data"]["selection"] = train_set.selection
    resolved["train"]["total_steps"] = total_steps
    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        _check_same_run(run_dir, cid)
        rf.write_json_atomic(run_dir / rf.CONFIG, resolved)

    # 3. Model and optimiser ----------------------------------------------------------
    name = cfg.model.name
    try:
        model = create_model(
            name,
            num_classes=train_set.num_classes,
            image_size=d.image_size,
            head="pretrain",
            pool=cfg.model.pool,
            dropout=cfg.model.dropout,
            pre_logits=cfg.model.pre_logits,
            pretrained=cfg.model.pretrained,  # a published checkpoint to start from (or None)
        )
    except (FileNotFoundError, ValueError) as e:  # a checkpoint missing, unsafe or unfit
        raise ConfigError([f"model.pretrained: {e}"]) from None
    published = cfg.model.pretrained and published_compute(
        name, cfg.model.pretrained_dataset, cfg.model.pretrained_epochs
    )
    cost = flops.count(
        name,
        d.image_size,
        num_classes=train_set.num_classes,
        head="pretrain",
        pool=cfg.model.pool,
        pre_logits=cfg.model.pre_logits,
    )
    o = cfg.optim
    optimizer = build_adamw(model, lr=o.lr, weight_decay=o.weight_decay, betas=o.betas)
    schedule = build_schedule(
        optimizer,
        total_steps=total_steps,
        warmup_steps=o.warmup_steps,
        schedule=o.schedule,
        end_lr=o.end_lr,
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    unwrapped = accelerator.unwrap_model(model)

    # 4. Resume -----------------------------------------------------------------------
    ckpt_dir = run_dir / rf.CHECKPOINTS
    progress = {
        "step": 0,
        "best": {},
        "elapsed_s": 0.0,
        "restarts": 0,
        "time_s": {},
        "skipped_samples": 0,  # bad examples replaced (data.skip_bad_samples), all processes
        "skipped": [],  # which ones, as this process (rank 0) saw them
    }
    if (latest := checkpoint.latest(ckpt_dir)) is not None:
        state, rng = checkpoint.load(latest, rank=rank)
        unwrapped.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        progress |= state["progress"] | {"restarts": state["progress"]["restarts"] + 1}
        if rng is not None:
            checkpoint.set_rng_state(rng)
        accelerator.print(
            f"resumed from {latest} (step {progress['step']}, restart {progress['restarts']})"
        )
    step = progress["step"]
    watch = Stopwatch(progress.get("time_s"))

    tracker = Tracker(
        run_dir=run_dir, config=resolved, cell_id=cid, enabled=is_main, resume_step=step
    )
    evaluator = TransferEvaluator(
        cfg, accelerator=accelerator, upstream_num_classes=train_set.num_classes
    )
    batches = iter(
        build_loader(
            train_set,
            batch_size=per_process,
            seed=cfg.seed,
            num_replicas=world,
            rank=rank,
            start_step=step,
            num_workers=d.num_workers,
        )
    )
    device = accelerator.device
    peak = peak_flops(device)

    def examples_seen(at_step: int) -> int:
        return at_step * cfg.train.batch_size

    def exaflops(at_step: int) -> float:  # a published start counts its own pre-training
        ours = cost.train_flops_per_example * examples_seen(at_step) / 1e18
        return ours + (published.exaflops if published else 0.0)

    def save_checkpoint() -> None:
        state = {
            "model": unwrapped.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "progress": progress
            | {
                "step": step,
                "elapsed_s": progress["elapsed_s"] + time.time() - started,
                "time_s": watch.totals,
            },
        }
        checkpoint.save(
            ckpt_dir,
            step=step,
            state=state,
            rank=rank,
            num_processes=world,
            barrier=accelerator.wait_for_everyone,
        )

    def evaluate() -> dict[str, float]:
        metrics = evaluator.run(unwrapped, step=step)
        for key, value in metrics.items():
            if rf.is_accuracy(key) and value > progress["best"].get(key, float("-inf")):
                progress["best"][key] = value  # best so far: Fig. 4's early stopping
        return metrics

    def finish(
        status: str,
        *,
        error: str | None = None,
        failed_step: int | None = None,
        final=None,
        tuned=None,
    ):
        wall = progress["elapsed_s"] + time.time() - started
        result = {
            "status": status,
            "error": error,
            "failed_step": failed_step,
            "cell_id": cid,
            "model": name,
            "steps": step,
            "examples_seen": examples_seen(step),
            "pretrain_exaflops": exaflops(step),
            "params": sum(p.numel() for p in unwrapped.parameters()),
            "wall_clock_s": wall,
            "device_hours": wall * world / 3600,
            "final": final or {},
            "best": dict(progress["best"]),
            "finetune": tuned or {},
            "precision": precision,
            "num_processes": world,
            "restarts": progress["restarts"],
            "time_s": dict(watch.totals),
            "skipped_samples": progress["skipped_samples"],
            "skipped": progress["skipped"],
            "published": published.as_dict() if published else None,
        }
        if is_main:
            rf.write_json_atomic(run_dir / rf.RESULT, result)
            tracker.summary(result)
        tracker.close(failed=status != rf.STATUS_DONE)
        return result

    # 5. The loop ---------------------------------------------------------------------
    model.train()
    watch.totals["setup"] += time.perf_counter() - setup_started
    last_log = (time.time(), step)
    final_metrics: dict[str, Any] = {}
    try:
        with PreemptionFlag() as preemption:
            while step < total_steps:
                with watch("data"):
                    batch = next(batches)
                    skipped = getattr(batch, "skipped", ())  # sharded sets: bad examples replaced
                    images, targets = batch
                    images, targets = (
                        images.to(device, non_blocking=True),
                        targets.to(device, non_blocking=True),
                    )
                with watch("step"):
                    loss_sum = torch.zeros((), device=device)
                    for i, (x, y) in enumerate(_micro_batches(images, targets, micro)):
                        sync = i == accumulation - 1
                        with (
                            accelerator.no_sync(model) if not sync else contextlib.nullcontext(),
                            accelerator.autocast(),
                        ):
                            loss = loss_fn(
                                model(x),
                                y,
                                kind=loss_kind,
                                label_smoothing=cfg.train.label_smoothing,
                            )
                        accelerator.backward(loss / accumulation)
                        loss_sum += loss.detach()
                    grad_norm = accelerator.clip_grad_norm_(
                        model.parameters(), cfg.train.grad_clip or float("inf")
                    )
                    local_loss = loss_sum / accumulation
                    flags = torch.tensor(
                        [
                            float(not torch.isfinite(local_loss) or not torch.isfinite(grad_norm)),
                            float(preemption.requested),
                            float(len(skipped)),
                        ],
                        device=device,
                    )
                    flags = accelerator.reduce(flags, reduction="sum") if world > 1 else flags
                    if flags[0] > 0:
                        error = f"non-finite loss at step {step + 1}: stopped; last good checkpoint kept"
                        final_metrics = {rf.TRAIN_LOSS: float(local_loss)}
                        raise TrainingFailed(error, step + 1)
                    if flags[2] > 0:
                        progress["skipped_samples"] += int(flags[2])
                        progress["skipped"] = (progress["skipped"] + list(skipped))[:100]
                        if progress["skipped_samples"] > d.skip_bad_samples:
                            raise TrainingFailed(
                                f"{progress['skipped_samples']} bad examples replaced, more than "
                                f"data.skip_bad_samples={d.skip_bad_samples}; last good checkpoint "
                                f"kept; latest: {(skipped or ['(on another process)'])[-1]}",
                                step + 1,
                            )
                    optimizer.step()
                    schedule.step()
                    optimizer.zero_grad(set_to_none=True)
                step += 1

                row: dict[str, Any] = {}
                log_started = time.perf_counter()
                if step % cfg.train.log_every == 0 or step == total_steps:
                    mean_loss = (
                        accelerator.reduce(local_loss, reduction="mean")
                        if world > 1
                        else local_loss
                    )
                    now = time.time()
                    rate = (
                        (step - last_log[1]) * cfg.train.batch_size / max(now - last_log[0], 1e-9)
                    )
                    last_log = (now, step)
                    row |= {
                        rf.TRAIN_LOSS: float(mean_loss),
                        rf.LR: schedule.get_last_lr()[0],
                        "train/grad_norm": float(grad_norm),
                        rf.THROUGHPUT: rate,
                    }
                    if peak:
                        row[rf.MFU] = rate * 3 * cost.flops / peak
                watch.totals["log"] += time.perf_counter() - log_started
                if step == total_steps or (
                    cfg.train.eval_every and step % cfg.train.eval_every == 0
                ):
                    model.eval()
                    with watch("eval"):
                        row |= evaluate()
                    model.train()
                if row:
                    with watch("log"):
                        tracker.log(
                            {
                                rf.STEP: step,
                                rf.EXAMPLES_SEEN: examples_seen(step),
                                rf.EXAFLOPS: exaflops(step),
                            }
                            | row
                        )
                    final_metrics |= row
                periodic = cfg.train.checkpoint_every and step % cfg.train.checkpoint_every == 0
                if periodic or step == total_steps or flags[1] > 0:
                    with watch("checkpoint"):
                        save_checkpoint()
                if flags[1] > 0 and step < total_steps:
                    raise Preempted(step, preemption.signal_name)
    except Preempted:
        tracker.close()
        raise
    except TrainingFailed as e:
        return finish(rf.STATUS_FAILED, error=str(e), failed_step=e.step, final=final_metrics)
    except BaseException as e:
        finish(
            rf.STATUS_FAILED,
            error=f"{type(e).__name__}: {e}",
            failed_step=step + 1,
            final=final_metrics,
        )
        raise

    # 6. Fine-tuning and result -------------------------------------------------------
    model.eval()
    if not final_metrics:  # resumed after the last step, or a published cell (no steps)
        with watch("eval"):
            final_metrics = evaluate()
        if total_steps == 0:
            tracker.log({rf.STEP: 0, rf.EXAMPLES_SEEN: 0, rf.EXAFLOPS: exaflops(0)} | final_metrics)
    with watch("finetune"):
        tuned = evaluator.finetune(unwrapped, pretrain_image_size=d.image_size)
    if tuned:
        final_metrics |= {rf.finetune_key(ds): acc for ds, acc in tuned.items()}
        progress["best"] |= {rf.finetune_key(ds): acc for ds, acc in tuned.items()}
    return finish(rf.STATUS_DONE, final=final_metrics, tuned=tuned)


def _check_same_run(run_dir: Path, cid: str) -> None:
    """A run folder belongs to one cell: refuse to mix two configs' checkpoints."""
    existing = run_dir / rf.CONFIG
    if existing.is_file():
        old = rf.read_json(existing).get("cell_id")
        if old and old != cid:
            raise ConfigError(
                [
                    f"{run_dir} holds run {old}, but this config is run {cid}; use another --workdir or delete it"
                ]
            )
