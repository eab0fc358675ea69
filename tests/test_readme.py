"""Every command in README.md and the documentation's pages (docs/*.md) runs, in a
sandbox, against a reduced demo.

The README's `vitscale` lines are taken as written and changed only where a test must:
run folders and figure folders go to a temporary directory, `runs/<grid>` of a grid that
is not run here points at the reduced demo's runs, training is cut to a few steps
(the demo grid in a reduced form), and SLURM submission to a cluster that is not here is
checked with `--dry-run` (real submission is tests/test_slurm_grid.py). `make` targets
and scripts must exist.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from vitscale import record as rf
from vitscale.cli import build_parser, main
from vitscale.grid.spec import load_grid

from .helpers import run_folders as fixtures

ROOT = Path(__file__).resolve().parents[1]
FRONT = (ROOT / "README.md").read_text()
# The README is the front page; the rest of what it said is in the docs site's pages.
PAGES = sorted((ROOT / "docs").glob("*.md"))
README = "\n".join([FRONT, *(p.read_text() for p in PAGES)])
# The demo grid in a reduced form: the same cells' shape, seconds each.
REDUCED = [
    "--set", "train.steps=2", "--set", "optim.warmup_steps=1", "--set", "train.eval_every=1",
    "--set", "eval.fewshot.test_examples=40",
    "--set", "eval.upstream.examples=40", "--set", "eval.finetune.steps=1",
    "--set", "eval.finetune.test_examples=40", "--set", "wandb.mode=disabled",
]  # fmt: skip


def _commands(prefix: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith(prefix)]


VITSCALE = _commands("vitscale ")


def test_readme_starts_with_the_two_commands():
    first = re.search(r"```bash\n(.*?)```", FRONT, flags=re.S).group(1).splitlines()
    assert [line.split("#")[0].strip() for line in first] == ["make demo", "make test"]
    targets = re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), flags=re.M)
    for line in _commands("make "):
        assert line.split()[1] in targets
    assert "make demo-slurm" in README and "demo-slurm" in targets


@pytest.mark.parametrize("line", VITSCALE)
def test_every_command_line_parses(line):
    build_parser().parse_args(shlex.split(line)[1:])


def _sandboxed(argv: list[str], tmp: Path) -> list[str]:
    out = []
    for arg in argv:
        if arg.startswith("runs/fig5_compute"):  # a full-scale grid: fixture runs of its shape
            arg = str(tmp / "fixture")
        elif arg.startswith("runs/") or arg.startswith("figures/"):
            arg = str(tmp / arg)
        elif arg.startswith("shards:runs/"):  # a sharded set the README's lines write
            arg = f"shards:{tmp / arg.removeprefix('shards:')}"
        out.append(arg)
    command = out[0]
    if command == "grid" and "--executor" in out:
        if out[out.index("--executor") + 1] == "slurm":
            i = out.index("--executor")
            out[i : i + 2] = ["--dry-run"]
        else:  # later --set win: the README's own (a "quick try") are reduced too
            out += ["--runs", str(tmp / "runs"), *REDUCED]
    if command == "train":
        out += ["--set", "train.steps=3", "--set", "optim.warmup_steps=1"]
    if command == "wandb" and out[1] in ("dashboard", "report") and "--dry-run" not in out:
        out.append("--dry-run")  # no W&B server here: what would be sent is built and printed
    return out


def _needs_server(argv: list[str]) -> bool:
    """Lines that read W&B online (no --dry-run exists): here they must fail cleanly."""
    return argv[0] == "figures" and "--wandb" in argv


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """The README's demo grid line, reduced, run once: the run folders the rest read."""
    tmp = tmp_path_factory.mktemp("readme")
    demo = next(line for line in VITSCALE if line.startswith("vitscale grid experiments/demo.yaml"))
    argv = _sandboxed(shlex.split(demo)[1:], tmp)
    assert main(argv) == 0
    results = list((tmp / "runs" / "demo").glob(f"*/{rf.RESULT}"))
    cells = load_grid(ROOT / "experiments" / "demo.yaml").cells
    assert len(results) == len(cells) == 8
    assert all(rf.read_json(p)["status"] == rf.STATUS_DONE for p in results)
    # Run folders of a compute study's shape (tests/helpers/run_folders.py) for the lines about
    # full-scale grids, which cannot train here.
    fixtures.write_runs(tmp / "fixture", cells=64, steps=(40, 80, 160, 320))
    # The sharded set the README's data lines read (running the line again resumes it: a no-op).
    for line in _commands("vitscale data shard "):
        assert main(_sandboxed(shlex.split(line)[1:], tmp)) == 0
    return tmp


@pytest.mark.parametrize("line", VITSCALE)
def test_every_command_runs(line, sandbox, capsys):
    """The demo's own lines find their cells done (the fixture ran them); the rest run."""
    argv = _sandboxed(shlex.split(line)[1:], sandbox)
    if _needs_server(argv):  # no key, no server: one line, exit code 2 (tests/test_wandb_views.py)
        with pytest.MonkeyPatch.context() as mp:
            mp.delenv("WANDB_API_KEY", raising=False)
            mp.setenv("NETRC", str(sandbox / "no-netrc"))
            mp.setenv("WANDB_CONFIG_DIR", str(sandbox / "no-wandb-config"))
            assert main(argv) == 2
        assert "no W&B API key" in capsys.readouterr().err
        return
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if argv[0] == "figures":
        written = [Path(p) for p in out.split()]
        assert written and all(p.is_file() for p in written)
