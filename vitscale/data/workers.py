"""DataLoader worker processes that survive SLURM's signals and start ready to render.

SLURM signals every process of a job step: ``--signal=USR1@N`` before a time limit and
SIGTERM on preemption reach the loader workers as well as the trainer. A worker keeps
the signal dispositions of the moment it was forked; with the default ones it dies of
SIGUSR1 or SIGTERM, torch's main process then raises "DataLoader worker (pid ...) is
killed by signal" from the middle of a step, and a run that should have checkpointed
fails. Workers therefore ignore both signals (:func:`worker_init`), and SIGINT as well,
which a terminal's Ctrl-C sends to every process of the foreground group: the trainer,
which handles all three (:mod:`vitscale.train.signals`), checkpoints and stops, and shuts
the workers down itself. One exit path needs care: when a process exits with a loader still
referenced (an uncaught exception's traceback holds it), ``multiprocessing`` ends its
daemonic children with SIGTERM and waits for them, which would wait forever on workers
that ignore it; they are killed at exit instead (they hold nothing to save; a process
killed outright leaves workers that see their parent gone and exit by themselves).

Workers render the synthetic set with the fused C++ kernel (:mod:`vitscale.data.synthetic._fused`).
It is built (or loaded from torch's cache) once in the parent before the workers fork
(:func:`prepare_for_workers`), so they inherit it instead of each compiling or loading
it again.
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.util  # registers its exit handler now, before ours below
import os
import signal

from torch.utils.data import Dataset

# SLURM's time-limit signal (--signal=USR1@N) and its preemption/scancel signal.
PREEMPTION_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
# ... and Ctrl-C: every signal the trainer turns into "checkpoint at the next step, stop".
STOP_SIGNALS = (*PREEMPTION_SIGNALS, signal.SIGINT)

MAX_AUTO_WORKERS = 16  # per process; more rarely pays at 224 px


def worker_init(worker_id: int) -> None:
    """``worker_init_fn`` of every vitscale DataLoader: leave SLURM's signals and Ctrl-C to
    the trainer."""
    del worker_id
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def _kill_loader_workers() -> None:
    """What multiprocessing's exit handler does to daemonic children (loader workers are
    daemonic), with SIGKILL instead of the SIGTERM they ignore."""
    daemons = [child for child in multiprocessing.active_children() if child.daemon]
    if daemons:
        # torch's SIGCHLD handler would report each as "killed by signal": we know.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for child in daemons:
        child.kill()


# Registered after multiprocessing's own exit handler, so it runs first (atexit is
# last-in, first-out).
atexit.register(_kill_loader_workers)


def prepare_for_workers(dataset: Dataset) -> None:
    """Build what workers would otherwise each build after forking (the fused renderer)."""
    from .synthetic import _fused
    from .synthetic.render import SyntheticImages

    base = dataset
    while hasattr(base, "base"):  # IndexedDataset over IndexedDataset over ... the source
        base = base.base
    if isinstance(base, SyntheticImages):
        _fused.kernel()


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask: what SLURM or taskset gave it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def auto_num_workers(*, processes_on_node: int, accelerated: bool) -> int:
    """``data.num_workers: null``: on a GPU, the process's share of the node's CPUs less
    one for the training loop itself (at most :data:`MAX_AUTO_WORKERS`), so rendering and
    decoding run beside the GPU's step instead of before it; on a CPU-only run, 0 (the
    cores are busy training, and a worker would only take them away)."""
    if not accelerated:
        return 0
    share = available_cpus() // max(1, processes_on_node)
    if cpus_per_task := os.environ.get("SLURM_CPUS_PER_TASK"):
        share = min(share, int(cpus_per_task))
    return max(0, min(MAX_AUTO_WORKERS, share - 1))
