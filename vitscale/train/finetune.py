"""Fine-tuning transfer: the recipe is docs/protocol.md, "Transfer" (paper Sec. 3.2,
App. B.1.1); the model's state-dict hook resizes the position embeddings.

Every (dataset, stage, learning rate) is one fine-tune. Its batch of 512 is split into
micro-batches where the memory asks for it (``eval.finetune.micro_batch_size``,
gradient accumulation): the step is pre-training's (:class:`vitscale.train.step.Step`).
Each prepared model is released when it is done, so 25 fine-tunes hold no more memory
than one. Within a run, a :class:`Progress` (:mod:`.finetune_progress`) makes them resumable.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import torch

from ..config import Config
from ..data import build_dataset, build_loader, finetune_splits, rank0_downloads_first
from ..data.registry import finetune_sweep
from ..evals.features import evaluation_sample, run_model
from ..models import create_model
from .hardware import finetune_eval_batch_for, finetune_micro_batch_for
from .optim import build_schedule
from .runtime import prepared
from .step import Step

MOMENTUM = 0.9
GRAD_CLIP = 1.0
WARMUP_FRACTION = 0.05  # big_vision's transfer configs warm up for ~2.5-5% of the steps


class Progress(Protocol):
    """What fine-tuning asks of the run it belongs to."""

    def result(self, key: str) -> float | None:
        """The score of a fine-tune that already finished, if it did."""

    def record(self, key: str, value: float) -> None:
        """Keep a finished fine-tune's score."""

    def resume(self, key: str) -> dict[str, Any] | None:
        """The checkpointed state of this fine-tune, if a signal stopped it."""

    def maybe_stop(self, key: str, step: int, state) -> None:
        """Called after every step: at a preemption signal, checkpoint ``state()`` and stop
        (raise). Every process calls it at the same steps."""


class NoProgress:
    """Outside a run: nothing kept, never stopped."""

    def result(self, key: str) -> float | None:
        return None

    def record(self, key: str, value: float) -> None:
        pass

    def resume(self, key: str) -> dict[str, Any] | None:
        return None

    def maybe_stop(self, key: str, step: int, state) -> None:
        pass


def _fresh_model(
    pretrained: torch.nn.Module, *, cfg: Config, num_classes: int, image_size: int
) -> torch.nn.Module:
    model = create_model(
        cfg.model.name,
        num_classes=num_classes,
        image_size=image_size,
        head="finetune",
        pool=cfg.model.pool,
    )
    trunk = {k: v for k, v in pretrained.state_dict().items() if not k.startswith("head.")}
    missing, unexpected = model.load_state_dict(trunk, strict=False)
    if unexpected or any(not k.startswith("head.") for k in missing):
        raise RuntimeError(
            f"fine-tuning model does not match the pre-trained one: {missing} {unexpected}"
        )
    return model


def _state(accelerator, model, optimizer, schedule) -> dict[str, Any]:
    """A fine-tune's resumable state: what a preemption signal checkpoints."""
    return {
        "model": accelerator.unwrap_model(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
    }


def train_and_score(
    pretrained: torch.nn.Module,
    *,
    cfg: Config,
    train_set,
    eval_set,
    lr: float,
    steps: int,
    accelerator,
    image_size: int,
    key: str = "finetune",
    num_workers: int = 0,
    progress: Progress | None = None,
) -> float:
    """Fine-tune a fresh copy of ``pretrained`` for ``steps`` on ``train_set``; top-1 on
    ``eval_set`` (a seeded sample of ``eval.finetune.test_examples`` of it, if capped).
    ``key`` names this fine-tune in ``progress``."""
    progress = progress or NoProgress()
    if (done := progress.result(key)) is not None:
        return done
    ft = cfg.eval.finetune
    world, device = accelerator.num_processes, accelerator.device
    per_process = max(1, ft.batch_size // world)
    micro = finetune_micro_batch_for(
        cfg,
        per_process=per_process,
        num_classes=train_set.num_classes,
        image_size=image_size,
        device=device,
    )
    model = _fresh_model(
        pretrained, cfg=cfg, num_classes=train_set.num_classes, image_size=image_size
    )
    optimizer, schedule = _sgd(model, lr=lr, steps=steps)
    start = 0
    if (state := progress.resume(key)) is not None:  # stopped by a signal: go on from there
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        start = state["step"]
    resumed = f", resumed at step {start}" if start else ""
    accelerator.print(f"fine-tuning {key}: {steps} steps of {per_process} x {world}{resumed}")
    with prepared(accelerator, model, optimizer) as (model, optimizer):
        batches = iter(
            build_loader(
                train_set,
                batch_size=per_process,
                seed=cfg.seed,
                num_replicas=world,
                rank=accelerator.process_index,
                start_step=start,
                num_workers=num_workers,
            )
        )

        state = functools.partial(_state, accelerator, model, optimizer, schedule)
        step_once = Step(
            accelerator=accelerator,
            model=model,
            forward=model,
            optimizer=optimizer,
            schedule=schedule,
            loss_kind="softmax",
            label_smoothing=0.0,
            micro_batch=micro,
            grad_clip=GRAD_CLIP,
        )
        model.train()
        for step in range(start, steps):
            images, targets = next(batches)
            step_once(images.to(device, non_blocking=True), targets.to(device, non_blocking=True))
            progress.maybe_stop(key, step + 1, state)
        del batches  # its worker processes end here
        accuracy = _top1(
            model,
            eval_set,
            cfg=cfg,
            accelerator=accelerator,
            num_workers=num_workers,
            image_size=image_size,
        )
    progress.record(key, accuracy)
    return accuracy


def _sgd(model: torch.nn.Module, *, lr: float, steps: int):
    """SGD with momentum, no weight decay, a short linear warm-up then cosine decay to 0."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM, weight_decay=0.0)
    warmup = int(WARMUP_FRACTION * steps)
    schedule = build_schedule(
        optimizer, total_steps=steps, warmup_steps=warmup, schedule="cosine", end_lr=0.0
    )
    return optimizer, schedule


def _top1(model, eval_set, *, cfg: Config, accelerator, num_workers: int, image_size: int) -> float:
    """Top-1 on ``eval_set`` (a seeded sample of ``eval.finetune.test_examples`` of it)."""
    model.eval()
    batch = finetune_eval_batch_for(
        cfg, num_classes=eval_set.num_classes, image_size=image_size, device=accelerator.device
    )
    logits, labels = run_model(
        accelerator.unwrap_model(model),
        eval_set,
        evaluation_sample(len(eval_set), cfg.eval.finetune.test_examples, seed=cfg.seed),
        batch_size=batch,
        accelerator=accelerator,
        num_workers=num_workers,
    )
    return (logits.argmax(dim=1) == labels).float().mean().item()


def finetune_and_score(
    pretrained: torch.nn.Module,
    *,
    cfg: Config,
    dataset: str,
    accelerator,
    image_size: int,
    num_workers: int = 0,
    progress: Progress | None = None,
) -> float:
    """Choose the learning rate on the held-out slice, retrain on all of train, score test."""
    ft = cfg.eval.finetune
    steps, lrs, _ = finetune_sweep(dataset, steps=ft.steps, lrs=ft.lrs)
    d = cfg.data
    kw = dict(
        root=d.root, image_size=image_size, download=d.download, seed=cfg.seed, holdout=d.holdout
    )
    with rank0_downloads_first(accelerator, download=cfg.data.download):
        minitrain, val = finetune_splits(dataset, val_fraction=ft.val_fraction, **kw)
    common = dict(
        cfg=cfg,
        accelerator=accelerator,
        image_size=image_size,
        steps=steps,
        num_workers=num_workers,
        progress=progress,
    )
    if len(lrs) == 1:
        best_lr = lrs[0]
    else:
        scores = {
            lr: train_and_score(
                pretrained,
                train_set=minitrain,
                eval_set=val,
                lr=lr,
                key=f"{dataset}/select/lr={lr!r}",
                **common,
            )
            for lr in lrs
        }
        best_lr = max(scores, key=scores.get)
    with rank0_downloads_first(accelerator, download=cfg.data.download):
        train = build_dataset(dataset, "train", **kw)
        test = build_dataset(dataset, "test", **kw)
    return train_and_score(
        pretrained,
        train_set=train,
        eval_set=test,
        lr=best_lr,
        key=f"{dataset}/test/lr={best_lr!r}",
        **common,
    )


def finetune_all(
    pretrained: torch.nn.Module,
    *,
    cfg: Config,
    accelerator,
    pretrain_image_size: int,
    num_workers: int = 0,
    progress: Progress | None = None,
) -> dict[str, float]:
    """Fine-tune a copy of ``pretrained`` on each of ``eval.finetune.datasets``; test top-1
    per dataset. ``progress`` keeps finished results and stops at a preemption signal;
    None: nothing kept, never stopped."""
    ft = cfg.eval.finetune
    return {
        name: finetune_and_score(
            pretrained,
            cfg=cfg,
            dataset=name,
            accelerator=accelerator,
            image_size=ft.image_size or pretrain_image_size,
            num_workers=num_workers,
            progress=progress,
        )
        for name in ft.datasets
    }
