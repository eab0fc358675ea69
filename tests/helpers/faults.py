"""The fault-injection suite's helpers (tests/faults/): one tiny grid, a grid or trainer
started as a terminal starts it, the processes it leaves behind, run-folder state, and a
disk filled to the last byte.

Every fault is a real process and a real signal or condition: the grid and the trainer run
as the CLI runs them, signals come from outside (``kill``), the disk is a size-limited
tmpfs. The one aid is ``tests/faults/hooks/sitecustomize.py``, which can stop a trainer
halfway through writing a checkpoint, or hold it between two steps until a stop signal
comes, so that a signal lands there and not by luck.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from vitscale import record as rf
from vitscale.train import checkpoint

from .configs import tiny_config
from .runs import rows_of, weights

HOOKS = Path(__file__).resolve().parents[1] / "faults" / "hooks"


STEPS = 40  # per cell of the first block: room for five interruptions of at most 5 steps


SHORT = 16  # the third cell: it only needs to start late and finish


WORKERS = 2


THREADS = str(max(1, (os.cpu_count() or 1) // WORKERS))  # what the grid gives each worker


# Exec the command with SIGINT at its default disposition, as an interactive shell starts a
# foreground job (a background job of a non-interactive shell, which is what a plain
# Popen from a test may be, inherits SIGINT ignored and hides what Ctrl-C does).
_AS_A_TERMINAL_DOES = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def cell_config(seed: int = 0) -> dict:
    """A cell of the smallest ViT (about 2 s on a CPU core) that checkpoints every 4
    steps and logs every step; no evaluation (the faults are about training and its
    files). Seed 2 is the short third cell."""
    return tiny_config(
        seed=seed,
        model={"name": "ViT-Femto/8"},
        train={"steps": SHORT if seed == 2 else STEPS, "checkpoint_every": 4, "eval_every": None},
        eval={"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
    )


def write_grid(folder: Path) -> Path:
    grid = {
        "name": "faults",
        "base": cell_config(),
        "blocks": [
            {"name": "long", "axes": {"seed": [0, 1]}},
            {"name": "short", "set": {"seed": 2, "train.steps": SHORT}},
        ],
        "retries": 1,
    }
    path = folder / "faults.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


def env(**extra: str) -> dict[str, str]:
    """The environment of a fault test's processes: no GPU handed out, the sitecustomize
    hook importable, the threads a grid worker gets (so results match the reference)."""
    path = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
    return os.environ | {
        "PYTHONPATH": path,
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": THREADS,
        "WANDB_SILENT": "true",
        **extra,
    }


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` alive now (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


TOKEN = "VITSCALE_FAULT_TOKEN"  # in the environment of every process a test starts


def tagged(token: str) -> list[int]:
    """Every process alive now that carries ``token`` in its environment (from /proc):
    what one command started, orphans and their children included, whatever their session
    or parent."""
    needle = f"{TOKEN}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
        except OSError:
            continue
        if alive(int(entry)):
            found.append(int(entry))
    return found


def left_behind(token: str, timeout: float = 30) -> list[str]:
    """The processes started under ``token`` still alive after ``timeout`` seconds, each
    as ``pid command`` (none, we hope)."""
    return [f"{pid} {_command(pid)}" for pid in wait_gone(tagged(token), timeout)]


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float = 60) -> list[int]:
    """The ones of ``pids`` still alive after ``timeout`` seconds (none, we hope)."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def wait_for(condition: Callable[[], object], timeout: float = 120, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
    return value


@dataclass
class Foreground:
    """A ``vitscale`` command started as a terminal starts a foreground job: in a process
    group of its own (``killpg`` = Ctrl-C), SIGINT at its default disposition, its output
    in files under ``logs``."""

    proc: subprocess.Popen
    out: Path
    err: Path
    token: str  # in the environment of the command and of every process it starts
    started: int  # time.time_ns() just before it started

    @classmethod
    def start(cls, logs: Path, *args: str, **env_extra: str):
        logs.mkdir(exist_ok=True)
        n = len(list(logs.glob("*.out")))
        out, err = logs / f"{n}.out", logs / f"{n}.err"
        command = [sys.executable, "-m", "vitscale.cli", *args]
        token = uuid.uuid4().hex
        started = time.time_ns()
        with open(out, "w") as o, open(err, "w") as e:
            proc = subprocess.Popen(
                [sys.executable, "-c", _AS_A_TERMINAL_DOES, *command],
                stdout=o,
                stderr=e,
                env=env(**env_extra, **{TOKEN: token}),
                start_new_session=True,
            )
        return cls(proc, out, err, token, started)

    def interrupt(self, signum: int, *, group: bool) -> None:
        """``group``: the whole foreground group, as Ctrl-C; else the command's process."""
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)

    def left_behind(self) -> list[str]:
        """What outlived the command: workers, trainers, W&B services, orphans."""
        return left_behind(self.token)

    def finish(self, timeout: float = 300) -> tuple[int, str]:
        code = self.proc.wait(timeout=timeout)
        return code, self.out.read_text() + self.err.read_text()


@dataclass
class GridRun(Foreground):
    """``vitscale grid`` of the fault grid on the local executor, as a terminal runs it."""

    runs: Path | None = None

    @classmethod
    def start(cls, grid: Path, runs: Path, *args: str, **env_extra: str) -> GridRun:
        command = ["grid", str(grid), "--executor", "local", "--workers", str(WORKERS)]
        started = Foreground.start(
            runs.parent / "grid-logs", *command, "--runs", str(runs), *args, **env_extra
        )
        return cls(**vars(started), runs=runs)

    def cells(self) -> list[Path]:
        return sorted(p for p in (self.runs / "faults").glob("*") if p.is_dir())

    def rows(self) -> int:
        """metrics.jsonl rows written so far, all cells."""
        return sum(
            len(list(rf.iter_metrics(c / rf.METRICS)))
            for c in self.cells()
            if (c / rf.METRICS).is_file()
        )

    def workers(self) -> list[int]:
        return children(self.proc.pid)

    def when_training(self, rng: random.Random, rows: int = 2, *, every: tuple = ()) -> None:
        """Return at a random moment once the cells have logged ``rows`` more rows, and
        each cell of ``every`` a row in this run (it trains: a stop signal now finds the
        trainer, which checkpoints, not a worker still starting, which just exits)."""
        start = self.rows()
        wait_for(lambda: self.rows() >= start + rows, what="the cells to train")
        for cell in every:
            wait_for(lambda c=cell: _logged_since(c, self.started), what=f"{cell.name} to train")
        time.sleep(rng.uniform(0, 0.2))


def _logged_since(run_dir: Path, since_ns: int) -> bool:
    """A row of ``run_dir`` written after ``since_ns``."""
    path = run_dir / rf.METRICS
    try:
        return path.stat().st_mtime_ns > since_ns and last_logged(run_dir) is not None
    except FileNotFoundError:
        return False


def locked_by(run_dir: Path) -> int | None:
    """The pid of the process holding the cell (its lock file names it)."""
    try:
        return int((run_dir / rf.LOCK).read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def last_logged(run_dir: Path) -> int | None:
    steps = [r[rf.STEP] for r in rf.iter_metrics(run_dir / rf.METRICS)]
    return steps[-1] if steps else None


def checkpoint_steps(run_dir: Path) -> list[int]:
    return [rf.checkpoint_step(p) for p in checkpoint.complete(run_dir / rf.CHECKPOINTS)]


def no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text and "BrokenPipeError" not in text, text[-3000:]


def cli(*args: str, timeout: float = 300, **env_extra: str) -> subprocess.CompletedProcess:
    """One ``vitscale`` command in a session of its own, as a terminal runs it; asserts
    that no process it started outlives it."""
    token = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-m", "vitscale.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(**env_extra, **{TOKEN: token}),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        left = left_behind(token, timeout=0)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"vitscale {' '.join(args)} still running: {left}") from None
    assert left_behind(token) == [], err[-3000:]
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def assert_same_cell(run: Path, reference: Path) -> None:
    """The run ended where the uninterrupted one did: same weights bit for bit, same
    logged rows, same result."""
    ours, theirs = rf.read_json(run / rf.RESULT), rf.read_json(reference / rf.RESULT)
    assert ours["status"] == theirs["status"] == rf.STATUS_DONE, ours["error"]
    for key in ("steps", "examples_seen", "pretrain_exaflops", "best"):
        assert ours[key] == theirs[key], key
    assert rows_of(run) == rows_of(reference)
    a, b = weights(run), weights(reference)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def fill(folder: Path) -> Path:
    """Fill the filesystem of ``folder`` to the last byte; returns the filler file."""
    filler = folder / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as fh:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    fh.write(chunk[:size])
            except OSError:
                continue
    return filler


def copy_cell(source: Path, dest: Path, *, without: tuple[str, ...] = ()) -> Path:
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(rf.LOCK, *without))
    return dest


def read_status(runs: Path) -> dict[str, dict]:
    """``vitscale status --json`` per cell id (in this process: it only reads files)."""
    import contextlib
    import io

    from vitscale.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["status", str(runs), "--json"]) == 0
    return {row["cell_id"]: row for row in json.loads(out.getvalue())["cells"]}
