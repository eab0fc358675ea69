"""What a GPU must confirm about the trainer's clocks: the phase times in ``result.json``
against CUDA events, and fine-tuning's step rate with its copies queued.

Trains ``--model`` with the real trainer (synthetic data, sync steps every
``--log-every``), then fine-tunes it once, every training step (:class:`vitscale.train.
step.Step`) timed on the host and bracketed by CUDA events on the current stream.

- **phases**: ``time_s['step']`` must hold the device's time of the pre-training steps
  (the events' sum) wherever the host waited for it: ``step_share`` = time_s['step'] /
  events' sum, at least ``STEP_SHARE`` (a step phase that timed only the launches read
  0.2 of it, the waits falling between the phases).
- **fine-tuning**: its images/s by the events, and how long the host spends in each step
  call against the device's time of that step: ``host_share`` well under 1 is a host
  queueing ahead; near 1, a host that waits for every step (a blocking copy).

On a CPU there are no events: the host's times stand for both, so the shares read 1; the
run only proves the script (tests/test_gpu_script.py). Output: a table and ``--out`` JSON.

    python benchmarks/phase_check.py --device cuda --out phases.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEP_SHARE = 0.95


class _Timed:
    """Every :class:`Step` call's host seconds and (on CUDA) its events, in call order."""

    def __init__(self, cuda: bool) -> None:
        self.cuda, self.host, self.events = cuda, [], []

    def wrap(self, real):
        import torch

        def call(step, *args, **kwargs):
            started = time.perf_counter()
            if self.cuda:
                begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                begin.record()
            out = real(step, *args, **kwargs)
            if self.cuda:
                end.record()
                self.events.append((begin, end))
            self.host.append(time.perf_counter() - started)
            return out

        return call

    def device_s(self) -> list[float]:
        """Each call's device seconds (its host seconds on a CPU)."""
        if not self.cuda:
            return list(self.host)
        import torch

        torch.cuda.synchronize()
        return [b.elapsed_time(e) / 1e3 for b, e in self.events]


def config(args) -> dict:
    return {
        "model": {"name": args.model},
        "data": {"dataset": "synthetic", "image_size": args.image_size},
        "train": {
            "steps": args.steps,
            "batch_size": args.batch,
            "log_every": args.log_every,
            "checkpoint_every": None,
            "eval_every": None,
            "precision": args.precision,
        },
        "optim": {"warmup_steps": 1},
        "eval": {
            "fewshot": {"datasets": []},
            "upstream": {"examples": 0},
            "finetune": {
                "datasets": ["synthetic-textures"],
                "steps": args.finetune_steps,
                "batch_size": args.batch,
                "lrs": [0.01],
                "image_size": args.image_size,
                "test_examples": args.batch,
            },
        },
        "wandb": {"mode": "disabled"},
    }


def measure(args) -> dict:
    import torch

    from vitscale.train import step, train

    timed = _Timed(cuda=args.device == "cuda" and torch.cuda.is_available())
    real = step.Step.__call__
    step.Step.__call__ = timed.wrap(real)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = train(config(args), Path(tmp) / "run")
    finally:
        step.Step.__call__ = real
    device = timed.device_s()
    pre, ft = device[: args.steps], device[args.steps :]
    shares = [h / d for h, d in zip(timed.host[args.steps + 1 :], ft[1:], strict=True)]
    out = {
        "model": args.model,
        "device": torch.cuda.get_device_name() if timed.cuda else "cpu",
        "events": timed.cuda,
        "time_s": result.time_s,
        "pretrain_device_s": sum(pre),
        "step_share": result.time_s["step"] / sum(pre),
        "finetune_steps": len(ft),
        "finetune_images_per_s": len(ft[1:]) * args.batch / sum(ft[1:]) if len(ft) > 1 else None,
        "finetune_host_share": statistics.median(shares) if shares else None,
    }
    out["ok"] = out["step_share"] >= STEP_SHARE
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="ViT-S/16")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--finetune-steps", type=int, default=20)
    p.add_argument("--precision", choices=("bf16", "fp32", "auto"), default="auto")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    out = measure(args)
    print(
        f"{out['model']} on {out['device']}: time_s['step'] {out['time_s']['step']:.2f} s, "
        f"the steps' {'events' if out['events'] else 'host times'} {out['pretrain_device_s']:.2f} s "
        f"(share {out['step_share']:.2f}, needs >= {STEP_SHARE}); fine-tuning "
        f"{out['finetune_images_per_s'] or float('nan'):,.0f} img/s, host "
        f"{out['finetune_host_share'] or float('nan'):.2f} of each step's device time"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
