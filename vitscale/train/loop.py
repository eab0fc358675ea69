"""Pre-train one cell, evaluate its transfer, write its run folder. Read top to bottom.

    train(config, workdir) -> RunResult (also written to <workdir>/result.json)

0. Preemption signals are handled from the start (before loader workers fork).
1. Resolve and validate the config; build the Accelerator (devices, processes, precision).
2. Data: the pre-training subset, its exact resumable batch stream, the transfer sets.
3. Model, optimiser, schedule; compute per example from :mod:`vitscale.flops`; the
   micro-batch that fits the GPU (:mod:`vitscale.memory`) when the config gives none.
4. Resume from the latest complete checkpoint if the run folder has one.
5. The loop: micro-batches with gradient accumulation fill the global batch; clip; step;
   checkpoint on SIGUSR1/SIGTERM at the next step (agreed on the CPU). The host waits for
   the device only at sync steps (log, evaluation, checkpoint, stop and last steps): there
   it logs, stops on a non-finite loss (recording the first bad step), and checkpoints.
6. Final evaluation and fine-tuning (resumable: :mod:`.finetune_progress`);
   ``result.json`` written last, atomically.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .. import flops
from .. import record as rf
from ..config import Config, ConfigError, cell_id, length_checks, resolve, to_steps
from ..data import DatasetFormatError, DatasetNotFoundError, build_dataset, build_loader
from ..errors import DiskFullError, disk_full_message, is_disk_full
from ..evals.transfer import TransferEvaluator
from ..models import create_model
from ..preflight import dataset_size, preflight
from ..published import published_compute
from . import checkpoint, finetune_progress
from .optim import build_adamw, build_schedule
from .runtime import make_accelerator, mfu, peak_flops, process_group_timeout, release
from .signals import Preempted, PreemptionFlag, agreement_group
from .speed import channels_last_for, compile_model, micro_batch_for, num_workers_for
from .timing import Stopwatch
from .tracking import Tracker

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


def train(config: dict | Config, workdir: str | Path) -> rf.RunResult:
    # 0. SIGUSR1/SIGTERM raise a flag from here on: loader workers forked later ignore them.
    with PreemptionFlag() as preemption:
        return _train(config, Path(workdir), preemption)


def _train(config: dict | Config, run_dir: Path, preemption: PreemptionFlag) -> rf.RunResult:
    started = time.time()
    setup_started = time.perf_counter()

    # 1. Config and launch ------------------------------------------------------------
    cfg = config if isinstance(config, Config) else resolve(config)
    accelerator, precision = make_accelerator(
        precision=cfg.train.precision,
        seed_everything=cfg.seed,
        timeout=process_group_timeout(flops.count(cfg.model.name, cfg.data.image_size).params),
    )
    cfg = resolve(cfg, num_processes=accelerator.num_processes)
    world, rank, is_main = (
        accelerator.num_processes,
        accelerator.process_index,
        accelerator.is_main_process,
    )
    per_process = cfg.train.batch_size // world
    device = accelerator.device
    stop_group = agreement_group()  # where the processes agree on a stop signal
    num_workers = num_workers_for(cfg, device=device)

    # 2. Data -------------------------------------------------------------------------
    d = cfg.data
    if problems := preflight(cfg, dataset_size=dataset_size(cfg)).problems:
        raise ConfigError(problems)  # before building anything: a subset the set cannot hold
    try:
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
    except (DatasetNotFoundError, DatasetFormatError):
        raise
    except ValueError as e:  # a folder source's size is known only now
        raise ConfigError([f"data: {e}"]) from None
    num_examples = len(train_set)
    total_steps = to_steps(
        steps=cfg.train.steps,
        epochs=cfg.train.epochs,
        examples=cfg.train.examples,
        batch_size=cfg.train.batch_size,
        num_examples=num_examples,
    )
    problems, notes = length_checks(cfg, total_steps)
    if problems:
        raise ConfigError(problems)
    for note in notes:
        accelerator.print(f"note: {note}")
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
        rf.write_json_if_changed(run_dir / rf.CONFIG, resolved)

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
    micro = micro_batch_for(
        cfg, per_process=per_process, num_classes=train_set.num_classes, device=device
    )
    accumulation = per_process // micro
    channels_last = channels_last_for(cfg, device=device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    accelerator.print(
        f"{cid}: {world} process(es) on {device} "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}), {precision}, "
        f"micro-batch {micro} x {accumulation} per process, {num_workers} loader worker(s)"
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
    forward = compile_model(model, cfg.train.compile) if cfg.train.compile else model

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
    latest = None
    try:  # the newest checkpoint that reads back whole: a corrupted latest falls back
        latest, skipped = checkpoint.resumable(ckpt_dir)
        state, rng = checkpoint.load(latest, rank=rank) if latest else (None, None)
    except Exception as e:  # noqa: BLE001 - none can be read: the cell fails, saying which
        error = str(e) if isinstance(e, checkpoint.CheckpointError) else f"{latest}: {e}"
        if is_main:
            rf.RunResult.failure(resolved, error=error, failed_step=None).write(run_dir)
        raise checkpoint.CheckpointError(error) from None
    for problem in skipped:
        accelerator.print(f"skipped a checkpoint that cannot be resumed from: {problem}")
    if latest is not None:
        unwrapped.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        progress |= state["progress"]
        tuned = finetune_progress.read(run_dir).get("progress")
        if tuned and tuned["restarts"] >= progress["restarts"]:  # stopped while fine-tuning
            progress |= {k: tuned[k] for k in ("elapsed_s", "time_s", "restarts")}
        progress["restarts"] += 1
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
        cfg,
        accelerator=accelerator,
        upstream_num_classes=train_set.num_classes,
        num_workers=num_workers,
    )
    batches = iter(
        build_loader(
            train_set,
            batch_size=per_process,
            seed=cfg.seed,
            num_replicas=world,
            rank=rank,
            start_step=step,
            num_workers=num_workers,
        )
    )
    peak = peak_flops(device)

    def examples_seen(at_step: int) -> int:
        return at_step * cfg.train.batch_size

    def exaflops(at_step: int) -> float:  # a published start counts its own pre-training
        ours = cost.train_flops_per_example * examples_seen(at_step) / 1e18
        return ours + (published.exaflops if published else 0.0)

    def clock() -> dict[str, Any]:
        """The progress to save now: steps, wall-clock and time per phase so far."""
        return progress | {
            "step": step,
            "elapsed_s": progress["elapsed_s"] + time.time() - started,
            "time_s": dict(watch.totals),
        }

    def save_checkpoint() -> None:
        state = {
            "model": unwrapped.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "progress": clock(),
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
        result = rf.RunResult(
            status=status,
            error=error,
            failed_step=failed_step,
            cell_id=cid,
            model=name,
            steps=step,
            examples_seen=examples_seen(step),
            pretrain_exaflops=exaflops(step),
            params=sum(p.numel() for p in unwrapped.parameters()),
            wall_clock_s=wall,
            device_hours=wall * world / 3600,
            final=final or {},
            best=dict(progress["best"]),
            finetune=tuned or {},
            precision=precision,
            num_processes=world,
            restarts=progress["restarts"],
            time_s=dict(watch.totals),
            skipped_samples=progress["skipped_samples"],
            skipped=progress["skipped"],
            published=published.as_dict() if published else None,
        )
        if is_main:
            try:
                result.write(run_dir)
            except OSError as e:
                tracker.close(failed=True)
                if status != rf.STATUS_DONE:  # the failure being recorded is the news
                    print(f"{cid}: could not write {rf.RESULT}: {e}", file=sys.stderr)
                    return result
                if not is_disk_full(e):
                    raise
                raise DiskFullError(
                    disk_full_message(
                        e,
                        kept="training is complete and its last checkpoint is kept: free "
                        "space and run again to write the result",
                    )
                ) from e
            tracker.summary(result)
            if status == rf.STATUS_DONE:  # the fallback checkpoint is no longer needed
                checkpoint.prune(ckpt_dir, keep=1)
        tracker.close(failed=status != rf.STATUS_DONE)
        return result

    # 5. The loop ---------------------------------------------------------------------
    model.train()
    watch.totals["setup"] += time.perf_counter() - setup_started
    last_log = (time.time(), step)
    final_metrics: dict[str, Any] = {}
    # The first step whose loss or gradient was not finite, on the device: read only at
    # sync steps, so the host never waits for the device in between.
    first_bad = torch.zeros((), dtype=torch.int64, device=device)
    skipped_since_sync = 0  # bad examples this process's loader replaced (sharded sets)
    try:
        while step < total_steps:
            with watch("data"):
                batch = next(batches)
                skipped = getattr(batch, "skipped", ())  # sharded sets: bad examples replaced
                skipped_since_sync += len(skipped)
                progress["skipped"] = (progress["skipped"] + list(skipped))[:100]
                images, targets = batch
                images, targets = (
                    images.to(device, non_blocking=True),
                    targets.to(device, non_blocking=True),
                )
                if channels_last:
                    images = images.contiguous(memory_format=torch.channels_last)
            with watch("step"):
                loss_sum = torch.zeros((), device=device)
                for i, (x, y) in enumerate(_micro_batches(images, targets, micro)):
                    sync = i == accumulation - 1
                    with (
                        accelerator.no_sync(model) if not sync else contextlib.nullcontext(),
                        accelerator.autocast(),
                    ):
                        loss = loss_fn(
                            forward(x),
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
                bad = ~(torch.isfinite(local_loss) & torch.isfinite(grad_norm))
                first_bad = torch.where(bad & (first_bad == 0), step + 1, first_bad)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad(set_to_none=True)
            step += 1

            periodic = bool(cfg.train.checkpoint_every and step % cfg.train.checkpoint_every == 0)
            evaluating = step == total_steps or bool(
                cfg.train.eval_every and step % cfg.train.eval_every == 0
            )
            logging = step % cfg.train.log_every == 0 or step == total_steps
            stop = preemption.agreed(stop_group)  # every step, without waiting for the device
            if not (logging or evaluating or periodic or stop):
                continue  # no sync: the host queues the next step at once
            # Sync step: every process agrees on a bad step and on the bad examples
            # replaced since the last one.
            flags = torch.stack(
                [first_bad.float(), torch.tensor(float(skipped_since_sync), device=device)]
            )
            if world > 1:
                flags = accelerator.gather(flags).view(world, 2)
                bad_steps = flags[:, 0][flags[:, 0] > 0]
                first = bad_steps.min() if len(bad_steps) else flags.new_zeros(())
                flags = torch.stack([first, flags[:, 1].sum()])
            failed_at, replaced = (int(v) for v in flags.tolist())
            if failed_at:
                error = f"non-finite loss at step {failed_at}: stopped; last good checkpoint kept"
                final_metrics = {rf.TRAIN_LOSS: float(local_loss)}
                raise TrainingFailed(error, failed_at)
            progress["skipped_samples"] += replaced
            skipped_since_sync = 0
            if progress["skipped_samples"] > d.skip_bad_samples:
                raise TrainingFailed(
                    f"{progress['skipped_samples']} bad examples replaced, more than "
                    f"data.skip_bad_samples={d.skip_bad_samples}; last good checkpoint kept; "
                    f"latest: {(progress['skipped'] or ['(on another process)'])[-1]}",
                    step,
                )

            row: dict[str, Any] = {}
            log_started = time.perf_counter()
            if logging:
                mean_loss = (
                    accelerator.reduce(local_loss, reduction="mean") if world > 1 else local_loss
                )
                now = time.time()
                rate = (step - last_log[1]) * cfg.train.batch_size / max(now - last_log[0], 1e-9)
                last_log = (now, step)
                row |= {
                    rf.TRAIN_LOSS: float(mean_loss),
                    rf.LR: schedule.get_last_lr()[0],
                    "train/grad_norm": float(grad_norm),
                    rf.THROUGHPUT: rate,
                }
                if peak:
                    row[rf.MFU] = mfu(
                        rate, flops_per_image=3 * cost.flops, processes=world, peak=peak
                    )
                if device.type == "cuda":  # this process's high-water mark (no sync)
                    row["memory/peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
            watch.totals["log"] += time.perf_counter() - log_started
            if evaluating:
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
            if periodic or step == total_steps or stop:
                with watch("checkpoint"):
                    save_checkpoint()
            if stop and step < total_steps:
                raise Preempted(step, preemption.signal_name)

        # 6. Fine-tuning and result ---------------------------------------------------
        # Keep only the weights: the loader's workers end, and the GPU lets go of AdamW's
        # moments and DDP's buckets (three times the weights) before fine-tuning.
        del batches
        release(accelerator, model, optimizer)
        model = forward = optimizer = schedule = None
        unwrapped.eval()
        if not final_metrics:  # resumed after the last step (stopped during fine-tuning)
            final_metrics = _logged_at(run_dir, total_steps)
        if not final_metrics:  # ... and its row was never logged, or a published cell
            with watch("eval"):
                final_metrics = evaluate()
            if total_steps == 0:
                tracker.log(
                    {rf.STEP: 0, rf.EXAMPLES_SEEN: 0, rf.EXAFLOPS: exaflops(0)} | final_metrics
                )
        tuning = finetune_progress.FinetuneProgress(
            run_dir, accelerator=accelerator, preemption=preemption, group=stop_group, clock=clock
        )
        with watch("finetune"):
            tuned = evaluator.finetune(unwrapped, pretrain_image_size=d.image_size, progress=tuning)
    except (Preempted, KeyboardInterrupt):  # stopped (a second Ctrl-C: at once): resumable
        tracker.close()
        raise
    except TrainingFailed as e:
        return finish(rf.STATUS_FAILED, error=str(e), failed_step=e.step, final=final_metrics)
    except BaseException as e:
        error = rf.describe_failure(e)
        finish(rf.STATUS_FAILED, error=error, failed_step=step + 1, final=final_metrics)
        if is_disk_full(e):  # said in plain words wherever it is reported
            raise DiskFullError(error) from e
        raise
    if tuned:
        final_metrics |= {rf.finetune_key(ds): acc for ds, acc in tuned.items()}
        progress["best"] |= {rf.finetune_key(ds): acc for ds, acc in tuned.items()}
    return finish(rf.STATUS_DONE, final=final_metrics, tuned=tuned)


def _logged_at(run_dir: Path, step: int) -> dict[str, Any]:
    """The metrics logged at ``step`` (what the run's final metrics were when it got there)."""
    path = run_dir / rf.METRICS
    rows = [r for r in rf.iter_metrics(path) if r.get(rf.STEP) == step] if path.is_file() else []
    skip = {rf.STEP, rf.EXAMPLES_SEEN, rf.EXAFLOPS}
    return {k: v for k, v in rows[-1].items() if k not in skip} if rows else {}


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
