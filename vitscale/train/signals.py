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
Between sync steps the training loop agrees without waiting (:class:`StopCheck`): a sum
started about once a second is read when the next starts, so its round trip (2(N-1) hops
for N ranks, tens of milliseconds at 64: benchmarks/stop_check.py) overlaps the steps in
between instead of adding to each; a stop comes up to about two seconds later there.

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
# Between sync steps, how often the processes agree on a stop: at 64 ranks on loopback a
# sum waited for took 50 ms, five small steps of 10 ms (benchmarks/RESULTS.md, "Agreeing on
# a stop signal"); one a second, read a second later, delays a stop by about 2 s, in a
# signal window of a minute or more.
STOP_CHECK_S = 1.0


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


class StopCheck:
    """The training loop's agreement on ``flag`` over ``group``: at every sync step, and
    between them a sum started about every :data:`STOP_CHECK_S` seconds and read when the
    next one starts, so that its round trip overlaps the steps between. The sum carries
    each process's seconds since the last one, from which every process computes the same
    number of steps to the next; every process makes the same calls in the same order, so
    all read the same sums. A signal is acted on within about ``2 * STOP_CHECK_S``, or at
    the next sync step."""

    def __init__(self, flag: PreemptionFlag, group) -> None:
        self.flag, self.group = flag, group
        self._pending = None  # (the sum's tensor, the steps it covers, its work)
        self._since = 0  # steps since the last sum started or was read
        self._every = 1  # steps from one sum to the next
        self._started = time.perf_counter()
        if group is not None:
            import torch.distributed as dist

            self._world = dist.get_world_size(group)

    def after_step(self, *, sync: bool = False) -> bool:
        """Whether to stop now. ``sync``: the host waits for the device at this step
        anyway, so the agreement is made and read at once."""
        if self.group is None:
            return self.flag.agreed(None)
        import torch
        import torch.distributed as dist

        self._since += 1
        if not sync and self._since < self._every:
            return False
        stop = self.close()
        now = time.perf_counter()
        if stop or sync:
            self._since, self._started = 0, now
            return stop or self.flag.agreed(self.group)
        sums = torch.tensor([float(self.flag.requested), now - self._started], dtype=torch.float64)
        self._pending = sums, self._since, dist.all_reduce(sums, group=self.group, async_op=True)
        self._since, self._started = 0, now
        return False

    def close(self) -> bool:
        """The pending sum's answer (False if none), waited for: nothing is left in flight."""
        if self._pending is None:
            return False
        (sums, steps, work), self._pending = self._pending, None
        work.wait()
        requested, seconds = sums.tolist()
        step_s = seconds / self._world / steps  # the processes' mean
        self._every = max(1, round(STOP_CHECK_S / max(step_s, 1e-6)))
        return requested > 0


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
