"""GPU smoke benchmark: the numbers a first cluster run needs, from the real trainer.

    benchmarks/gpu_smoke.sh                      # every visible GPU, 300 steps per model
    benchmarks/gpu_smoke.sh --steps 100 --gpus 1
    benchmarks/gpu_smoke.sh --calibrate          # and append the speeds to the budget table

Trains ViT-B/16 and BiT-R50x1 (and BiT-R50x1 again without channels-last) on the
synthetic set at 224 px in bf16 with ``vitscale train`` under ``torchrun``, one process
per GPU, the micro-batch and loader workers chosen as a cell would choose them; what it
reports per model, and the results: benchmarks/RESULTS.md, "GPU smoke". Results are
printed as a table and written to ``--out`` (JSON). Without CUDA it says so and exits 2:
nothing is measured on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNS = (  # (model, train.channels_last)
    ("ViT-B/16", None),
    ("BiT-R50x1", None),
    ("BiT-R50x1", False),
)
IMAGE_SIZE = 224
NUM_CLASSES = 1000  # the synthetic set's upstream classes are what they are; see config


def _config(
    model: str, *, steps: int, batch: int, channels_last: bool | None, compile: bool = False
) -> dict:
    return {
        "model": {"name": model},
        "data": {"dataset": "synthetic", "image_size": IMAGE_SIZE},
        "train": {
            "steps": steps,
            "batch_size": batch,
            "precision": "bf16",
            "log_every": max(1, steps // 10),
            "checkpoint_every": None,
            "channels_last": channels_last,
            "compile": compile,
        },
        "optim": {"warmup_steps": min(100, steps // 2)},
        "eval": {"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
        "wandb": {"mode": "disabled"},
    }


def _train(config: dict, gpus: int, workdir: Path) -> tuple[list[dict], str]:
    path = workdir / "config.json"
    path.write_text(json.dumps(config))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += [f"--nproc_per_node={gpus}", "-m", "vitscale.cli", "train", str(path)]
    command += ["--workdir", str(workdir / "run")]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"training failed ({done.returncode}):\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (workdir / "run" / "metrics.jsonl").open()]
    return rows, done.stdout


def _loader_rate(batch: int, workers: int, seconds: float = 20.0) -> float:
    """Images/s one process's training loader delivers (synthetic set, its workers)."""
    from vitscale.data import build_dataset, build_loader

    dataset = build_dataset("synthetic", "train", image_size=IMAGE_SIZE)
    batches = iter(build_loader(dataset, batch_size=batch, seed=0, num_workers=workers))
    next(batches)  # workers started and warm
    images, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        images += len(next(batches).images)
    return images / (time.perf_counter() - start)


def _print_table(results: list[dict]) -> None:
    print(
        f"\n{'model':<10} {'ch-last':>7} {'img/s/GPU':>10} {'MFU':>6} {'micro':>7} "
        f"{'peak GiB':>9} {'est. GiB':>9}"
    )
    for r in results:
        cl = {None: "auto", False: "off", True: "on"}[r["channels_last"]]
        print(
            f"{r['model']:<10} {cl:>7} {r['images_per_s_per_gpu']:>10,.0f} {r['mfu']:>6.1%} "
            f"{r['micro_batch']:>3}x{r['accumulation']:<3} {r['peak_memory_gib']:>9.1f} "
            f"{r['estimated_gib']:>9.1f}"
        )


def _calibrate(path: Path, results: list[dict], args, argv: list[str] | None) -> None:
    """Append the measured speeds to the calibration table (vitscale.grid.calibration)."""
    import datetime as dt

    from vitscale.grid.calibration import Measured, append_rows

    command = " ".join(["benchmarks/gpu_smoke.sh", *(argv if argv is not None else sys.argv[1:])])
    rows = [
        Measured(
            gpu=r["device"],
            model=r["model"],
            image_size=IMAGE_SIZE,
            precision="bf16",
            compile=bool(r["compile"]),
            batch_per_gpu=args.batch_per_gpu,
            images_per_s=round(r["images_per_s_per_gpu"], 1),
            date=dt.date.today().isoformat(),
            source=command,
        )
        for r in results
    ]
    append_rows(path, rows)
    print(f"calibration: {len(rows)} row(s) appended to {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="training steps per model")
    ap.add_argument("--gpus", type=int, help="GPUs (processes) to use; default: all visible")
    ap.add_argument("--batch-per-gpu", type=int, default=256, help="per-GPU batch (default 256)")
    ap.add_argument(
        "--models",
        help="comma-separated models instead of the default three runs (channels-last auto)",
    )
    ap.add_argument("--compile", action="store_true", help="torch.compile the training model")
    ap.add_argument("--out", default="benchmarks/gpu_smoke.json", help="JSON results")
    ap.add_argument(
        "--calibrate",
        nargs="?",
        const="slurm/profiles/calibration.csv",
        metavar="CSV",
        help="append each model's measured images/s to this calibration table (default "
        "slurm/profiles/calibration.csv), which `vitscale grid --dry-run --profile` budgets "
        "from on this GPU type",
    )
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print(
            f"gpu_smoke: no CUDA device visible (torch {torch.__version__}, CUDA build "
            f"{torch.version.cuda}, CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): nothing measured. Run it on "
            "a machine with GPUs.",
            file=sys.stderr,
        )
        return 2
    from vitscale import memory
    from vitscale.data.workers import auto_num_workers
    from vitscale.train.runtime import peak_flops_of

    gpus = args.gpus or torch.cuda.device_count()
    device = torch.cuda.get_device_name(0)
    total = torch.cuda.get_device_properties(0).total_memory
    print(
        f"{gpus} x {device} ({total / memory.GiB:.0f} GiB, peak "
        f"{(peak_flops_of(device) or float('nan')) / 1e12:.0f} TFLOP/s bf16), torch {torch.__version__}",
        flush=True,
    )
    runs = [(m.strip(), None) for m in args.models.split(",")] if args.models else RUNS
    results = []
    for model, channels_last in runs:
        config = _config(
            model,
            steps=args.steps,
            batch=args.batch_per_gpu * gpus,
            channels_last=channels_last,
            compile=args.compile,
        )
        with tempfile.TemporaryDirectory() as tmp:
            rows, log = _train(config, gpus, Path(tmp))
        header = re.search(r"micro-batch (\d+) x (\d+) per process, (\d+) loader", log)
        micro, accumulation, workers = (int(g) for g in header.groups()) if header else (0, 0, 0)
        later = [r for r in rows if r["step"] > args.steps // 2]
        rate = statistics.median(r["throughput/images_per_s"] for r in later) / gpus
        mfu = statistics.median(r.get("throughput/mfu", float("nan")) for r in later)
        peak_gib = max(r.get("memory/peak_gib", 0.0) for r in rows)
        estimate = memory.estimate(
            model,
            image_size=IMAGE_SIZE,
            micro_batch=micro or args.batch_per_gpu,
            num_classes=NUM_CLASSES,
            processes=gpus,
        )
        results.append(
            {
                "model": model,
                "channels_last": channels_last,
                "compile": args.compile,
                "gpus": gpus,
                "device": device,
                "micro_batch": micro,
                "accumulation": accumulation,
                "loader_workers": workers,
                "images_per_s_per_gpu": rate,
                "mfu": mfu,
                "peak_memory_gib": peak_gib,
                "estimated_gib": estimate.total / memory.GiB,
            }
        )
        print(json.dumps(results[-1]), flush=True)
    workers = auto_num_workers(processes_on_node=max(1, gpus), accelerated=True)
    loader = _loader_rate(args.batch_per_gpu, workers)
    _print_table(results)
    print(
        f"loader: {loader:,.0f} images/s per process with {workers} workers "
        f"(synthetic, {IMAGE_SIZE} px)"
    )
    if args.calibrate:
        _calibrate(Path(args.calibrate), results, args, argv)
    out = Path(args.out)
    out.write_text(
        json.dumps(
            {"runs": results, "loader_images_per_s": loader, "loader_workers": workers}, indent=2
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
