"""Our training step against timm's, same GPU, batch and precision, in one run.

For each pair (timm's model, ours): ``vit_base_patch16_224`` / ViT-B/16,
``vit_small_patch16_224`` / ViT-S/16, ``resnetv2_50x1_bit`` / BiT-R50x1 and
``vit_base_r50_s16_224`` / R50x1+ViT-B/16, it trains

- **timm**: timm's model with timm's own step as its ``train.py`` runs it: AMP autocast
  (bf16 on a GPU), ``timm.optim.create_optimizer_v2(..., "adamw")``, cross-entropy,
  backward, step; with and without ``torch.compile``;
- **ours**: our model through the trainer's own step (:class:`vitscale.train.step.Step`:
  Accelerate's autocast, our AdamW and schedule, gradient clipping, channels-last where
  the trainer picks it), with and without ``torch.compile``;

on resident tensors (one random batch on the device) and, with ``--shards DIR``, fed
from a sharded set through our loader (the same batches for both). Each entry: images/s
(median over ``--rounds`` of ``--steps`` timed steps after warm-up), MFU against the
device's peak where known (paper-convention FLOPs, vitscale.flops), peak memory, and
ours/timm. Results print as a table and go to ``--out`` (JSON).

    python benchmarks/timm_side_by_side.py                                # GPU: all four
    python benchmarks/timm_side_by_side.py --models ViT-B/16 --shards /data/shards/in21k
    python benchmarks/timm_side_by_side.py --device cpu --image-size 32 --batch 4 \\
        --steps 2 --rounds 1 --models ViT-S/16 --compile eager          # a smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAIRS = {  # ours -> timm's
    "ViT-B/16": "vit_base_patch16_224",
    "ViT-S/16": "vit_small_patch16_224",
    "BiT-R50x1": "resnetv2_50x1_bit",
    "R50x1+ViT-B/16": "vit_base_r50_s16_224",
}
NUM_CLASSES = 1000


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timm_step(name: str, *, device, image_size: int, compile: bool, precision: str):
    """timm's model and its train.py step (AMP, its AdamW, cross-entropy)."""
    import timm
    from timm.optim import create_optimizer_v2

    kwargs = {"img_size": image_size} if "vit" in name else {}
    model = timm.create_model(name, num_classes=NUM_CLASSES, **kwargs).to(device).train()
    optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.1)
    forward = torch.compile(model) if compile else model
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32

    def step(x, y):
        with torch.autocast(device.type, dtype=dtype, enabled=precision == "bf16"):
            loss = F.cross_entropy(forward(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, model


def _our_step(name: str, *, device, image_size: int, compile: bool, precision: str, batch: int):
    """Our model through the trainer's own step (vitscale.train.step.Step)."""
    from accelerate import Accelerator

    from vitscale.models import create_model
    from vitscale.train.hardware import compile_model
    from vitscale.train.optim import build_adamw, build_schedule
    from vitscale.train.step import Step

    accelerator = Accelerator(
        cpu=device.type == "cpu", mixed_precision="bf16" if precision == "bf16" else "no"
    )
    model = create_model(name, num_classes=NUM_CLASSES, image_size=image_size)
    if device.type == "cuda" and "ViT-" not in name.split("+")[0]:  # the trainer's choice
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_adamw(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.999))
    schedule = build_schedule(
        optimizer, total_steps=10**6, warmup_steps=0, schedule="linear", end_lr=1e-5
    )
    prepared, optimizer = accelerator.prepare(model, optimizer)
    step = Step(
        accelerator=accelerator,
        model=prepared,
        forward=compile_model(prepared, True) if compile else prepared,
        optimizer=optimizer,
        schedule=schedule,
        loss_kind="softmax",
        label_smoothing=0.0,
        micro_batch=batch,
        grad_clip=1.0,
    )
    return step, prepared


def _batches(shards: str | None, args, device, batch: int):
    """Endless (images, labels) on ``device``: one resident batch, or, from ``shards``,
    our shard loader."""
    if not shards:
        x = torch.randn(batch, 3, args.image_size, args.image_size, device=device)
        y = torch.randint(0, NUM_CLASSES, (batch,), device=device)
        while True:
            yield x, y
    from vitscale.data import build_dataset, build_loader

    ds = build_dataset(f"shards:{shards}", "train", image_size=args.image_size)
    for images, targets in build_loader(ds, batch_size=batch, seed=0, num_workers=args.workers):
        labels = targets if targets.ndim == 1 else targets.argmax(-1)  # endless
        yield (
            images.to(device, non_blocking=True),
            (labels % NUM_CLASSES).to(device, non_blocking=True),
        )


def _measure(step, batches, device, args) -> float:
    """Median images/s over ``args.rounds`` rounds of ``args.steps`` steps."""
    for _ in range(3):  # warm-up: compilation, cuDNN autotuning, allocator
        step(*next(batches))
    _sync(device)
    rates = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.steps):
            step(*next(batches))
        _sync(device)
        rates.append(args.steps * args.batch / (time.perf_counter() - start))
    return statistics.median(rates)


def _write(out: str, device: torch.device, gpu: str, precision: str, rows: list[dict]) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(
        json.dumps(
            {"device": str(device), "gpu": gpu, "precision": precision, "rows": rows}, indent=2
        )
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(PAIRS), help=f"ours, of {', '.join(PAIRS)}")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", choices=("bf16", "fp32"), default=None)
    p.add_argument("--batch", type=int, default=256, help="per GPU (default 256)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--compile",
        choices=("both", "eager", "compiled"),
        default="both",
        help="eager, torch.compile, or both (default): compiling costs minutes on a fresh machine",
    )
    p.add_argument("--shards", help="also feed both from this sharded set (our loader)")
    p.add_argument("--workers", type=int, default=8, help="loader workers with --shards")
    p.add_argument("--out", default="benchmarks/timm_side_by_side.json")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    precision = args.precision or ("bf16" if cuda else "fp32")
    models = [m.strip() for m in args.models.split(",")]
    unknown = [m for m in models if m not in PAIRS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; valid: {', '.join(PAIRS)}")

    from vitscale.flops import count
    from vitscale.train.runtime import peak_flops_of

    gpu = torch.cuda.get_device_name(device) if cuda else "CPU"
    peak = peak_flops_of(gpu, precision) if cuda else None
    feeds = ["resident"] + (["shards"] if args.shards else [])
    rows = []
    for ours in models:
        per_image = count(ours, args.image_size, head="pretrain").train_flops_per_example
        for compile in {"both": [False, True], "eager": [False], "compiled": [True]}[args.compile]:
            for feed in feeds:
                row = {"model": ours, "timm": PAIRS[ours], "compile": compile, "feed": feed}
                for who in ("timm", "ours"):
                    if cuda:
                        torch.cuda.reset_peak_memory_stats(device)
                    kw = dict(device=device, image_size=args.image_size, compile=compile)
                    if who == "timm":
                        step, model = _timm_step(PAIRS[ours], precision=precision, **kw)
                    else:
                        step, model = _our_step(ours, precision=precision, batch=args.batch, **kw)
                    shards = args.shards if feed == "shards" else None
                    batches = _batches(shards, args, device, args.batch)
                    rate = _measure(step, batches, device, args)
                    row[f"{who}_img_s"] = rate
                    row[f"{who}_mfu"] = rate * per_image / peak if peak else None
                    gib = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
                    row[f"{who}_peak_gib"] = gib
                    del step, model, batches
                row["ratio"] = row["ours_img_s"] / row["timm_img_s"]
                rows.append(row)
                print(json.dumps(row), flush=True)
                _write(args.out, device, gpu, precision, rows)  # a run cut short keeps its rows
    print(f"\n{device} ({gpu}), {precision}, batch {args.batch}, {args.image_size} px")
    print(
        f"{'model':<16}{'compile':>8}{'feed':>10}{'timm img/s':>12}{'ours img/s':>12}{'ours/timm':>10}"
    )
    for r in rows:
        print(
            f"{r['model']:<16}{str(r['compile']):>8}{r['feed']:>10}{r['timm_img_s']:>12,.1f}"
            f"{r['ours_img_s']:>12,.1f}{r['ratio']:>10.2f}"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
