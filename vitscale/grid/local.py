"""Run a grid's cells on this machine, ``workers`` at a time.

Each worker is one long-lived process (``python -m vitscale.grid.cellrun --serve``) that
runs the cells it is handed one after another, so the interpreter and library start-up is
paid once per worker, not once per cell; a cell with ``processes > 1`` runs under its own
``torchrun``. Every cell's output is appended to ``RUN_DIR/log.txt``. The cores are split
evenly between the workers (threads and loader workers: :func:`worker_env`), and so are the GPUs: worker ``i`` sees
only its own ``processes`` of them (``CUDA_VISIBLE_DEVICES``), so two cells never share
``cuda:0``.

Interrupts and dying workers are handled as docs/slurm.md's "What happens when..." table says:
an interrupt stops the running cells gently (SIGTERM: they checkpoint), then at once after
``stop_timeout`` or a second one, and raises :class:`Interrupted` (exit code 128 + the
signal); a worker that dies fails its cell only.

Trunks go first, and a branch (docs/schedules.md) is handed out only once its trunk, if
this grid runs it, has ended: it starts from the trunk's checkpoint at its cooldown start
(or, where the trunk never got there, runs alone). Workers live in sessions of their own (a
terminal's Ctrl-C reaches the grid only, which stops them in order) and never outlive the
grid, however it ends (:func:`vitscale.grid.cellrun.die_with_parent`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from .. import record as rf
from ..data.workers import CELL_CPUS_ENV
from ..kinds import GLYPHS, kind_of
from ..record import LOG
from .actions import Planned, prepare
from .cellrun import (
    ANSWER_ENV,
    EXIT_OK,
    EXIT_PREEMPTED,
    PARENT_ENV,
    describe_death,
    parse_answer,
    record_failure,
)

_CELLRUN = [sys.executable, "-m", "vitscale.grid.cellrun"]
_SERVE = [*_CELLRUN, "--serve"]
INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DEFAULT_STOP_TIMEOUT = 300.0  # seconds the cells get to finish their step and checkpoint
_REMIND_EVERY = 15.0  # seconds between "still waiting" lines
_POLL_EVERY = 2.0  # seconds between reads of the running cells' latest step
NOT_STARTED = "the cell did not start: free space and run the grid again"  # a full disk


def cell_command(
    run_dir: Path, *, processes: int, stop_timeout: float = DEFAULT_STOP_TIMEOUT
) -> list[str]:
    """The command that trains one cell in its own process(es). ``torchrun`` waits as long
    as the grid does (``stop_timeout``) for its workers to checkpoint after a stop signal
    before it kills them (its own default: 30 s)."""
    if processes == 1:
        return [*_CELLRUN, str(run_dir)]
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
        f"--shutdown-timeout={math.ceil(stop_timeout)}", "-m", "vitscale.grid.cellrun", str(run_dir),
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


@dataclass
class Interrupted(Exception):
    """The grid was stopped by a signal; every cell it ran is resumable."""

    signum: int
    stopped: list[str] = field(default_factory=list)  # cells that checkpointed and stopped
    killed: list[str] = field(default_factory=list)  # cells stopped at once (SIGKILL)
    not_started: int = 0

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        name = signal.Signals(self.signum).name
        parts = [f"{len(self.stopped)} cell(s) checkpointed and stopped"]
        if self.killed:
            parts.append(
                f"{len(self.killed)} stopped at once ({', '.join(self.killed)}: they resume "
                "from their last periodic checkpoint)"
            )
        parts.append(f"{self.not_started} not started")
        return f"interrupted by {name}: {', '.join(parts)}; run the same command again to resume"


class _Worker:
    """One cell at a time: in a persistent ``--serve`` process, or a process of its own.
    A cell under ``torchrun`` answers through a file (:data:`ANSWER_ENV`): torchrun exits
    1 whatever its workers did, a checkpointed cell's 75 included."""

    def __init__(self, env: dict[str, str], processes: int, stop_timeout: float) -> None:
        self.env, self.processes, self.stop_timeout = env, processes, stop_timeout
        self.proc: subprocess.Popen | None = None
        self.cell: Planned | None = None  # the cell it is running
        self.answer: Path | None = None  # where a cell under torchrun answers

    def start(self, item: Planned) -> None:
        """Hand ``item`` to the worker (starting its process if it has none)."""
        self.cell = item
        env = self.env | {PARENT_ENV: str(os.getpid())}
        if self.processes > 1:
            fd, answer = tempfile.mkstemp(prefix="vitscale-answer-")
            os.close(fd)
            self.answer = Path(answer)
            command = cell_command(
                item.run_dir, processes=self.processes, stop_timeout=self.stop_timeout
            )
            with open(item.run_dir / LOG, "a") as log:
                self.proc = subprocess.Popen(
                    [*_CELLRUN, "--exec", *command], stdout=log, stderr=subprocess.STDOUT,
                    env=env | {ANSWER_ENV: answer}, start_new_session=True,
                )  # fmt: skip
            return
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                _SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                bufsize=1, start_new_session=True,
            )  # fmt: skip
        with contextlib.suppress(BrokenPipeError):  # it died: wait() says how
            self.proc.stdin.write(f"{item.run_dir}\n")
            self.proc.stdin.flush()

    def wait(self) -> tuple[int, str]:
        """The cell's exit code and reason; a negative code: its process died of a signal."""
        if self.processes > 1:
            code = self.proc.wait()
            try:  # rank 0's answer; none: it died, and torchrun's exit code stands for it
                return parse_answer(self.answer.read_text()) or (code, "")
            finally:
                self.answer.unlink(missing_ok=True)
        answer = self.proc.stdout.readline()
        if not answer:  # the worker died (killed, out of memory): its exit code stands for the cell
            return self.proc.wait(), ""
        return parse_answer(answer)

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)

    def close(self) -> None:
        """End the worker's process: a serving worker exits at the end of its input."""
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.proc.stdin:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        self.proc.wait()


class _Interrupts:
    """Counts SIGINT / SIGTERM / SIGHUP while the grid runs (main thread only); a signal
    ignored when the grid started (``nohup``) stays ignored."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, object] = {}

    def _handler(self, signum, frame) -> None:
        self.received.append(signum)

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in INTERRUPTS:
                if signal.getsignal(sig) != signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


def run_local(
    planned: list[Planned],
    *,
    workers: int = 1,
    processes: int = 1,
    stop_timeout: float = DEFAULT_STOP_TIMEOUT,
) -> dict[str, int]:
    """Run every ``submit`` cell; returns ``{cell id: exit code}``. Raises
    :class:`Interrupted` after an interrupt, once every worker has ended."""
    todo = [p for p in planned if p.action == "submit"]
    todo.sort(key=lambda p: not p.cell.config.branch.keep)  # trunks first
    if workers < 1 or processes < 1:
        raise ValueError(f"workers and processes must be at least 1, got {workers} and {processes}")
    if any(kind_of(p.cell.config.data.dataset).world == GLYPHS for p in todo):
        _build_renderer()
    env = worker_env(workers=workers, processes=processes)
    workers = min(workers, len(todo))
    groups = gpu_groups(visible_gpus(), workers=workers, processes=processes) if todo else None
    pool = [
        _Worker(
            env | ({"CUDA_VISIBLE_DEVICES": ",".join(groups[i])} if groups else {}),
            processes,
            stop_timeout,
        )
        for i in range(workers)
    ]
    return _Pool(todo, pool, stop_timeout=stop_timeout).run()


def _build_renderer() -> None:
    """Build the synthetic set's C++ renderer here, once, before the workers start: its
    compile (about 30 s, once per machine type) is announced on the grid's own output, where
    it would otherwise pass silently in every cell's log while the bar stood still."""
    from ..data.synthetic import _fused

    _fused.kernel()


def worker_env(*, workers: int, processes: int) -> dict[str, str]:
    """The environment of every worker: the machine's CPUs split evenly between the
    ``workers`` cells running side by side, as threads per process (``OMP_NUM_THREADS``)
    and as each cell's share, which its processes divide for their loader workers
    (:data:`vitscale.data.workers.CELL_CPUS_ENV`)."""
    per_cell = max(1, (os.cpu_count() or 1) // workers)
    return os.environ | {
        "OMP_NUM_THREADS": str(max(1, per_cell // processes)),
        CELL_CPUS_ENV: str(per_cell),
        "PYTHONUNBUFFERED": "1",
    }


def last_step(run_dir: Path) -> int | None:
    """The ``step`` of the last complete row of ``run_dir``'s metrics.jsonl (its tail
    only); None before the first."""
    try:
        with open(run_dir / rf.METRICS, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8192))
            tail = fh.read().decode(errors="replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()[:-1] if not tail.endswith("\n") else tail.splitlines()):
        try:
            return int(json.loads(line)[rf.STEP])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def _label(item: Planned) -> str:
    return f"{item.cell.id} ({item.cell.config.model.name})"


class _Pool:
    """Hands the cells to the workers, one thread per worker, and stops them on an
    interrupt (module docstring): a first one stops handing out cells and sends the running
    ones SIGTERM, a second one (or ``stop_timeout`` later) kills them."""

    def __init__(self, todo: list[Planned], pool: list[_Worker], *, stop_timeout: float) -> None:
        self.pool, self.stop_timeout = pool, stop_timeout
        self.pending: list[Planned] = list(todo)
        self.unfinished = {item.cell.id for item in todo}  # what a branch may wait for
        # between handing out a cell and stopping; a waiting worker is woken when one ends
        self.lock = threading.Condition()
        self.stopping = threading.Event()
        self.codes: dict[str, int] = {}
        self.stopped: list[str] = []  # checkpointed and stopped
        self.killed: list[str] = []  # stopped at once
        # Progress in steps, not cells: a cell takes minutes, a step well under a second.
        self.steps = {p.cell.id: p.cell.plan.total_steps or 0 for p in todo}
        self.at: dict[str, int] = dict.fromkeys(self.steps, 0)  # steps counted per cell
        self.finished = 0
        self.failed = 0
        self.bar = tqdm(
            total=sum(self.steps.values()),
            desc=f"0/{len(todo)} cells",
            unit="step",
            disable=not todo,
            dynamic_ncols=True,
        )

    def run(self) -> dict[str, int]:
        threads = [threading.Thread(target=self._work, args=(w,), daemon=True) for w in self.pool]
        with _Interrupts() as interrupts:
            try:
                for t in threads:
                    t.start()
                self._supervise(threads, interrupts)
            finally:
                self.bar.close()
        if self.stopping.is_set():
            raise Interrupted(
                interrupts.received[0],
                stopped=[c for c in self.stopped if c not in self.killed],
                killed=self.killed,
                not_started=len(self.pending),
            )
        return self.codes

    # ------------------------------------------------------------ one worker's thread

    def _work(self, worker: _Worker) -> None:
        try:
            while (item := self._hand_out(worker)) is not None:
                code, reason = worker.wait()
                self._done(worker, item, code, reason)
        finally:
            worker.close()

    def _hand_out(self, worker: _Worker) -> Planned | None:
        """The next cell, started on ``worker``; None when there is none or the grid stops.
        A cell whose run folder cannot be written (a full disk) fails here."""
        with self.lock:
            while not self.stopping.is_set():
                if not self.pending:
                    return None
                ready = [
                    p for p in self.pending if p.cell.config.branch.trunk not in self.unfinished
                ]
                if not ready:  # every cell left waits for its trunk, running on another worker
                    self.lock.wait(timeout=1.0)
                    continue
                item = ready[0]
                self.pending.remove(item)
                try:
                    for change in prepare(item):
                        tqdm.write(f"{_label(item)}: config.json: {change}")
                    worker.start(item)
                    return item
                except OSError as e:
                    self.codes[item.cell.id] = 1
                    self.unfinished.discard(item.cell.id)
                    why = rf.describe_failure(e, kept=NOT_STARTED)
                    tqdm.write(f"{_label(item)} failed: {why}")
                    self._finish(item, failed=True)
            return None

    def _done(self, worker: _Worker, item: Planned, code: int, reason: str) -> None:
        with self.lock:
            worker.cell = None
            interrupted = self.stopping.is_set()
            self.codes[item.cell.id] = code
            self.unfinished.discard(item.cell.id)
            self.lock.notify_all()
            checkpointed = code == EXIT_PREEMPTED or (interrupted and code < 0)
            if checkpointed:
                self.stopped.append(item.cell.id)
        if checkpointed:
            if not interrupted:  # someone else signalled the cell
                tqdm.write(f"{_label(item)} stopped: {reason or 'by a signal'}")
            return  # not finished: the bar does not count it
        if code != EXIT_OK:
            if code < 0:
                reason = describe_death(code)
            if reason:
                record_failure(item.run_dir, reason)
            tqdm.write(
                f"{_label(item)} failed: {reason or 'see its log'}; log: {item.run_dir / LOG}"
            )
        with self.lock:
            self._finish(item, failed=code != EXIT_OK)

    def _finish(self, item: Planned, *, failed: bool = False) -> None:
        """A cell ended (done or failed): all its steps counted, one more cell, and the
        failures said beside the count (a bar at 100% is not a grid that succeeded)."""
        self._advance(item.cell.id, self.steps[item.cell.id])
        self.finished += 1
        self.failed += failed
        failures = f" ({self.failed} failed)" if self.failed else ""
        self.bar.set_description(
            f"{self.finished}/{len(self.steps)} cells{failures}", refresh=False
        )
        self.bar.refresh()

    def _advance(self, cell_id: str, step: int) -> None:
        step = min(step, self.steps[cell_id])
        if step > self.at[cell_id]:
            self.bar.update(step - self.at[cell_id])
            self.at[cell_id] = step

    def _poll_steps(self) -> None:
        """Each running cell's latest logged step (its metrics.jsonl's last row)."""
        with self.lock:
            for w in self._busy():
                if w.cell is not None and (step := last_step(w.cell.run_dir)) is not None:
                    self._advance(w.cell.cell.id, step)

    # ------------------------------------------------------------ the main thread

    def _busy(self) -> list[_Worker]:
        return [w for w in self.pool if w.cell is not None]

    def _supervise(self, threads: list[threading.Thread], interrupts: _Interrupts) -> None:
        deadline = reminded = polled = 0.0
        at_once = False  # the workers were killed
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=0.2)
            if time.monotonic() - polled >= _POLL_EVERY:
                polled = time.monotonic()
                self._poll_steps()
            if interrupts.received and not self.stopping.is_set():
                deadline = self._stop_gently(interrupts.received[0])
                reminded = time.monotonic()
            if not self.stopping.is_set() or at_once:
                continue
            now = time.monotonic()
            if len(interrupts.received) > 1 or now > deadline:
                self._stop_at_once(second=len(interrupts.received) > 1)
                at_once = True
            elif now - reminded >= _REMIND_EVERY:
                reminded = now
                names = ", ".join(_label(w.cell) for w in self._busy() if w.cell)
                tqdm.write(
                    f"still waiting for {names} to checkpoint ({deadline - now:.0f} s left; "
                    "Ctrl-C again to stop at once)"
                )

    def _stop_gently(self, signum: int) -> float:
        """No new cells; SIGTERM to the running ones (they checkpoint on it); returns the
        moment they are stopped at once if they have not stopped by then."""
        with self.lock:
            self.stopping.set()
            self.lock.notify_all()
            running = self._busy()
            for w in running:
                w.signal(signal.SIGTERM)
        tqdm.write(
            f"{signal.Signals(signum).name}: no new cells; waiting up to "
            f"{self.stop_timeout:.0f} s for {len(running)} running cell(s) to checkpoint and "
            "stop (Ctrl-C again to stop them at once)"
        )
        return time.monotonic() + self.stop_timeout

    def _stop_at_once(self, *, second: bool) -> None:
        with self.lock:
            running = self._busy()
            self.killed += [w.cell.cell.id for w in running]
            for w in running:
                w.signal(signal.SIGKILL)
        why = "a second interrupt" if second else f"no stop within {self.stop_timeout:.0f} s"
        tqdm.write(f"{why}: {len(running)} cell(s) stopped at once")
