"""Pre-training loader throughput on real JPEGs, per CPU core, against what a GPU consumes.

The question: how many CPU cores per GPU does the loader need at the paper's scale?
Measured here, one process on one core (``torch.set_num_threads(1)``), images per second
for decode + Inception crop (random 8-100% area, aspect 3/4-4/3) + random flip + [-1, 1]
at 224 px (``vitscale.data.transforms.train_transform``), over the same JPEGs, along each
path an example takes: an ImageFolder file or a tar shard, decoded by PIL or by
``torchvision.io.decode_jpeg``, and the whole stream (``build_loader``, batches of 64)
with ``--workers`` W processes. The JPEGs are ``--images DIR`` if given, else made here
from a real photograph with ImageNet's sizes and bytes per pixel. With ``--device cuda``
it adds GPU JPEG decoding and, with ``--train-step``, the ViT-B/16 bf16 step fed by the
real loader against the same step on resident tensors. The paths, how the JPEGs are made,
what a GPU consumes and the results: benchmarks/RESULTS.md, "Pre-training loader on real
JPEGs".

    python benchmarks/loader_throughput.py                       # the table (1 core per path)
    python benchmarks/loader_throughput.py --workers 2 --rounds 5
    python benchmarks/loader_throughput.py --images /data/imagenet/val --limit 2000
    python benchmarks/loader_throughput.py --shorter-side 256   # shards stored pre-resized
    python benchmarks/loader_throughput.py --device cuda --train-step --workers 16
    python benchmarks/loader_throughput.py --out bench/loader.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vitscale.data import build_dataset, build_loader  # noqa: E402
from vitscale.data.shards import dataset as shard_dataset_module  # noqa: E402
from vitscale.data.shards.read import decode_pil, decode_torchvision  # noqa: E402
from vitscale.data.shards.write import shard_dataset  # noqa: E402
from vitscale.data.transforms import train_transform  # noqa: E402

SIZE = 224
GPU_IMAGES_PER_S = (3000, 3800)  # ViT-B/16 bf16 at 300-400 TFLOP/s sustained, 105 GFLOPs/img
IMAGENET_BYTES_PER_PIXEL = 138e9 / 1.281e6 / (469 * 387)
_SIZES = [(500, 375), (375, 500), (500, 333), (333, 500), (500, 400), (400, 300), (500, 500)]


def make_jpegs(
    root: Path, n: int, *, classes: int = 10, seed: int = 0, shorter_side: int | None = None
) -> list[Path]:
    """``n`` JPEGs of ImageNet's shape from one real photograph, in class folders
    (``shorter_side``: resized so, as shards stored pre-resized would be)."""
    from matplotlib.cbook import get_sample_data

    photo = Image.open(get_sample_data("grace_hopper.jpg", asfileobj=False)).convert("RGB")
    rng = np.random.default_rng(seed)
    files = []
    for i in range(n):
        w, h = photo.size
        area = rng.uniform(0.3, 1.0) * w * h
        aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        cw, ch = min(w, int(np.sqrt(area * aspect))), min(h, int(np.sqrt(area / aspect)))
        x, y = rng.integers(0, w - cw + 1), rng.integers(0, h - ch + 1)
        size = _SIZES[rng.integers(len(_SIZES))]
        if shorter_side is not None:
            size = tuple(round(v * shorter_side / min(size)) for v in size)
        image = photo.crop((x, y, x + cw, y + ch)).resize(size, Image.BICUBIC)
        pixels = np.asarray(image, dtype=np.float32) * rng.uniform(0.8, 1.2, 3)
        pixels += rng.normal(0.0, 8.0, pixels.shape)  # detail: ImageNet's bytes per pixel
        if rng.random() < 0.5:
            pixels = pixels[:, ::-1]
        file = root / "train" / f"c{i % classes}" / f"{i:06d}.jpg"
        file.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(file, quality=95)
        files.append(file)
    for c in range(classes):  # an ImageFolder source needs a test split
        (root / "test" / f"c{c}").mkdir(parents=True, exist_ok=True)
        shutil.copy(files[c], root / "test" / f"c{c}" / files[c].name)
    return files


def own_jpegs(src: Path, root: Path, limit: int, *, classes: int = 10) -> list[Path]:
    """Up to ``limit`` of the user's JPEGs, linked into an ImageFolder tree."""
    found = sorted(p for p in src.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))[:limit]
    if not found:
        raise SystemExit(f"no .jpg/.jpeg files under {src}")
    files = []
    for i, p in enumerate(found):
        file = root / "train" / f"c{i % classes}" / f"{i:06d}.jpg"
        file.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(p.resolve(), file)
        files.append(file)
    for c in range(classes):
        (root / "test" / f"c{c}").mkdir(parents=True, exist_ok=True)
        os.symlink(found[c].resolve(), root / "test" / f"c{c}" / "0.jpg")
    return files


def rate(fn, n: int, *, min_seconds: float) -> tuple[float, float]:
    """``(images per wall second, images per CPU second of this process)`` of ``fn(i)``
    over indices 0, 1, ... (wrapping), for ``min_seconds`` of wall time. On a shared
    machine the CPU-time rate is the one core's rate: waiting for the CPU is not counted."""
    fn(0)
    done, started, cpu = 0, time.perf_counter(), time.process_time()
    while True:
        fn(done % n)
        done += 1
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds:
            return done / elapsed, done / (time.process_time() - cpu)


def cpu_paths(tree: Path, shards: Path, files: list[Path]) -> dict:
    folder = build_dataset(f"imagefolder:{tree}", "train", image_size=SIZE)
    sharded = build_dataset(f"shards:{shards}", "train", image_size=SIZE)
    transform = train_transform(SIZE)
    rng = np.random.default_rng(1)
    order = rng.permutation(len(files))  # random access, as in training

    def folder_tv(i: int):
        path = folder.files[order[i]]
        return transform(decode_torchvision(Path(path).read_bytes()))

    def shards_with(decoder):
        def load(i: int):
            shard_dataset_module.decode = decoder
            try:
                return sharded.load(int(order[i]), seed=i)
            finally:
                shard_dataset_module.decode = decode_torchvision

        return load

    return {
        "folder, PIL": lambda i: folder[int(order[i])],
        "folder, decode_jpeg": folder_tv,
        "shards, decode_jpeg": shards_with(decode_torchvision),
        "shards, PIL": shards_with(decode_pil),
    }


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of processes (Linux ``/proc/<pid>/stat``)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def loader_rate(
    shards: Path, workers: int, *, batches: int, on_device: bool = False
) -> tuple[float, float]:
    """The whole stream through ``build_loader`` with ``workers`` processes: images per
    wall second, and per CPU second of the workers and the training process together.
    ``on_device``: the workers only read the bytes (``data.decode: device``)."""
    ds = build_dataset(f"shards:{shards}", "train", image_size=SIZE)
    ds.on_device = on_device
    loader = build_loader(ds, batch_size=64, seed=0, num_workers=workers)
    batches_ = iter(loader)
    next(batches_)  # workers started
    frame = batches_.gi_frame  # StreamLoader's generator: its DataLoader iterator
    pids = [os.getpid(), *(w.pid for w in frame.f_locals["batches"]._workers)]
    started, cpu = time.perf_counter(), _cpu_seconds(pids)
    for _ in range(batches):
        next(batches_)
    wall, used = time.perf_counter() - started, _cpu_seconds(pids) - cpu
    del batches_, frame
    return batches * 64 / wall, batches * 64 / used


def gpu_decode_rate(files: list[Path], *, min_seconds: float) -> float:
    from torchvision.io import decode_jpeg

    data = [torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8) for p in files]
    transform = train_transform(SIZE)

    def batch(start: int):
        chunk = [data[(start + k) % len(data)] for k in range(64)]
        images = decode_jpeg(chunk, device="cuda")
        out = torch.stack([transform(im) for im in images])
        torch.cuda.synchronize()
        return out

    return 64 * rate(lambda i: batch(64 * i), 10**9, min_seconds=min_seconds)[0]


def train_step_rates(
    shards: Path,
    workers: int,
    *,
    steps: int,
    batch: int,
    device: str = "cuda",
    model_name: str = "ViT-B/16",
    image_size: int = SIZE,
) -> dict:
    """Training images/s (bf16 autocast): on resident tensors, fed by the real loader with
    the workers decoding, and with the device decoding (``data.decode: device``). ``device``,
    ``model_name``, ``image_size`` other than a GPU's ViT-B/16 at 224: the same paths, to
    test them."""
    from vitscale.data.shards.device import DeviceDecoder
    from vitscale.models import create_model

    dev = torch.device(device)
    model = create_model(model_name, num_classes=1000, image_size=image_size, head="pretrain")
    model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y % 1000)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def images_per_s(batches) -> float:  # after 3 warm-up steps
        for _ in range(3):
            step(*next(batches))
        sync()
        t = time.perf_counter()
        for _ in range(steps):
            step(*next(batches))
        sync()
        return steps * batch / (time.perf_counter() - t)

    x = torch.randn(batch, 3, image_size, image_size, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    resident = images_per_s(itertools.repeat((x, y)))
    ds = build_dataset(f"shards:{shards}", "train", image_size=image_size)
    loader = build_loader(ds, batch_size=batch, seed=0, num_workers=workers)
    moved = ((xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)) for xb, yb in loader)
    fed = images_per_s(moved)
    # data.decode: device: the workers read bytes, the device decodes, crops and flips
    ds = build_dataset(f"shards:{shards}", "train", image_size=image_size)
    ds.on_device = True
    decoder = DeviceDecoder(image_size=image_size, augment=True, crop=True, device=dev)
    loader = build_loader(ds, batch_size=batch, seed=0, num_workers=workers)
    decoded = (tuple(decoder(b)) for b in loader)
    return {"resident": resident, "loader": fed, "loader_gpu_decode": images_per_s(decoded)}


def _row(path: str, rates: list[tuple[float, float]], **extra) -> dict:
    """A table row: the medians of ``(wall, CPU-time)`` rates over the rounds."""
    wall, cpu = zip(*rates, strict=True)
    return dict(
        path=path,
        images_per_s=statistics.median(wall),
        images_per_cpu_s=statistics.median(cpu),
        **extra,
    )


def format_table(rows: list[dict], meta: dict) -> str:
    """The rows with the cores per GPU each path needs, under a line about the JPEGs."""
    lo, hi = GPU_IMAGES_PER_S
    lines = [
        f"{meta['images']} JPEGs ({meta['source']}): mean {meta['mean_kb']:.0f} KB, "
        f"{meta['mean_pixels'] / 1e3:.0f}k px, {meta['bytes_per_pixel']:.2f} B/px "
        f"(ImageNet ~{meta['imagenet_bytes_per_pixel']:.2f}); load average "
        f"{meta['load_average'][0]:.2f} on {meta['cpu_count']} cores",
        "img/s: wall clock; img/CPU-s: per second of this process's CPU time (one core's "
        "rate, whatever else runs); cores per GPU = 3,000-3,800 img/s / img/CPU-s",
        f"{'path':<40} {'img/s':>8} {'img/CPU-s':>10} {'cores per GPU':>14}",
    ]
    for r in rows:
        cores = r.get("cores", 1)
        per_core = r.get("images_per_cpu_s", r["images_per_s"] / cores if cores else float("nan"))
        need = f"{lo / per_core:.1f}-{hi / per_core:.1f}" if cores else "-"
        cpu = f"{r['images_per_cpu_s']:>10.0f}" if "images_per_cpu_s" in r else f"{'-':>10}"
        lines.append(f"{r['path']:<40} {r['images_per_s']:>8.0f} {cpu} {need:>14}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=Path, help="a folder of your own JPEGs (default: made here)")
    p.add_argument("--limit", type=int, default=512, help="JPEGs used (default 512)")
    p.add_argument(
        "--shorter-side", type=int, help="made JPEGs resized to this shorter side (e.g. 256)"
    )
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds, median (default 3)")
    p.add_argument("--seconds", type=float, default=4.0, help="per path per round (default 4)")
    p.add_argument("--workers", type=int, default=0, help="also the DataLoader with W workers")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--train-step", action="store_true", help="cuda: end-to-end ViT-B/16 steps")
    p.add_argument("--batch", type=int, default=128, help="--train-step's batch (default 128)")
    p.add_argument("--out", type=Path, help="write the rows (.json) or the table")
    args = p.parse_args()
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="vitscale-loader-"))
    try:
        tree = tmp / "tree"
        if args.images:
            files = own_jpegs(args.images, tree, args.limit)
        else:
            files = make_jpegs(tree, args.limit, shorter_side=args.shorter_side)
        pixels = sum(np.prod(Image.open(f).size) for f in files)
        nbytes = sum(f.stat().st_size for f in files)
        shard_dataset(f"imagefolder:{tree}", tmp / "shards", shard_size=128, progress=False)
        paths = cpu_paths(tree, tmp / "shards", files)
        per_round: dict[str, list[tuple[float, float]]] = {k: [] for k in paths}
        for _ in range(args.rounds):
            for name, fn in paths.items():
                per_round[name].append(rate(fn, len(files), min_seconds=args.seconds))
        rows = [_row(k, v) for k, v in per_round.items()]
        if args.workers:
            for on_device, path in (
                (False, f"shards, DataLoader x {args.workers} (all processes)"),
                (True, f"shards read only (data.decode: device), DataLoader x {args.workers}"),
            ):
                rates = [
                    loader_rate(tmp / "shards", args.workers, batches=20, on_device=on_device)
                    for _ in range(args.rounds)
                ]
                rows.append(_row(path, rates, cores=args.workers))
        if args.device == "cuda":
            rows.append(
                {
                    "path": "GPU decode_jpeg + crop (batches of 64)",
                    "images_per_s": gpu_decode_rate(files, min_seconds=args.seconds),
                    "cores": 0,
                }
            )
            if args.train_step:
                w = max(args.workers, 1)
                r = train_step_rates(tmp / "shards", w, steps=30, batch=args.batch)
                feeds = (
                    ("resident", f"batch {args.batch}, resident tensors", 0, "resident"),
                    ("loader", f"loader x {w}", w, "workers"),
                    ("loader_gpu_decode", f"loader x {w}, decoded on the GPU", w, "device"),
                )
                rows += [
                    {
                        "path": f"ViT-B/16 bf16 step, {path}",
                        "images_per_s": r[key],
                        "cores": cores,
                        "feed": feed,
                    }
                    for key, path, cores, feed in feeds
                ]
        meta = {
            "images": len(files),
            "source": str(args.images) if args.images else "grace_hopper.jpg crops",
            "mean_kb": nbytes / len(files) / 1e3,
            "mean_pixels": pixels / len(files),
            "bytes_per_pixel": nbytes / pixels,
            "imagenet_bytes_per_pixel": IMAGENET_BYTES_PER_PIXEL,
            "load_average": os.getloadavg(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table = format_table(rows, meta)
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        text = (
            json.dumps({"meta": meta, "rows": rows}, indent=2)
            if args.out.suffix == ".json"
            else table
        )
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
