"""Stop signals: SIGUSR1 (SLURM's ``--signal`` before a time limit or preemption),
SIGTERM (what SLURM sends at the limit, and what the local executor forwards when it is
interrupted) and SIGINT (Ctrl-C). The handler only raises a flag; the training loop
checkpoints at the next step boundary, where the state is consistent, and stops.

A second Ctrl-C stops at once (``KeyboardInterrupt``): nothing is written, the last
complete checkpoint stays what a rerun resumes from. "Second" means at least
:data:`SECOND_INTERRUPT_S` after the first: ``torchrun`` forwards the terminal's SIGINT to
its workers, which therefore see one Ctrl-C twice within milliseconds. A SIGINT that was
ignored when the process started (``nohup``, a background job) stays ignored.

The processes of a run must stop at the same step, so after every step they agree on the
flag (:meth:`PreemptionFlag.agreed`): a sum of one number over a gloo group, on the CPU,
so the agreement never waits for the GPU (a NaN check does, and waits for the log step).

The flag is installed for the whole of a run, before any loader worker is forked: SLURM
signals the workers too, and they ignore the signals (:mod:`vitscale.data.workers`).
"""

from __future__ import annotations

import datetime as dt
import signal
import threading
import time

from ..data.workers import STOP_SIGNALS

SECOND_INTERRUPT_S = 1.0


def agreement_group(*, timeout: dt.timedelta | None = None):
    """The process group :meth:`PreemptionFlag.agreed` sums over: the default group when
    it is gloo (CPU runs), else a gloo group beside NCCL, which waits as long as the
    default group does (``timeout``: :func:`vitscale.train.runtime.process_group_timeout`;
    gloo's own 30 min would end a run whose rank 0 writes a longer checkpoint while the
    others agree on a stop); None for a single process. Every process must call it
    (creating a group is collective)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    if dist.get_backend() == "gloo":
        return dist.group.WORLD
    return dist.new_group(backend="gloo", timeout=timeout)


class PreemptionFlag:
    """Context manager: ``flag.requested`` turns True after SIGUSR1, SIGTERM or SIGINT."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_name: str | None = None
        self._interrupted_at: float | None = None  # the first SIGINT's time
        self._previous: dict[int, object] = {}

    def agreed(self, group=None) -> bool:
        """Whether any process of ``group`` (:func:`agreement_group`) was signalled; every
        process gets the same answer. A CPU collective: the GPU is not waited for."""
        if group is None:
            return self.requested
        import torch
        import torch.distributed as dist

        flag = torch.tensor([int(self.requested)])
        dist.all_reduce(flag, group=group)
        return bool(flag.item())

    def _handler(self, signum, frame) -> None:
        if signum == signal.SIGINT:
            now = time.monotonic()
            if (
                self._interrupted_at is not None
                and now - self._interrupted_at >= SECOND_INTERRUPT_S
            ):
                raise KeyboardInterrupt  # the second Ctrl-C: stop at once
            if self._interrupted_at is None:
                self._interrupted_at = now
        if not self.requested:
            self.requested = True
            self.signal_name = signal.Signals(signum).name

    def __enter__(self) -> PreemptionFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                if sig == signal.SIGINT and signal.getsignal(sig) == signal.SIG_IGN:
                    continue  # ignored by whoever started us: leave it so
                self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


class Preempted(Exception):
    """Training stopped at a checkpoint because a preemption signal arrived."""

    def __init__(self, step: int, signal_name: str | None, *, during: str | None = None) -> None:
        where = f"{during} " if during else ""
        super().__init__(
            f"preempted by {signal_name or 'a signal'}: checkpointed {where}at step {step}"
        )
        self.step = step
        self.signal_name = signal_name
        self.during = during
