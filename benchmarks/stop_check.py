"""The cost of agreeing on a stop signal: the one-number gloo all-reduce the training loop
runs after every step (:meth:`vitscale.train.signals.PreemptionFlag.agreed`), on N
processes joined over loopback, against a small model's step.

Each process runs ``--calls`` steps after ``--warmup``; the table gives what the slowest
rank waits per step, on average (the next collective waits for that rank; the ranks' mean
beside it), both ways the loop can agree: at once (the host waits
for the answer after every step) and as the loop does (:class:`vitscale.train.signals.
StopCheck`: a sum started about every ``STOP_CHECK_S`` and read when the next starts, so
only the part of its round trip longer than that is waited for), over ``--seconds`` of
steps; ``--host-step-ms``: how long the host takes to queue a small model's step,
``--step-ms`` that step.

On one machine the N processes share its cores (a 2-core machine runs 64 ranks 32 to a
core), so the numbers are an upper bound for N GPUs with a core each. The host's step is
a sleep: a GPU node has cores to spare beside the ones queueing kernels, where gloo's
thread runs (a busy loop here would take the very cores the sums need).

    python benchmarks/stop_check.py --ranks 2 8 64
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _rank(rank, world, store, calls: int, warmup: int, host_s: float, seconds: float, out):
    import torch
    import torch.distributed as dist

    from vitscale.train.signals import PreemptionFlag, StopCheck

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    flag = PreemptionFlag()
    group = dist.group.WORLD
    # The gradients' all-reduce that keeps a real run's ranks in step, untimed (left out,
    # the ranks drift apart, and a rank's wait for a sum is then its wait for the others).
    in_step = dist.new_group(backend="gloo")
    at_once, overlapped = [], []
    for i in range(warmup + calls):
        dist.barrier(group=in_step)
        started = time.perf_counter()
        flag.agreed(group)
        if i >= warmup:
            at_once.append(time.perf_counter() - started)
    check = StopCheck(flag, group)
    steps = round(seconds / host_s)  # the first fifth: the interval settling
    for i in range(steps):
        time.sleep(host_s)  # the host queueing the step's kernels, on cores of its own
        dist.barrier(group=in_step)
        started = time.perf_counter()
        check.after_step()
        if i >= steps // 5:
            overlapped.append(time.perf_counter() - started)
    check.close()
    dist.barrier()
    out.put((rank, at_once, overlapped))
    dist.destroy_process_group()


def measure(world: int, *, calls: int, warmup: int, host_s: float, seconds: float) -> dict:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        procs = [
            ctx.Process(target=_rank, args=(r, world, store, calls, warmup, host_s, seconds, out))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        results = [out.get() for _ in procs]
        for p in procs:
            p.join()
    per_step = {}  # the slowest rank's wait at each step (and the ranks' mean), over the steps
    for k, way in ((1, "at_once"), (2, "overlapped")):
        steps = len(results[0][k])
        for stat, of in (("", max), ("_mean", statistics.fmean)):
            per_step[f"{way}{stat}_ms"] = 1e3 * statistics.fmean(
                of([r[k][i] for r in results]) for i in range(steps)
            )
    return per_step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 8, 64])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seconds", type=float, default=10.0, help="of steps, as the loop agrees")
    p.add_argument(
        "--host-step-ms", type=float, default=10.0,
        help="host time to queue one step (default 10: the host as slow as the device)",
    )  # fmt: skip
    p.add_argument(
        "--step-ms", type=float, default=10.0,
        help="a small model's step, for the share (default 10: ViT-S/16, 64 images per GPU)",
    )  # fmt: skip
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(
        f"{'ranks':>5} {'at once ms':>11} {'share':>7} {'overlapped ms':>14} {'share':>7} "
        f"{'mean rank ms':>13} {'share':>7}"
    )
    for world in args.ranks:
        m = measure(
            world, calls=args.calls, warmup=args.warmup, host_s=args.host_step_ms / 1e3,
            seconds=args.seconds,
        )  # fmt: skip
        print(
            f"{world:>5} {m['at_once_ms']:>11.3f} {m['at_once_ms'] / args.step_ms:>7.2%} "
            f"{m['overlapped_ms']:>14.3f} {m['overlapped_ms'] / args.step_ms:>7.2%} "
            f"{m['overlapped_mean_ms']:>13.3f} {m['overlapped_mean_ms'] / args.step_ms:>7.2%}",
            flush=True,
        )
    print(f"({os.cpu_count()} cores; the share is of a {args.step_ms:g} ms step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
