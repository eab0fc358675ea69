"""Run a grid's cells on this machine, ``workers`` at a time, each in its own process.

Each cell runs ``python -m vitscale.grid.cellrun RUN_DIR`` (or under ``torchrun`` with
``processes`` CPU/GPU processes per cell), its output appended to ``RUN_DIR/log.txt``.
The cores are split evenly between concurrent cells (``OMP_NUM_THREADS``). Ctrl-C sends
SIGTERM to the running cells, which checkpoint and stop; run the grid again to resume.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

from .cellrun import EXIT_OK, EXIT_PREEMPTED
from .plan import Planned, prepare

LOG = "log.txt"


def cell_command(run_dir: Path, *, processes: int) -> list[str]:
    if processes == 1:
        return [sys.executable, "-m", "vitscale.grid.cellrun", str(run_dir)]
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
        "-m", "vitscale.grid.cellrun", str(run_dir),
    ]


def run_local(planned: list[Planned], *, workers: int = 1, processes: int = 1) -> dict[str, int]:
    """Run every ``submit`` cell; returns ``{cell id: exit code}``."""
    todo = [p for p in planned if p.action == "submit"]
    if workers < 1 or processes < 1:
        raise ValueError(f"workers and processes must be at least 1, got {workers} and {processes}")
    threads = max(1, (os.cpu_count() or 1) // (workers * processes))
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    running: set[subprocess.Popen] = set()
    lock = threading.Lock()
    stopping = threading.Event()
    codes: dict[str, int] = {}
    bar = tqdm(total=len(todo), desc="cells", unit="cell", disable=not todo)

    def run(item: Planned) -> None:
        if stopping.is_set():
            return
        prepare(item)
        with open(item.run_dir / LOG, "a") as log:
            proc = subprocess.Popen(
                cell_command(item.run_dir, processes=processes), stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )
            with lock:
                running.add(proc)
            code = proc.wait()
            with lock:
                running.discard(proc)
        codes[item.cell.id] = code
        if code not in (EXIT_OK, EXIT_PREEMPTED):
            tqdm.write(f"{item.cell.id} ({item.cell.config.model.name}) failed: see {item.run_dir / LOG}")
        bar.update()

    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        for future in [pool.submit(run, item) for item in todo]:
            future.result()
    except KeyboardInterrupt:
        stopping.set()
        with lock:
            for proc in running:  # the cells checkpoint on SIGTERM and exit
                os.killpg(proc.pid, signal.SIGTERM)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
        bar.close()
    return codes
