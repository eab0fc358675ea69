"""One cell's run (:class:`Run`): everything pre-training and its transfer evaluation share,
built by :func:`setup`; :mod:`vitscale.train.pretrain` drives it through the protocol.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import flops
from .. import record as rf
from ..config import Config, ConfigError, cooldown_steps
from ..data import (
    DatasetFormatError,
    DatasetNotFoundError,
    build_dataset,
    build_loader,
    rank0_downloads_first,
)
from ..errors import DiskFullError, disk_full_message, is_disk_full
from ..evals.transfer import TransferEvaluator
from ..models import create_model
from ..plan import Plan, plan
from ..published import Published, published_compute
from . import checkpoint, finetune_progress
from .hardware import (
    channels_last_for,
    compile_model,
    eval_batch_for,
    micro_batch_for,
    num_workers_for,
)
from .optim import build_adamw, build_schedule
from .runtime import (
    from_every_rank,
    from_rank0,
    make_accelerator,
    process_group_timeout,
    release,
)
from .signals import PreemptionFlag, agreement_group
from .step import Step
from .timing import Stopwatch
from .tracking import Tracker

# How long rank 0 waits for a dead process's own failure when all it saw was losing it.
PEER_FAILURE_WAIT_S = 10.0


def _fresh_progress() -> dict[str, Any]:
    """What a checkpoint carries besides the weights, optimiser and schedule."""
    return {
        "step": 0,
        "best": {},  # best accuracy seen per metric: Fig. 4's early stopping
        "elapsed_s": 0.0,
        "restarts": 0,
        "time_s": {},
        # the distinct bad examples replaced (data.skip_bad_samples) by any process, in
        # the order found: "<shard>: key '<key>': <reason>"
        "skipped": [],
    }


@dataclass
class Run:
    """A cell being trained. ``step`` counts optimiser steps taken; ``final`` holds the
    last value of every metric logged so far."""

    cfg: Config
    run_dir: Path
    preemption: PreemptionFlag
    accelerator: Any
    precision: str
    stop_group: Any  # where the processes agree on a stop signal
    num_workers: int
    train_set: Any
    total_steps: int
    cell_id: str
    resolved: dict[str, Any]  # config.json
    model: torch.nn.Module | None  # prepared (DDP) for the step; None once released
    unwrapped: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    schedule: Any
    step_fn: Step | None
    cost: flops.FlopCount
    published: Published | None
    channels_last: bool
    started: float = field(default_factory=time.time)
    setup_started: float = field(default_factory=time.perf_counter)  # until the first step
    step: int = 0
    progress: dict[str, Any] = field(default_factory=_fresh_progress)
    watch: Stopwatch = field(default_factory=Stopwatch)
    final: dict[str, Any] = field(default_factory=dict)
    tracker: Tracker | None = None
    evaluator: TransferEvaluator | None = None
    batches: Any = None
    # Decodes the loader's encoded batches on the device (data.decode), or None.
    decoder: Any = None

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    # --------------------------------------------------------------- accounting

    def examples_seen(self, step: int) -> int:
        return step * self.cfg.train.batch_size

    def exaflops(self, step: int) -> float:
        """Pre-training compute up to ``step`` (paper convention); a published start
        counts its own pre-training too."""
        ours = self.cost.train_flops_per_example * self.examples_seen(step) / 1e18
        return ours + (self.published.exaflops if self.published else 0.0)

    def clock(self) -> dict[str, Any]:
        """The progress to save now: steps, wall-clock and time per phase so far."""
        return self.progress | {
            "step": self.step,
            "elapsed_s": self.progress["elapsed_s"] + time.time() - self.started,
            "time_s": dict(self.watch.totals),
        }

    def resume(self) -> None:
        """Restore the newest checkpoint that reads back whole (a corrupted latest falls
        back to the one before); none readable: the cell fails, saying which. Rank 0
        chooses (verifying once) and every process loads its choice: processes that chose
        alone could resume at different steps after one of them failed a read, then hang.
        Any failure to load or restore it is the cell's, recorded in result.json: an
        unrecorded one would be submitted again by every ``vitscale grid``.

        A branch (``branch.trunk``, docs/schedules.md) with no checkpoint of its own starts
        from its trunk's at its cooldown start, as a resume would from its own: up to there
        the two runs compute the same states. Without one (the trunk failed before it) the
        cell runs alone, and says so."""
        latest, skipped, error = from_rank0(self.accelerator, self._choose_checkpoint())
        branched = latest is not None and latest.parent != self.run_dir / rf.CHECKPOINTS
        if error is None and latest is not None:
            try:
                state, rng = checkpoint.load(latest, rank=self.rank)
                if branched:
                    self._branch(state, rng, trunk=self.cfg.branch.trunk)
                else:
                    self._restore(state, rng)
            except Exception as e:  # noqa: BLE001 - every process fails with it, below
                rank = f"rank {self.rank}: " if self.world > 1 else ""
                error = f"{rank}{latest}: {type(e).__name__}: {e}"
            # one process that cannot load fails them all, now, not at a collective later
            error = next((e for e in from_every_rank(self.accelerator, error) if e), None)
        if error is not None:
            if self.is_main:
                rf.RunResult.failure(self.resolved, error=error, failed_step=None).write(
                    self.run_dir
                )
            raise checkpoint.CheckpointError(error)
        for problem in skipped:
            self.accelerator.print(f"skipped a checkpoint that cannot be resumed from: {problem}")
        if branched:
            self.accelerator.print(
                f"branched from {latest}: the stable phase of cell {self.cfg.branch.trunk} up "
                f"to step {self.step}; this cell's cooldown runs from there"
            )
        elif latest is not None:
            every = (
                f": rank 0's choice, loaded by all {self.world} processes" if self.world > 1 else ""
            )
            self.accelerator.print(
                f"resumed from {latest} (step {self.step}, restart {self.progress['restarts']})"
                + every
            )
        elif self.cfg.branch.trunk:
            self.accelerator.print(
                f"note: cell {self.cfg.branch.trunk} has no checkpoint at step "
                f"{self.cfg.branch.step} to branch from: this cell runs alone from step 0"
            )
        self.watch = Stopwatch(self.progress.get("time_s"))

    def _choose_checkpoint(self) -> tuple[Path | None, list[str], str | None]:
        """On rank 0: ``(checkpoint to resume from or None, the newer ones skipped and why,
        None)``, or ``(None, [], why none can be resumed from)``; elsewhere nothing, as
        rank 0's answer is what counts (:meth:`resume`)."""
        if not self.is_main:
            return None, [], None
        directory = self.run_dir / rf.CHECKPOINTS
        try:
            latest, skipped = checkpoint.resumable(directory)
        except checkpoint.CheckpointError as e:
            return None, [], str(e)
        except Exception as e:  # noqa: BLE001 - reported in result.json, then raised
            return None, [], f"{directory}: {type(e).__name__}: {e}"
        b = self.cfg.branch
        if latest is None and b.trunk and not (self.run_dir / rf.RESULT).is_file():
            trunk = checkpoint.at(self.run_dir.parent / b.trunk / rf.CHECKPOINTS, b.step)
            if trunk.is_dir() and (problem := checkpoint.verify(trunk)) is None:
                return trunk, skipped, None
            if trunk.is_dir():
                skipped.append(problem)
        return latest, skipped, None

    def _restore(self, state: dict[str, Any], rng: dict[str, Any] | None) -> None:
        self.unwrapped.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.progress |= state["progress"]
        # older checkpoints list each encounter of a bad example, not each example once
        self.progress["skipped"] = list(dict.fromkeys(self.progress["skipped"]))
        tuned = finetune_progress.read(self.run_dir).get("progress")
        if tuned and tuned["restarts"] >= self.progress["restarts"]:  # stopped fine-tuning
            self.progress |= {k: tuned[k] for k in ("elapsed_s", "time_s", "restarts")}
        self.progress["restarts"] += 1
        if rng is not None:
            checkpoint.set_rng_state(rng)
        self.step = self.progress["step"]

    def _branch(self, state: dict[str, Any], rng: dict[str, Any] | None, *, trunk: str) -> None:
        """Start from the trunk's state at this cell's cooldown start: its weights, moments,
        RNGs and data position, then this cell's own learning rate from the step on (the
        trunk's rate there is its stable phase's). Not a restart of this cell; its record
        says where its stable phase came from."""
        progress = state["progress"]
        self._restore(state, rng)
        self.progress["restarts"] = 0
        self.progress["branched_from"] = {
            "trunk": trunk,
            "step": self.step,
            "exaflops": self.exaflops(self.step),
            "elapsed_s": progress["elapsed_s"],
        }
        s = self.schedule
        for group, base, rate in zip(
            self.optimizer.param_groups, s.base_lrs, s.lr_lambdas, strict=True
        ):
            group["lr"] = base * rate(s.last_epoch)
        s._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def open(self) -> None:
        """The metrics file (and W&B), the evaluator and this process's example stream,
        from the step the run resumes at."""
        pending = "pending_row" in self.progress  # its row is logged again, whole
        resume_step = self.step - 1 if pending else self.step
        self.tracker = Tracker(
            run_dir=self.run_dir,
            config=self.resolved,
            cell_id=self.cell_id,
            enabled=self.is_main,
            resume_step=resume_step,
        )
        if self.is_main and (branched := self.progress.get("branched_from")):
            trunk = self.run_dir.parent / branched["trunk"] / rf.METRICS
            mine = self.run_dir / rf.METRICS
            logged = {r[rf.STEP] for r in rf.iter_metrics(mine)} if mine.is_file() else set()
            until = min(resume_step, branched["step"])
            for row in rf.iter_metrics(trunk):  # the trunk's rows up to there are this cell's
                if row[rf.STEP] <= until and row[rf.STEP] not in logged:
                    self.tracker.log(row)
        self.evaluator = TransferEvaluator(
            self.cfg,
            accelerator=self.accelerator,
            upstream_num_classes=self.train_set.num_classes,
            batch_size=eval_batch_for(
                self.cfg,
                per_process=self.cfg.train.batch_size // self.world,
                num_classes=self.train_set.num_classes,
                device=self.device,
            ),
            num_workers=self.num_workers,
        )
        self.batches = iter(
            build_loader(
                self.train_set,
                batch_size=self.cfg.train.batch_size // self.world,
                seed=self.cfg.seed,
                num_replicas=self.world,
                rank=self.rank,
                start_step=self.step,
                num_workers=self.num_workers,
            )
        )

    # --------------------------------------------------------------- during training

    def save_checkpoint(self) -> None:
        state = {
            "model": self.unwrapped.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "progress": self.clock(),
        }
        checkpoint.save(
            self.run_dir / rf.CHECKPOINTS,
            step=self.step,
            state=state,
            accelerator=self.accelerator,
            pinned=self.cfg.branch.keep,
        )

    def evaluate(self) -> dict[str, float]:
        """Few-shot and upstream accuracies now; the best of each so far is kept. A stop
        signal agreed during it raises :class:`~vitscale.evals.transfer.EvaluationStopped`."""
        stop = functools.partial(self.preemption.agreed, self.stop_group)
        metrics = self.evaluator.run(self.unwrapped, stop=stop)
        best = self.progress["best"]
        for key, value in metrics.items():
            if rf.is_accuracy(key) and value > best.get(key, float("-inf")):
                best[key] = value
        return metrics

    def release_training_state(self) -> None:
        """Keep only the weights: the loader's workers end, and the GPU lets go of AdamW's
        moments and DDP's buckets (three times the weights) before fine-tuning."""
        self.batches = None
        release(self.accelerator, self.model, self.optimizer)
        self.model = self.optimizer = self.schedule = self.step_fn = None
        self.unwrapped.eval()

    # --------------------------------------------------------------- the end

    def result(self, status: str, *, error=None, failed_step=None, tuned=None) -> rf.RunResult:
        wall = self.progress["elapsed_s"] + time.time() - self.started
        return rf.RunResult(
            status=status,
            error=error,
            failed_step=failed_step,
            cell_id=self.cell_id,
            model=self.cfg.model.name,
            steps=self.step,
            examples_seen=self.examples_seen(self.step),
            pretrain_exaflops=self.exaflops(self.step),
            params=sum(p.numel() for p in self.unwrapped.parameters()),
            wall_clock_s=wall,
            device_hours=wall * self.world / 3600,
            final=dict(self.final),
            best=dict(self.progress["best"]),
            finetune=tuned or {},
            precision=self.precision,
            num_processes=self.world,
            restarts=self.progress["restarts"],
            time_s=dict(self.watch.totals),
            skipped_samples=len(self.progress["skipped"]),
            skipped=self.progress["skipped"][:100],
            published=self.published.as_dict() if self.published else None,
            branched_from=self.progress.get("branched_from"),
        )

    def first_failure(self, error: str, *, failed_step: int | None) -> tuple[str, int | None]:
        """``(error, failed_step)`` to record for this process's failure. With several
        processes each writes its own to the run folder first, and rank 0 records the
        run's: the first real failure of any of them, named by rank
        (:class:`vitscale.record.RankFailure`), not the "Connection closed by peer" a dead
        process leaves the others; when that is all it knows, it waits at most
        :data:`PEER_FAILURE_WAIT_S` for the dead one's note."""
        if self.world == 1:
            return error, failed_step
        mine = rf.RankFailure(rank=self.rank, error=error, failed_step=failed_step, at=time.time())
        with contextlib.suppress(OSError):  # a full disk: this process's output still says it
            mine.write(self.run_dir)
        if not self.is_main:
            return error, failed_step
        deadline = time.monotonic() + (PEER_FAILURE_WAIT_S if mine.lost_peer else 0.0)
        while True:
            found = rf.RankFailure.read_all(self.run_dir, world=self.world, since=self.started)
            first = rf.RankFailure.first([mine, *(f for f in found if f.rank != self.rank)])
            if not first.lost_peer or time.monotonic() >= deadline:
                return first.describe(), first.failed_step
            time.sleep(0.2)

    def finish(self, status: str, *, error=None, failed_step=None, tuned=None) -> rf.RunResult:
        """``result.json`` (rank 0, atomically), its W&B mirror, the tracker closed."""
        result = self.result(status, error=error, failed_step=failed_step, tuned=tuned)
        failed = status != rf.STATUS_DONE
        if self.is_main:
            try:
                result.write(self.run_dir)
            except OSError as e:
                self.tracker.close(failed=True)
                if failed:  # the failure being recorded is the news
                    print(
                        f"{self.cell_id}: the failure below could not be recorded in "
                        f"{rf.RESULT} ({e.strerror or e})",
                        file=sys.stderr,
                    )
                    return result
                if not is_disk_full(e):
                    raise
                kept = (
                    "training is complete and its last checkpoint is kept: free space and "
                    "run again to write the result"
                )
                raise DiskFullError(disk_full_message(e, kept=kept)) from e
            self.tracker.summary(result)
            if not failed:  # the fallback checkpoint and earlier attempts' failures: done with
                checkpoint.prune(self.run_dir / rf.CHECKPOINTS, keep=1, pinned=self.cfg.branch.keep)
                for note in self.run_dir.glob(rf.RANK_FAILURE.format(rank="*")):
                    note.unlink(missing_ok=True)
        self.tracker.close(failed=failed)
        return result


def setup(config: dict | Config | Plan, run_dir: Path, preemption: PreemptionFlag) -> Run:
    """The launch, the pre-training subset, the run folder's config.json, the model and
    its optimiser: everything before the first step (and before a resume). A config
    that is not planned yet is planned here, once (:func:`vitscale.plan.plan`)."""
    started, setup_started = time.time(), time.perf_counter()
    planned = config if isinstance(config, Plan) else plan(config)
    cfg = planned.config
    timeout = process_group_timeout(flops.count(cfg.model.name, cfg.data.image_size).params)
    accelerator, precision = make_accelerator(
        precision=cfg.train.precision, seed_everything=cfg.seed, timeout=timeout
    )
    if planned.num_processes != accelerator.num_processes:  # the launch, known only now
        planned = planned.with_num_processes(accelerator.num_processes)
    train_set, planned = _pretraining_set(planned, accelerator)
    decoder = _device_decoder(cfg, train_set, accelerator.device)
    total_steps, cid = planned.total_steps, planned.cell_id
    resolved = _record_config(planned, run_dir, train_set, accelerator)
    run = Run(
        cfg=cfg,
        run_dir=run_dir,
        preemption=preemption,
        accelerator=accelerator,
        precision=precision,
        stop_group=agreement_group(timeout=timeout),
        num_workers=num_workers_for(cfg, device=accelerator.device),
        train_set=train_set,
        total_steps=total_steps,
        cell_id=cid,
        resolved=resolved,
        started=started,
        setup_started=setup_started,
        decoder=decoder,
        **_model(cfg, accelerator, train_set.num_classes, total_steps),
    )
    run.accelerator.print(
        f"{cid}: {run.world} process(es) on {run.device} "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}), "
        f"{precision}, micro-batch {run.step_fn.micro_batch} x "
        f"{cfg.train.batch_size // run.world // run.step_fn.micro_batch} per process, "
        f"{run.num_workers} loader worker(s)"
    )
    return run


def _pretraining_set(planned: Plan, accelerator) -> tuple[Any, Plan]:
    """The pre-training subset; the plan completed with its size when only reading it
    told (a folder source), and its notes said once."""
    cfg = planned.config
    d = cfg.data
    try:
        with rank0_downloads_first(accelerator, download=d.download):
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
                holdout=d.holdout,
            )
    except (DatasetNotFoundError, DatasetFormatError):
        raise
    except ValueError as e:  # a folder source's size is known only now
        raise ConfigError([f"data: {e}"]) from None
    if planned.num_examples != len(train_set):
        planned = planned.with_num_examples(len(train_set))
    for note in planned.notes:
        accelerator.print(f"note: {note}")
    if train_set.multilabel and cfg.train.loss == "softmax":
        raise ConfigError([f"train.loss: {d.dataset} is multi-label; use 'sigmoid'"])
    return train_set, planned


def _device_decoder(cfg: Config, train_set, device: torch.device):
    """A sharded set decoded on the training device (``data.decode``): its stream then
    yields encoded bytes, and this decodes them (replacing bad images through a stream of
    its own); None where the workers decode."""
    from ..data.shards import decode_on_device
    from ..data.shards.device import DeviceDecoder

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    if not decode_on_device(cfg.data, gpu=gpu):
        return None
    train_set.on_device = True
    return DeviceDecoder(
        image_size=cfg.data.image_size,
        augment=train_set.augment,
        crop=train_set.crop,
        device=device,
        stream=train_set.stream(seed=cfg.seed),
    )


def _record_config(planned: Plan, run_dir: Path, train_set, accelerator) -> dict[str, Any]:
    """config.json: the resolved config and what the data added."""
    resolved = planned.config.to_dict()
    resolved["cell_id"] = planned.cell_id
    if planned.data_content:
        resolved["data_content"] = planned.data_content
    resolved["data"]["num_examples"] = len(train_set)
    resolved["data"]["num_classes"] = train_set.num_classes
    if train_set.selection:  # a sharded subset: exactly which examples
        resolved["data"]["selection"] = train_set.selection
    resolved["train"]["total_steps"] = planned.total_steps
    if accelerator.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        _check_same_run(run_dir, planned.cell_id)
        rf.write_json_if_changed(run_dir / rf.CONFIG, resolved)
    return resolved


def _model(cfg: Config, accelerator, num_classes: int, total_steps: int) -> dict[str, Any]:
    """The model (a published checkpoint's trunk when asked) and its compute, AdamW and the
    schedule, prepared for the launch, and the step that trains them: :class:`Run`'s
    fields."""
    name, d, o, t = cfg.model.name, cfg.data, cfg.optim, cfg.train
    try:
        model = create_model(
            name,
            num_classes=num_classes,
            image_size=d.image_size,
            head="pretrain",
            pool=cfg.model.pool,
            dropout=cfg.model.dropout,
            stochastic_depth=cfg.model.stochastic_depth,
            pre_logits=cfg.model.pre_logits,
            pretrained=cfg.model.pretrained,
        )
    except (FileNotFoundError, ValueError) as e:  # a checkpoint missing, unsafe or unfit
        raise ConfigError([f"model.pretrained: {e}"]) from None
    published = cfg.model.pretrained and published_compute(
        name, cfg.model.pretrained_dataset, cfg.model.pretrained_epochs
    )
    cost = flops.count(
        name,
        d.image_size,
        num_classes=num_classes,
        head="pretrain",
        pool=cfg.model.pool,
        pre_logits=cfg.model.pre_logits,
    )
    device = accelerator.device
    per_process = t.batch_size // accelerator.num_processes
    micro = micro_batch_for(cfg, per_process=per_process, num_classes=num_classes, device=device)
    channels_last = channels_last_for(cfg, device=device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_adamw(model, lr=o.lr, weight_decay=o.weight_decay, betas=o.betas)
    schedule = build_schedule(
        optimizer,
        total_steps=total_steps,
        warmup_steps=o.warmup_steps,
        schedule=o.schedule,
        end_lr=o.end_lr,
        cooldown=cooldown_steps(o.cooldown, total_steps),
        cooldown_shape=o.cooldown_shape,
        timescale=o.timescale,
    )
    prepared, optimizer = accelerator.prepare(model, optimizer)
    step = Step(
        accelerator=accelerator,
        model=prepared,
        forward=compile_model(prepared, t.compile) if t.compile else prepared,
        optimizer=optimizer,
        schedule=schedule,
        loss_kind=t.loss,
        label_smoothing=t.label_smoothing,
        micro_batch=micro,
        grad_clip=t.grad_clip,
    )
    return dict(
        model=prepared,
        unwrapped=accelerator.unwrap_model(prepared),
        optimizer=optimizer,
        schedule=schedule,
        step_fn=step,
        cost=cost,
        published=published or None,
        channels_last=channels_last,
    )


def _check_same_run(run_dir: Path, cid: str) -> None:
    """A run folder belongs to one cell: refuse to mix two configs' checkpoints."""
    existing = run_dir / rf.CONFIG
    if existing.is_file():
        old = rf.read_json(existing).get("cell_id")
        if old and old != cid:
            raise ConfigError(
                [
                    f"{run_dir} holds run {old}, but this config is run {cid}; use another "
                    "--workdir or delete it"
                ]
            )
