"""Run a grid's cells on this machine, ``workers`` at a time.

Each worker is one long-lived process (``python -m vitscale.grid.cellrun --serve``) that
runs the cells it is handed one after another, so the interpreter and library start-up is
paid once per worker, not once per cell; a cell with ``processes > 1`` runs under its own
``torchrun``. Every cell's output is appended to ``RUN_DIR/log.txt``. The cores are split
evenly between the workers (``OMP_NUM_THREADS``), and so are the GPUs: worker ``i`` sees
only its own ``processes`` of them (``CUDA_VISIBLE_DEVICES``), so two cells never share
``cuda:0``. Ctrl-C sends SIGTERM to the running cells, which checkpoint and stop; run the
grid again to resume.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tqdm import tqdm

from ..runfolder import LOG
from .cellrun import EXIT_OK, EXIT_PREEMPTED
from .plan import Planned, prepare

__all__ = ["LOG", "cell_command", "run_local", "visible_gpus", "gpu_groups"]

_SERVE = [sys.executable, "-m", "vitscale.grid.cellrun", "--serve"]


def cell_command(run_dir: Path, *, processes: int) -> list[str]:
    """The command that trains one cell in its own process(es)."""
    if processes == 1:
        return [sys.executable, "-m", "vitscale.grid.cellrun", str(run_dir)]
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
        "-m", "vitscale.grid.cellrun", str(run_dir),
    ]  # fmt: skip


def visible_gpus() -> list[str]:
    """The GPUs this process may hand out: ``CUDA_VISIBLE_DEVICES``, else every GPU."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def gpu_groups(gpus: list[str], *, workers: int, processes: int) -> list[list[str]] | None:
    """``processes`` GPUs per worker, disjoint; None on a machine without GPUs."""
    if not gpus:
        return None
    if workers * processes > len(gpus):
        raise ValueError(
            f"--workers {workers} x --processes {processes} needs {workers * processes} GPUs, "
            f"and this machine has {len(gpus)} ({','.join(gpus)}); lower --workers or --processes"
        )
    return [gpus[i * processes : (i + 1) * processes] for i in range(workers)]


class _Worker:
    """One cell at a time: in a persistent ``--serve`` process, or a process of its own."""

    def __init__(self, env: dict[str, str], processes: int) -> None:
        self.env, self.processes = env, processes
        self.proc: subprocess.Popen | None = None

    def run(self, run_dir: Path) -> int:
        if self.processes > 1:
            with open(run_dir / LOG, "a") as log:
                self.proc = subprocess.Popen(
                    cell_command(run_dir, processes=self.processes), stdout=log,
                    stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
                )  # fmt: skip
                return self.proc.wait()
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                _SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env, text=True,
                bufsize=1, start_new_session=True,
            )  # fmt: skip
        self.proc.stdin.write(f"{run_dir}\n")
        answer = self.proc.stdout.readline()
        if not answer:  # the worker died (killed, out of memory): its exit code stands for the cell
            return self.proc.wait()
        return int(answer)

    def stop(self, signum: int | None = None) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if signum is not None:
            os.killpg(self.proc.pid, signum)
        elif self.proc.stdin:
            self.proc.stdin.close()  # a serving worker exits at the end of its input
        self.proc.wait()


def run_local(planned: list[Planned], *, workers: int = 1, processes: int = 1) -> dict[str, int]:
    """Run every ``submit`` cell; returns ``{cell id: exit code}``."""
    todo = [p for p in planned if p.action == "submit"]
    if workers < 1 or processes < 1:
        raise ValueError(f"workers and processes must be at least 1, got {workers} and {processes}")
    threads = max(1, (os.cpu_count() or 1) // (workers * processes))
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    workers = min(workers, len(todo))
    groups = gpu_groups(visible_gpus(), workers=workers, processes=processes) if todo else None
    pending: queue.Queue[Planned] = queue.Queue()
    for item in todo:
        pending.put(item)
    stopping = threading.Event()
    codes: dict[str, int] = {}
    pool = [
        _Worker(env | ({"CUDA_VISIBLE_DEVICES": ",".join(groups[i])} if groups else {}), processes)
        for i in range(workers)
    ]
    bar = tqdm(total=len(todo), desc="cells", unit="cell", disable=not todo)

    def work(worker: _Worker) -> None:
        while not stopping.is_set():
            try:
                item = pending.get_nowait()
            except queue.Empty:
                return
            prepare(item)
            code = worker.run(item.run_dir)
            codes[item.cell.id] = code
            if code not in (EXIT_OK, EXIT_PREEMPTED):
                tqdm.write(
                    f"{item.cell.id} ({item.cell.config.model.name}) failed: see {item.run_dir / LOG}"
                )
            bar.update()

    threads_ = [threading.Thread(target=work, args=(w,), daemon=True) for w in pool]
    try:
        for t in threads_:
            t.start()
        for t in threads_:
            while t.is_alive():
                t.join(timeout=0.5)  # short joins: Ctrl-C reaches the main thread
    except KeyboardInterrupt:
        stopping.set()
        for w in pool:  # the cells checkpoint on SIGTERM and exit
            w.stop(signal.SIGTERM)
        raise
    finally:
        for w in pool:
            w.stop()
        bar.close()
    return codes
