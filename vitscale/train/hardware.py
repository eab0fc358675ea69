"""Choices that make a run fast on its hardware without changing what it computes: the
``null`` values of ``data.num_workers``, ``train.micro_batch_size`` (and fine-tuning's),
``train.channels_last`` and ``train.compile`` (what each picks: docs/config.md), and
``eval.batch_size`` cut to what fits beside training's state on a GPU. Why:
the synthetic renderer draws about 1k images/s per thread at 224 px, a third of what one
H100 trains ViT-B/16 on, so on a GPU loader workers render beside the step (on a CPU the
cores train); cuDNN runs ResNets' and hybrids' convolutions fastest on NHWC bf16 tensors
(ViTs have one, the patch embedding); compiling costs minutes per cell and each new shape.
"""

from __future__ import annotations

import os

import torch

from .. import memory
from ..catalog import parse
from ..config import Config, ConfigError
from ..data.shards import decode_on_device
from ..data.workers import auto_num_workers
from ..flops import count
from .runtime import resolve_precision


def num_workers_for(cfg: Config, *, device: torch.device) -> int:
    if cfg.data.num_workers is not None:
        return cfg.data.num_workers
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # torchrun and our SLURM tasks set it
    return auto_num_workers(processes_on_node=local, accelerated=device.type == "cuda")


def micro_batch_for(
    cfg: Config, *, per_process: int, num_classes: int, device: torch.device
) -> int:
    """Pre-training's micro-batch per process, beside its batch where that is decoded on
    the device (``data.decode``)."""
    if cfg.train.micro_batch_size:
        return cfg.train.micro_batch_size
    step = _pretraining(cfg, per_process=per_process, num_classes=num_classes, device=device)
    return _fit(per_process, device, what="train.micro_batch_size", **step)


def eval_batch_for(cfg: Config, *, per_process: int, num_classes: int, device: torch.device) -> int:
    """``eval.batch_size``, or fewer where its forward pass would not fit beside what
    pre-training keeps on this GPU (weights, gradients, AdamW's moments)."""
    step = _pretraining(cfg, per_process=per_process, num_classes=num_classes, device=device)
    return _fit_evaluation(cfg.eval.batch_size, device, step)


def finetune_micro_batch_for(
    cfg: Config, *, per_process: int, num_classes: int, image_size: int, device: torch.device
) -> int:
    """Fine-tuning's micro-batch per process (the pre-trained model stays beside it)."""
    if cfg.eval.finetune.micro_batch_size:
        return cfg.eval.finetune.micro_batch_size
    step = _finetuning(cfg, num_classes=num_classes, image_size=image_size)
    return _fit(per_process, device, what="eval.finetune.micro_batch_size", **step)


def finetune_eval_batch_for(
    cfg: Config, *, num_classes: int, image_size: int, device: torch.device
) -> int:
    """``eval.batch_size`` for a fine-tuned model's test set, fitted as
    :func:`eval_batch_for` beside what fine-tuning keeps."""
    step = _finetuning(cfg, num_classes=num_classes, image_size=image_size)
    return _fit_evaluation(cfg.eval.batch_size, device, step)


def _pretraining(cfg: Config, *, per_process: int, num_classes: int, device: torch.device):
    """The arguments of :func:`vitscale.memory.estimate` for pre-training's step."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return dict(
        name=cfg.model.name,
        image_size=cfg.data.image_size,
        num_classes=num_classes,
        head="pretrain",
        pool=cfg.model.pool,
        pre_logits=cfg.model.pre_logits,
        dropout=cfg.model.dropout or 0.0,
        precision=resolve_precision(cfg.train.precision),
        optimizer="adamw",
        loss=cfg.train.loss or "softmax",
        decode_batch=per_process if decode_on_device(cfg.data, gpu=gpu) else 0,
    )


def _finetuning(cfg: Config, *, num_classes: int, image_size: int):
    """The arguments of :func:`vitscale.memory.estimate` for a fine-tuning step."""
    kept = count(
        cfg.model.name,
        cfg.data.image_size,
        head="pretrain",
        pool=cfg.model.pool,
        pre_logits=cfg.model.pre_logits,
    )
    return dict(
        name=cfg.model.name,
        image_size=image_size,
        num_classes=num_classes,
        head="finetune",
        pool=cfg.model.pool,
        precision=resolve_precision(cfg.train.precision),
        optimizer="sgd",
        kept_params=kept.params,
    )


def _gpu(device: torch.device) -> tuple[int, int]:
    """(processes in the run, this GPU's bytes)."""
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    return world, torch.cuda.get_device_properties(device).total_memory


def _fit_evaluation(requested: int, device: torch.device, step: dict) -> int:
    if device.type != "cuda":
        return requested
    world, total = _gpu(device)
    resident = memory.estimate(micro_batch=1, device="cuda", processes=world, **step).resident
    heads = ("num_classes", "head", "pool", "pre_logits")
    return memory.evaluation_batch(
        requested,
        total,
        resident=resident,
        name=step["name"],
        image_size=step["image_size"],
        precision=step["precision"],
        **{k: step.get(k) for k in heads},
    )


def _fit(per_process: int, device: torch.device, *, what: str, **estimate) -> int:
    if device.type != "cuda":
        return per_process
    world, total = _gpu(device)
    micro, e = memory.fit_micro_batch(
        per_process, total, device="cuda", processes=world, **estimate
    )
    if micro is None:
        print(
            f"warning: {what}: the step needs an estimated {e.total / memory.GiB:.1f} GiB even at "
            f"micro-batch 1 and this GPU has {total / memory.GiB:.1f} GiB; trying 1",
            flush=True,
        )
        return 1
    return micro


def channels_last_for(cfg: Config, *, device: torch.device) -> bool:
    if cfg.train.channels_last is not None:
        return cfg.train.channels_last
    return device.type == "cuda" and parse(cfg.model.name).convolutional


def compile_model(model: torch.nn.Module, setting: bool | str) -> torch.nn.Module:
    """The training step's module, compiled (it shares its parameters with ``model``):
    ``true`` with inductor, a string with that ``torch.compile`` backend (e.g.
    ``aot_eager``: traced, no code generation)."""
    import torch._dynamo

    backend = "inductor" if setting is True else setting
    valid = torch._dynamo.list_backends(exclude_tags=())
    if backend not in valid:
        raise ConfigError(
            [
                f"train.compile: unknown backend {backend!r}; valid: true (inductor), {', '.join(valid)}"
            ]
        )
    return torch.compile(model, backend=backend)
