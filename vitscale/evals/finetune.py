"""Fine-tuning transfer (paper Sec. 3.2, App. B.1.1; PROTOCOL.md "Transfer").

SGD with momentum 0.9, batch 512, cosine decay, no weight decay, gradient clipping at
global norm 1; the pre-training head is dropped and one zero-initialised linear layer
added; at a higher resolution the position embeddings are resized (the model's
state-dict hook does it). The learning rate is chosen from a grid by training on the
train split minus a held-out slice and scoring on that slice; the run is then repeated
on the full train split with the chosen rate and scored on the test split.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..config import Config
from ..data import build_dataset, build_loader, finetune_splits
from ..data.registry import finetune_recipe
from ..models import create_model
from ..train.optim import lr_factor
from .features import run_model

MOMENTUM = 0.9
GRAD_CLIP = 1.0
WARMUP_FRACTION = 0.05  # big_vision's transfer configs warm up for ~2.5-5% of the steps


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
) -> float:
    """Fine-tune a fresh copy of ``pretrained`` for ``steps`` on ``train_set``; top-1 on
    ``eval_set``."""
    ft = cfg.eval.finetune
    model = _fresh_model(
        pretrained, cfg=cfg, num_classes=train_set.num_classes, image_size=image_size
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM, weight_decay=0.0)
    warmup = int(WARMUP_FRACTION * steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: lr_factor(
            s, total_steps=steps, warmup_steps=warmup, schedule="cosine", base_lr=lr, end_lr=0.0
        ),
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    world = accelerator.num_processes
    batches = iter(
        build_loader(
            train_set,
            batch_size=max(1, ft.batch_size // world),
            seed=cfg.seed,
            num_replicas=world,
            rank=accelerator.process_index,
            start_step=0,
            num_workers=cfg.data.num_workers,
        )
    )
    model.train()
    for _ in range(steps):
        images, targets = next(batches)
        with accelerator.autocast():
            loss = F.cross_entropy(
                model(images.to(accelerator.device)).float(), targets.to(accelerator.device)
            )
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    n = len(eval_set) if ft.test_examples is None else min(ft.test_examples, len(eval_set))
    logits, labels = run_model(
        accelerator.unwrap_model(model),
        eval_set,
        range(n),
        batch_size=cfg.eval.batch_size,
        accelerator=accelerator,
    )
    accuracy = (logits.argmax(dim=1) == labels).float().mean().item()
    return accuracy


def finetune_and_score(
    pretrained: torch.nn.Module, *, cfg: Config, dataset: str, accelerator, image_size: int
) -> float:
    """Choose the learning rate on the held-out slice, retrain on all of train, score test."""
    ft = cfg.eval.finetune
    paper_steps, paper_lrs = finetune_recipe(dataset)
    lrs = ft.lrs or list(paper_lrs)
    kw = dict(root=cfg.data.root, image_size=image_size, download=cfg.data.download, seed=cfg.seed)
    minitrain, val = finetune_splits(dataset, val_fraction=ft.val_fraction, **kw)
    common = dict(
        cfg=cfg, accelerator=accelerator, image_size=image_size, steps=ft.steps or paper_steps
    )
    if len(lrs) == 1:
        best_lr = lrs[0]
    else:
        scores = {
            lr: train_and_score(pretrained, train_set=minitrain, eval_set=val, lr=lr, **common)
            for lr in lrs
        }
        best_lr = max(scores, key=scores.get)
    train = build_dataset(dataset, "train", **kw)
    test = build_dataset(dataset, "test", **kw)
    return train_and_score(pretrained, train_set=train, eval_set=test, lr=best_lr, **common)
