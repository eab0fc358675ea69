"""Training-step throughput of our models against torchvision's and timm's, A/B interleaved.

One training step = forward, cross-entropy, backward, AdamW step, at the same
architecture, batch, resolution and precision for every implementation. Rounds are
interleaved (ours, torchvision, timm, ours, ...) so drift in machine load hits all alike;
the per-round ratio ours/reference is reported as its median.

    python benchmarks/throughput.py                                  # ViT-Ti/16, CPU
    python benchmarks/throughput.py --model BiT-R50x1 --batch 8      # vs timm resnetv2_50x1_bit
    python benchmarks/throughput.py --model ViT-B/16 --device cuda --precision bf16 --batch 256

On CUDA it also reports model-FLOPs utilisation: images/s x 3 x 2 x dense forward
multiply-adds (vitscale.flops) over the card's peak dense bf16 FLOP/s.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vitscale.catalog import parse  # noqa: E402
from vitscale.flops import count  # noqa: E402
from vitscale.models import create_model  # noqa: E402
from vitscale.train.runtime import peak_flops  # noqa: E402


def reference_models(name: str, *, image_size: int, num_classes: int) -> dict[str, torch.nn.Module]:
    """The same architecture from torchvision and timm (whichever are installed)."""
    spec = parse(name)
    refs: dict[str, torch.nn.Module] = {}
    if spec.family == "ViT":
        from torchvision.models.vision_transformer import VisionTransformer

        refs["torchvision"] = VisionTransformer(
            image_size=image_size,
            patch_size=spec.patch,
            num_layers=spec.depth,
            num_heads=spec.heads,
            hidden_dim=spec.width,
            mlp_dim=spec.mlp_dim,
            num_classes=num_classes,
        )
    with contextlib.suppress(ImportError):
        import timm

        if spec.family == "ViT":
            refs["timm"] = timm.models.vision_transformer.VisionTransformer(
                img_size=image_size,
                patch_size=spec.patch,
                embed_dim=spec.width,
                depth=spec.depth,
                num_heads=spec.heads,
                mlp_ratio=spec.mlp_dim / spec.width,
                num_classes=num_classes,
            )
        elif spec.family == "ResNet":
            refs["timm"] = timm.create_model(
                f"resnetv2_{spec.depth}x{int(spec.width)}_bit",
                pretrained=False,
                num_classes=num_classes,
            )
    return refs


def make_step(
    model,
    *,
    batch: int,
    image_size: int,
    num_classes: int,
    device,
    precision: str,
    memory_format=torch.contiguous_format,
):
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    x = torch.randn(batch, 3, image_size, image_size, device=device)
    x = x.contiguous(memory_format=memory_format)
    y = torch.randint(0, num_classes, (batch,), device=device)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=precision == "bf16"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def timed(step, n: int, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="ViT-Ti/16")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=3, help="steps per round")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--compile", action="store_true", help="torch.compile every model")
    p.add_argument("--only-ours", action="store_true")
    args = p.parse_args(argv)

    device = torch.device(args.device)
    torch.manual_seed(0)
    kw = dict(image_size=args.image_size, num_classes=args.num_classes)
    models = {"ours": create_model(args.model, head="finetune", **kw)}
    if not args.only_ours:
        models |= reference_models(args.model, **kw)
    steps = {}
    for key, model in models.items():
        if args.compile:
            model = torch.compile(model)
        steps[key] = make_step(
            model, batch=args.batch, device=device, precision=args.precision, **kw
        )
        for _ in range(args.warmup):
            steps[key]()
    rates: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(args.rounds):
        for key, step in steps.items():
            rates[key].append(args.steps * args.batch / timed(step, args.steps, device))

    medians = {k: statistics.median(v) for k, v in rates.items()}
    threads = torch.get_num_threads()
    print(
        f"{args.model} @ {args.image_size}px, batch {args.batch}, {args.precision}, {device}"
        f"{' (compiled)' if args.compile else ''}, {threads} threads, {args.rounds} rounds x {args.steps} steps"
    )
    for key, rate in medians.items():
        print(f"  {key:<12} {rate:10.1f} images/s (median)")
    out = {"images_per_s": medians}
    for ref in medians.keys() - {"ours"}:
        ratios = [a / b for a, b in zip(rates["ours"], rates[ref], strict=True)]
        out[f"ours/{ref}"] = statistics.median(ratios)
        print(f"  ours/{ref:<8} {out[f'ours/{ref}']:.3f} (median of per-round ratios)")
    if device.type == "cuda":
        c = count(args.model, args.image_size, num_classes=args.num_classes)
        achieved = medians["ours"] * 3 * c.flops
        gpu = torch.cuda.get_device_name()
        peak = peak_flops(device, args.precision)
        print(
            f"  {gpu}: {achieved / 1e12:.1f} TFLOP/s model FLOPs (3 x {c.flops / 1e9:.2f} GFLOP/image)"
        )
        if peak:
            out["mfu"] = achieved / peak
            print(
                f"  MFU {100 * out['mfu']:.1f}% of {peak / 1e12:.0f} TFLOP/s dense {args.precision} peak"
            )
    return out


if __name__ == "__main__":
    main()
