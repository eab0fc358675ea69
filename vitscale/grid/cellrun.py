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
from collections.abc import Iterator
from pathlib import Path

from .. import record as rf
from ..errors import DiskFullError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BUSY = 0  # another process holds the cell: nothing to do here
EXIT_PREEMPTED = 75  # checkpointed after a preemption signal; run again to resume

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


@contextlib.contextmanager
def cell_lock(run_dir: Path, *, blocking: bool = False) -> Iterator[bool]:
    """Hold the run folder's lock; yields False (without waiting) when someone else holds
    it, True when this process holds it or the filesystem has no locks (said once)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / rf.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            held = True
        except BlockingIOError:
            yield False
            return
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
    with cell_lock(run_dir) if _rank() == 0 else contextlib.nullcontext(True) as acquired:
        if not _agree_with_rank0(acquired, config):
            print(
                f"{run_dir.name}: another process is running this cell; leaving it alone",
                flush=True,
            )
            return EXIT_BUSY, "another process is running this cell"
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
