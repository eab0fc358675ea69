"""Run one cell of a grid in its run folder: the unit every executor launches.

    python -m vitscale.grid.cellrun RUNS/<grid>/<cell id>           # one process
    torchrun --standalone --nproc_per_node 2 -m vitscale.grid.cellrun RUNS/<grid>/<cell id>
    python -m vitscale.grid.cellrun --serve                          # cells named on stdin

The cell's resolved config is the run folder's ``config.json`` (written at submission).
An exclusive lock on ``<run>/.lock`` (held by the rank-0 process while it trains) makes
sure two submissions racing for the same cell cannot both run it: the second one sees the
lock and exits. A finished cell is never run again. Started by the local executor, a
process never outlives the grid that started it (:func:`die_with_parent`) and then exits
quietly: an answer nobody reads is dropped, not reported with a traceback.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from .. import record as rf
from ..errors import DiskFullError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BUSY = 0  # a live process of this node holds the cell: nothing to do here
EXIT_PREEMPTED = 75  # checkpointed after a preemption signal; run again to resume
# How long a cell waits for a lock held by a process it cannot see alive (another node's,
# or a dead one's): on Lustre and NFS a dead node's lock outlives it by its lease (about
# 90-100 s), and a requeued job that found it held and left would leave the cell unrun.
LOCK_WAIT_S = 240.0

PARENT_ENV = "VITSCALE_PARENT_PID"  # set by the local executor: die with that process
TORCHRUN_WORKER_ENV = "TORCHELASTIC_RUN_ID"  # set by torchrun in its workers' environment
# Set by the local executor for a cell under torchrun: the file rank 0 answers in.
ANSWER_ENV = "VITSCALE_ANSWER_FILE"
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have the kernel send ``sig`` to this process when the process named by
    ``VITSCALE_PARENT_PID`` (its parent) ends, by any means. The variable is removed so
    that this process's own children do not inherit it (``torchrun``'s workers are told
    to die with ``torchrun`` in their own: :func:`main`)."""
    parent = os.environ.pop(PARENT_ENV, None)
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != int(parent):  # it died before the line above: too late to be told
        os.kill(os.getpid(), sig)


# What flock(2) fails with where the filesystem has no locks (Lustre mounted without
# ``-o flock``, some NFS setups): the cell then runs unlocked, with a warning, rather than
# failing rank 0 while the other ranks wait for it in a collective.
_NO_LOCKS = frozenset({errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL})


def _holder(run_dir: Path) -> str:
    """Who holds the cell's lock, as its holder wrote it: "node pid"."""
    with contextlib.suppress(OSError):
        return (run_dir / rf.LOCK).read_text().strip()
    return ""


def _alive_here(holder: str) -> bool:
    """True when ``holder`` names a process of this node that is running."""
    node, _, pid = holder.partition(" ")
    if node != os.uname().nodename or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process, alive
        pass
    return True


def _wait_for_lock(fd: int, run_dir: Path, holder: str, wait_s: float) -> bool:
    """Try the lock once a second for ``wait_s`` seconds; True once held."""
    print(
        f"{run_dir.name}: its lock is held by {holder or 'an unnamed process'}, not a live "
        f"process of this node; waiting up to {wait_s:.0f} s for it (a dead node's lock "
        "outlives it on a shared filesystem)",
        flush=True,
    )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))
        with contextlib.suppress(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
    return False


@contextlib.contextmanager
def cell_lock(run_dir: Path, *, blocking: bool = False, wait_s: float = 0.0) -> Iterator[bool]:
    """Hold the run folder's lock; yields False when someone else holds it, True when this
    process holds it or the filesystem has no locks (said once). ``wait_s``: how long to
    wait for a holder that is not a live process of this node (:data:`LOCK_WAIT_S`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / rf.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            held = True
        except BlockingIOError:
            holder = _holder(run_dir)
            if not wait_s or _alive_here(holder) or not _wait_for_lock(fd, run_dir, holder, wait_s):
                yield False
                return
            held = True
        except OSError as e:
            if e.errno not in _NO_LOCKS:
                raise
            _warn_no_locks(run_dir.parent, e.strerror)
            held = False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.uname().nodename} {os.getpid()}\n".encode())
        try:
            yield True
        finally:
            if held:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@functools.cache  # once per runs folder
def _warn_no_locks(runs: Path, reason: str) -> None:
    print(
        f"warning: {runs}: the filesystem has no file locks (flock: "
        f"{reason}; on Lustre, mount with -o flock): cells run unlocked, so two "
        "grids started on the same runs folder could run one cell twice",
        file=sys.stderr,
    )


def is_locked(run_dir: Path) -> bool:
    """True while a process holds the cell (it is running)."""
    if not (run_dir / rf.LOCK).exists():
        return False
    with cell_lock(run_dir) as acquired:
        return not acquired


def is_done(run_dir: Path) -> bool:
    path = run_dir / rf.RESULT
    if not path.is_file():
        return False
    try:
        return rf.read_json(path).get("status") == rf.STATUS_DONE
    except (OSError, ValueError):
        return False


def describe_death(code: int) -> str:
    """What a process's negative exit code (killed by a signal) says, in one line."""
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    hint = " (the kernel's out-of-memory killer sends it too: see `dmesg`)" if code == -9 else ""
    return f"the process running this cell was killed by {name}{hint}"


def record_failure(run_dir: Path, reason: str, *, world: int = 1, since: float = 0.0) -> None:
    """Write a failed result.json for a cell whose processes could not write one (killed,
    aborted inside a collective, their node lost), so that the grid counts the attempt
    against its retries instead of submitting the cell again as merely interrupted. The
    ranks' own notes written since ``since`` (time.time()) name the cause when there are
    any (:class:`vitscale.record.RankFailure`); ``reason`` is what the caller saw."""
    path = run_dir / rf.RESULT
    try:
        if path.is_file() and rf.read_json(path).get("status") == rf.STATUS_FAILED:
            return  # the trainer recorded its own failure
        notes = rf.RankFailure.read_all(run_dir, world=world, since=since)
        if notes:
            reason = f"{rf.RankFailure.first(notes).describe()} (then: {reason})"
        config = rf.read_json(run_dir / rf.CONFIG)
        last = None
        if (run_dir / rf.METRICS).is_file():
            last = max((r[rf.STEP] for r in rf.iter_metrics(run_dir / rf.METRICS)), default=None)
        failed_step = None if last is None else last + 1
        rf.RunResult.failure(config, error=reason, failed_step=failed_step).write(run_dir)
    except (OSError, ValueError):  # a full disk: the executor's own output still says it
        pass


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def _agree_with_rank0(acquired: bool, config: dict) -> bool:
    """Every process of a multi-process cell follows rank 0's answer about the lock."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return acquired
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    from ..flops import count
    from ..train.runtime import process_group_timeout, use_cpu

    # Joins the process group train() uses, with the timeout its checkpoints need.
    try:
        params = count(config["model"]["name"], config["data"]["image_size"]).params
    except (KeyError, TypeError, ValueError):  # train() reports a bad config in its own words
        params = 0
    PartialState(cpu=use_cpu(), timeout=process_group_timeout(params))
    return bool(broadcast_object_list([acquired], from_process=0)[0])


def run_cell(run_dir: str | Path) -> int:
    """Train the cell in ``run_dir`` unless it is done or held by another process."""
    return _run_cell(Path(run_dir))[0]


def answer_line(code: int, reason: str) -> str:
    """How a cell answers the local executor: its exit code, a tab, the reason in one line."""
    return f"{code}\t{' '.join(reason.split())}\n"


def parse_answer(line: str) -> tuple[int, str] | None:
    """:func:`answer_line` read back; None when there is none (the cell's process died)."""
    code, _, reason = line.rstrip("\n").partition("\t")
    return (int(code), reason) if code.lstrip("-").isdigit() else None


def _answer(code: int, reason: str) -> None:
    """Rank 0's answer for a grid that launched this cell under torchrun, which reports
    only 1 when any worker exits non-zero: a checkpointed cell (75) would read as failed."""
    path = os.environ.get(ANSWER_ENV)
    if path and _rank() == 0:
        with contextlib.suppress(OSError):
            rf.write_text_atomic(path, answer_line(code, reason))


def _run_cell(run_dir: Path) -> tuple[int, str]:
    """``(exit code, why in one line)``: the reason is empty when the cell is done."""
    from ..config import ConfigError
    from ..plan import plan
    from ..train import Preempted, train
    from ..train.checkpoint import CheckpointError

    if is_done(run_dir):
        print(f"{run_dir.name}: already done", flush=True)
        return EXIT_OK, ""
    config = rf.read_json(run_dir / rf.CONFIG)
    # Only rank 0 takes the lock: the other ranks of a multi-process cell follow it.
    lock = cell_lock(run_dir, wait_s=LOCK_WAIT_S) if _rank() == 0 else contextlib.nullcontext(True)
    with lock as acquired:
        if not _agree_with_rank0(acquired, config):
            return _busy(run_dir)
        try:
            result = train(plan(config, num_processes=_world()), run_dir)
        except (ConfigError, CheckpointError, DiskFullError) as e:
            _say(f"{run_dir.name}: {e}", file=sys.stderr)
            return EXIT_FAILED, str(e)
        except Preempted as e:
            _say(f"{run_dir.name}: {e}")
            return EXIT_PREEMPTED, str(e)
    if result.done:
        return EXIT_OK, ""
    return EXIT_FAILED, str(result.error or "failed")


def _busy(run_dir: Path) -> tuple[int, str]:
    """The answer when the lock stayed held: nothing to do if a live process of this node
    holds it; otherwise a failure, said with what to check, never a silent 0 that SLURM
    would show as COMPLETED while the cell waits for someone to resubmit it."""
    holder = _holder(run_dir)
    if _alive_here(holder):
        print(f"{run_dir.name}: another process is running this cell; leaving it alone", flush=True)
        return EXIT_BUSY, "another process is running this cell"
    why = (
        f"its lock ({run_dir / rf.LOCK}) is still held by {holder or 'an unnamed process'} "
        f"after {LOCK_WAIT_S:.0f} s: if no process of that node runs this cell (squeue, ps), "
        "delete the lock file and run the grid again"
    )
    _say(f"{run_dir.name}: {why}", file=sys.stderr)
    return EXIT_FAILED, why


def _say(line: str, *, file=None) -> None:
    """Print a line of the cell's log; on a full disk there is nowhere to say it."""
    with contextlib.suppress(OSError):
        print(line, file=file or sys.stdout, flush=True)


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors, so native code's output
    too) to ``path`` for the duration, appending."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


class _Stop(BaseException):
    """A stop signal while no cell trains (between cells, or before the trainer handles
    signals): the worker ends quietly."""


def _stop(signum, frame) -> None:
    raise _Stop


def _ending() -> None:
    """This process has answered and is exiting: a stop signal now (the kernel's word that
    the grid, which read the answer, has ended; a late Ctrl-C) has nothing left to stop,
    and raised inside the interpreter's exit it would print a traceback from whichever
    finaliser it interrupts. Ignored from here on."""
    from ..data.workers import STOP_SIGNALS  # a worker has torch loaded already

    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def serve() -> int:
    """Run the cells named on stdin, one path per line, one after another in this process;
    answer each with a line of stdout: its exit code, a tab and the reason in one line.

    The local executor's workers: a process per cell would pay the interpreter and library
    start-up (about 4 s: torch, its optimiser's compiler hooks) for every cell, a large
    share of a CPU demo cell. Each cell's output goes to its own ``log.txt``; a cell that
    raises is reported failed (exit 1) and the next one runs. A stop signal ends the
    worker: while a cell trains, after it checkpoints (``EXIT_PREEMPTED``), otherwise at
    once. An answer the grid can no longer read (it died) ends the worker too, silently.
    """
    import traceback

    from ..data.workers import STOP_SIGNALS

    report = os.dup(1)  # the answers; anything else printed between cells goes nowhere
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop)  # the trainer handles them itself while a cell trains
    try:
        for line in sys.stdin:
            run_dir = Path(line.strip())
            try:
                with _output_to(run_dir / rf.LOG):
                    try:
                        code, reason = _run_cell(run_dir)
                    except Exception as e:  # noqa: BLE001 - in the cell's log, then the next cell
                        with contextlib.suppress(OSError):
                            traceback.print_exc()
                        code, reason = EXIT_FAILED, rf.describe_failure(e)
            except OSError as e:  # its log cannot even be opened (a full disk, a bad path)
                code, reason = EXIT_FAILED, rf.describe_failure(e)
            try:
                os.write(report, answer_line(code, reason).encode())
            except OSError:  # BrokenPipeError: the grid is gone
                return EXIT_PREEMPTED if code == EXIT_PREEMPTED else code
            if code == EXIT_PREEMPTED:  # stopped by a signal: no next cell
                return EXIT_PREEMPTED
    except (_Stop, KeyboardInterrupt):
        return EXIT_PREEMPTED
    finally:
        _ending()
    return EXIT_OK


def main(argv: list[str]) -> int:
    # torchrun's workers (sessions of their own, which the grid's signals do not reach) die
    # at once with a torchrun killed at once: one stopped gently stops them itself.
    die_with_parent(signal.SIGKILL if TORCHRUN_WORKER_ENV in os.environ else signal.SIGTERM)
    if argv == ["--serve"]:
        return serve()
    if argv[:1] == ["--exec"] and len(argv) > 1:  # torchrun, told to die with the grid first
        os.environ[PARENT_ENV] = str(os.getpid())  # ... and its workers with it
        os.execvp(argv[1], argv[1:])
    if len(argv) != 1:
        sys.exit("usage: python -m vitscale.grid.cellrun RUN_DIR | --serve | --exec COMMAND...")
    try:
        code, reason = _run_cell(Path(argv[0]))
        _answer(code, reason)
        return code
    finally:
        from ..train.runtime import shutdown

        shutdown()  # the process group, last (NCCL warns, and may hang at exit, otherwise)
        _ending()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
