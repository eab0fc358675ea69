"""Pre-train one cell, measure its transfer, write its run folder (docs/design.md, "How a
cell runs"). Read top to bottom: ``train(plan, workdir) -> RunResult`` (also written to
``<workdir>/result.json``), whose steps :func:`_train` numbers:

0. Stop signals are handled from the start (before loader workers fork).
1. Set up (:func:`vitscale.train.run.setup`).
2. Resume from the latest complete checkpoint if the run folder has one.
3. Pre-train (:func:`pretrain`): at sync steps only (log, evaluation, checkpoint, stop and
   last steps) the host waits for the device, stops on a non-finite loss, evaluates and
   checkpoints.
4. Transfer (:func:`transfer`): the final evaluation and fine-tuning.
5. ``result.json``, written last, atomically.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import record as rf
from ..config import Config
from ..errors import DiskFullError, is_disk_full
from ..evals.transfer import EvaluationStopped
from ..plan import Plan
from .finetune import finetune_all
from .finetune_progress import FinetuneProgress
from .run import Run, setup
from .runtime import from_every_rank, mfu, peak_flops
from .signals import Preempted, PreemptionFlag, StopCheck


class TrainingFailed(RuntimeError):
    """The run stopped and was marked failed in result.json (e.g. a non-finite loss)."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


def train(config: dict | Config | Plan, workdir: str | Path) -> rf.RunResult:
    # 0. SIGUSR1/SIGTERM raise a flag from here on: loader workers forked later ignore them.
    with PreemptionFlag() as preemption:
        return _train(config, Path(workdir), preemption)


def _train(config: dict | Config | Plan, run_dir: Path, preemption: PreemptionFlag) -> rf.RunResult:
    run = setup(config, run_dir, preemption)  # 1
    run.resume()  # 2
    run.open()
    try:
        pretrain(run)  # 3
        tuned = transfer(run)  # 4
    except (Preempted, KeyboardInterrupt):  # stopped (a second Ctrl-C: at once): resumable
        run.tracker.close()
        raise
    except TrainingFailed as e:
        return run.finish(rf.STATUS_FAILED, error=str(e), failed_step=e.step)
    except BaseException as e:
        error = rf.describe_failure(e)
        recorded, failed_step = run.first_failure(error, failed_step=run.step + 1)
        run.finish(rf.STATUS_FAILED, error=recorded, failed_step=failed_step)
        if is_disk_full(e):  # said in plain words wherever it is reported
            raise DiskFullError(error) from e
        raise
    return run.finish(rf.STATUS_DONE, tuned=tuned)  # 5


# ------------------------------------------------------------------- 3. pre-training


@dataclass
class _Between:
    """What the loop carries from one sync step to the next, on the device where it can
    stay there: the first step whose loss or gradient was not finite (0: none), and the
    bad examples this process's loader replaced that the run had not counted yet (sharded
    sets; an ordered set: one bad example comes back every epoch)."""

    first_bad: torch.Tensor
    skipped: dict[str, None] = field(default_factory=dict)
    logged_at: tuple[float, int] = (0.0, 0)  # (training clock, step) of the last log row


def pretrain(run: Run) -> None:
    """Steps until ``run.total_steps``; the host waits for the device only at sync steps."""
    t = run.cfg.train
    peak = peak_flops(run.device, run.precision)
    run.step_fn.model.train()
    run.watch.totals["setup"] += time.perf_counter() - run.setup_started
    between = _Between(
        first_bad=torch.zeros((), dtype=torch.int64, device=run.device),
        logged_at=(_training_clock(run), run.step),
    )
    if (row := run.progress.pop("pending_row", None)) is not None:
        _log_and_evaluate(run, row=row, evaluating=True)  # stopped mid-evaluation: again
    started_at = run.step
    stop_check = StopCheck(run.preemption, run.stop_group)
    while run.step < run.total_steps:
        with run.watch("data"):
            images, targets = _next_batch(run, between)
        with run.watch("step"):
            loss, grad_norm = run.step_fn(images, targets)
            bad = ~(torch.isfinite(loss) & torch.isfinite(grad_norm))
            between.first_bad = torch.where(
                bad & (between.first_bad == 0), run.step + 1, between.first_bad
            )
        run.step += 1
        if run.step == started_at + 1:  # this process's first step: the warm-up
            _warmed_up(run, between)
        periodic = bool(t.checkpoint_every and run.step % t.checkpoint_every == 0)
        periodic |= run.step in run.cfg.branch.keep  # a branch point: kept for its branch
        evaluating = run.step == run.total_steps or bool(
            t.eval_every and run.step % t.eval_every == 0
        )
        logging = run.step % t.log_every == 0 or run.step == run.total_steps
        stop = stop_check.after_step(sync=logging or evaluating or periodic)
        if not (logging or evaluating or periodic or stop):
            continue  # no sync: the host queues the next step at once
        with run.watch("step"):  # the host waits here for the steps it queued: their time
            _check_health(run, between, loss)
        with run.watch("log"):
            row = _training_row(run, between, loss, grad_norm, peak) if logging else {}
        _log_and_evaluate(run, row=row, evaluating=evaluating)
        if periodic or run.step == run.total_steps or stop:
            with run.watch("checkpoint"):
                run.save_checkpoint()
        if stop and run.step < run.total_steps:
            raise Preempted(run.step, run.preemption.signal_name)


def _next_batch(run: Run, between: _Between) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's next batch on its device; bad examples the loader replaced are
    counted until the next sync step."""
    batch = next(run.batches)
    if run.decoder is not None:  # encoded bytes: decoded and augmented here (data.decode)
        batch = run.decoder(batch)
    if batch.skipped:
        known = run.progress["skipped"]
        between.skipped |= dict.fromkeys(t for t in batch.skipped if t not in known)
    images, targets = batch
    images = images.to(run.device, non_blocking=True)
    targets = targets.to(run.device, non_blocking=True)
    if run.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return images, targets


def _check_health(run: Run, between: _Between, loss: torch.Tensor) -> None:
    """At a sync step every process agrees on the first bad step and on the bad examples
    replaced so far, each counted once however often the stream comes back to it and
    whichever processes met it (the union of what each found, exchanged only when one
    found a new one); a bad step, or more distinct bad examples than allowed, fails the
    run. The ones found are progress, so a resumed run goes on counting them."""
    found = torch.tensor(float(len(between.skipped)), device=run.device)
    flags = torch.stack([between.first_bad.float(), found])
    if run.world > 1:
        flags = run.accelerator.gather(flags).view(run.world, 2)
        bad_steps = flags[:, 0][flags[:, 0] > 0]
        first = bad_steps.min() if len(bad_steps) else flags.new_zeros(())
        flags = torch.stack([first, flags[:, 1].sum()])
    failed_at, replaced = (int(v) for v in flags.tolist())
    if failed_at:
        run.final = {rf.TRAIN_LOSS: float(loss)}
        raise TrainingFailed(
            f"non-finite loss at step {failed_at}: stopped; last good checkpoint kept", failed_at
        )
    if replaced:
        found = from_every_rank(run.accelerator, list(between.skipped))
        merged = dict.fromkeys([*run.progress["skipped"], *(t for f in found for t in f)])
        run.progress["skipped"] = list(merged)
        between.skipped = {}
    limit, skipped = run.cfg.data.skip_bad_samples, run.progress["skipped"]
    if len(skipped) > limit:
        raise TrainingFailed(
            f"{len(skipped)} distinct bad examples replaced, more than "
            f"data.skip_bad_samples={limit}; last good checkpoint kept; latest: {skipped[-1]}",
            run.step,
        )


def _log_and_evaluate(run: Run, *, row: dict[str, Any], evaluating: bool) -> None:
    """The row of this sync step, the training metrics (``row``) and, when it evaluates,
    the transfer metrics, appended to metrics.jsonl (and W&B). A stop signal during the
    evaluation checkpoints the run with the row still to finish (``pending_row``): the
    resumed run evaluates again at this step and logs the row whole, as if never stopped."""
    if evaluating:
        run.step_fn.model.eval()
        try:
            with run.watch("eval"):
                row = row | run.evaluate()
        except EvaluationStopped:
            run.progress["pending_row"] = row
            with run.watch("checkpoint"):
                run.save_checkpoint()
            raise Preempted(run.step, run.preemption.signal_name) from None
        finally:
            run.step_fn.model.train()
    if row:
        with run.watch("log"):
            run.tracker.log(_axes(run, run.step) | row)
        run.final |= row
        run.accelerator.print(_progress(run, row), flush=True)


def _progress(run: Run, row: dict[str, Any]) -> str:
    """One line per logged step on the console (and a cell's log.txt): where the run is,
    its loss and speed, and the first few-shot accuracy when it evaluated."""
    said = [f"step {run.step:,}/{run.total_steps:,}"]
    if rf.TRAIN_LOSS in row:
        said.append(f"loss {row[rf.TRAIN_LOSS]:.4g}")
    if rf.THROUGHPUT in row:  # not after the warm-up step alone
        said[-1] += f", {row[rf.THROUGHPUT]:,.0f} images/s"
    if fewshot := next((k for k in row if rf.parse_fewshot_key(k)), None):
        said.append(f"{fewshot} {100 * row[fewshot]:.1f}%")
    return "; ".join(said)


def _training_row(
    run: Run, between: _Between, loss: torch.Tensor, grad_norm: torch.Tensor, peak
) -> dict[str, Any]:
    mean_loss = run.accelerator.reduce(loss, reduction="mean") if run.world > 1 else loss
    now = _training_clock(run)
    then, at = between.logged_at
    between.logged_at = (now, run.step)
    row = {
        rf.TRAIN_LOSS: float(mean_loss),
        rf.LR: run.schedule.get_last_lr()[0],
        "train/grad_norm": float(grad_norm),
    }
    if run.step > at:  # not the warm-up step alone (_warmed_up)
        row[rf.THROUGHPUT] = rate = (
            (run.step - at) * run.cfg.train.batch_size / max(now - then, 1e-9)
        )
        if peak:
            flops = 3 * run.cost.flops
            row[rf.MFU] = mfu(rate, flops_per_image=flops, processes=run.world, peak=peak)
    if run.device.type == "cuda":  # this process's high-water mark (no sync)
        row["memory/peak_gib"] = torch.cuda.max_memory_allocated(run.device) / 2**30
    return row


def _warmed_up(run: Run, between: _Between) -> None:
    """Start the rates' clock after the first step of a start or restart: that step carries
    the loader's start, compilation, cuDNN's autotuning and NCCL's set-up (a cold start's
    first rows read 2.3, then 57 img/s). On a GPU the host waits for that step to end
    (once: the steps after it are queued without a wait)."""
    if run.device.type == "cuda":
        with run.watch("step"):
            torch.cuda.synchronize(run.device)
    between.logged_at = (_training_clock(run), run.step)


def _training_clock(run: Run) -> float:
    """Seconds of this process's life less its evaluations and checkpoints (their own
    ``time_s`` buckets): what images/s and MFU divide by. A row's evaluation and checkpoint
    come after it is logged; counted, they would be the next row's, which would dip."""
    return time.perf_counter() - run.watch.totals["eval"] - run.watch.totals["checkpoint"]


def _axes(run: Run, step: int) -> dict[str, Any]:
    """The x axes of every metrics row: step, examples seen, cumulative exaFLOPs."""
    return {
        rf.STEP: step,
        rf.EXAMPLES_SEEN: run.examples_seen(step),
        rf.EXAFLOPS: run.exaflops(step),
    }


# ------------------------------------------------------------------- 4. transfer


def transfer(run: Run) -> dict[str, float]:
    """The final model's few-shot accuracy (the last step's, logged by then) and its
    fine-tuned accuracy per dataset, which join the final and best metrics."""
    run.release_training_state()
    if not run.final:  # resumed after the last step (stopped during fine-tuning)
        run.final = _logged_at(run.run_dir, run.total_steps)
    if not run.final:  # ... and its row was never logged, or a published cell
        try:
            with run.watch("eval"):
                run.final = run.evaluate()
        except EvaluationStopped:  # nothing to checkpoint: the resumed run evaluates again
            raise Preempted(run.step, run.preemption.signal_name) from None
        if run.total_steps == 0:
            run.tracker.log(_axes(run, 0) | run.final)
    progress = FinetuneProgress(
        run.run_dir,
        accelerator=run.accelerator,
        preemption=run.preemption,
        group=run.stop_group,
        clock=run.clock,
    )
    with run.watch("finetune"):
        tuned = finetune_all(
            run.unwrapped,
            cfg=run.cfg,
            accelerator=run.accelerator,
            pretrain_image_size=run.cfg.data.image_size,
            num_workers=run.num_workers,
            progress=progress,
        )
    scores = {rf.finetune_key(ds): acc for ds, acc in tuned.items()}
    run.final |= scores
    run.progress["best"] |= scores
    return tuned


def _logged_at(run_dir: Path, step: int) -> dict[str, Any]:
    """The metrics logged at ``step`` (what the run's final metrics were when it got there)."""
    path = run_dir / rf.METRICS
    rows = [r for r in rf.iter_metrics(path) if r.get(rf.STEP) == step] if path.is_file() else []
    skip = {rf.STEP, rf.EXAMPLES_SEEN, rf.EXAFLOPS}
    return {k: v for k, v in rows[-1].items() if k not in skip} if rows else {}
