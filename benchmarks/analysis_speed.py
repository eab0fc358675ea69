"""How long ``vitscale figures`` takes on a large grid: N run folders -> every figure.

Target: 10,000 run folders to all figures in under 10 s on 2 cores. Writes N
synthetic run folders (tests/helpers/run_folders.py), then times, in this process, ``load_runs``,
``vitscale figures RUNS --out DIR`` as the CLI runs it, and the same with ``--paper
--overlay-paper --curves``; import time is reported apart (benchmarks/RESULTS.md,
"Analysis speed").

Usage: python benchmarks/analysis_speed.py [--cells 10000] [--root DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", type=int, default=10_000, help="run folders (default 10000)")
    p.add_argument("--root", type=Path, help="where to write them (default: a temp folder)")
    p.add_argument("--keep", action="store_true", help="keep the folders afterwards")
    args = p.parse_args()

    t0 = time.perf_counter()
    from analysis.figures import fig3, fig4, fig5  # noqa: F401  (import cost, measured here)
    from tests.helpers import run_folders as fixtures
    from vitscale.cli import figures as cli
    from vitscale.record.cells import load_runs

    t_import = time.perf_counter() - t0

    root = args.root or Path(tempfile.mkdtemp(prefix="vitscale-bench-"))
    runs, out = root / "runs", root / "figures"
    try:
        t0 = time.perf_counter()
        fixtures.write_runs(runs, cells=args.cells, grid="bench")
        t_write = time.perf_counter() - t0

        t0 = time.perf_counter()
        cells, problems = load_runs(runs)
        t_load = time.perf_counter() - t0
        assert len(cells) == args.cells and not problems, (len(cells), problems[:3])

        timings = {}
        for name, extra in (("figures", []), ("figures --paper --overlay-paper --curves", [
            "--paper", "--overlay-paper", "--curves"])):  # fmt: skip
            parser = argparse.ArgumentParser()
            cli.configure_figures(parser)
            ns = parser.parse_args([str(runs), "--out", str(out), *extra])
            t0 = time.perf_counter()
            with open(os.devnull, "w") as devnull:
                stdout, stderr, sys.stdout, sys.stderr = sys.stdout, sys.stderr, devnull, devnull
                try:
                    cli.run_figures(ns)
                finally:
                    sys.stdout, sys.stderr = stdout, stderr
            timings[name] = time.perf_counter() - t0
        files = sorted(f.name for f in out.iterdir())
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    print(f"cells: {args.cells:,}  (cores available: {len(os.sched_getaffinity(0))})")
    print(f"imports (pandas, matplotlib, seaborn, analysis):  {t_import:6.2f} s")
    print(f"writing the fixture run folders:                  {t_write:6.2f} s")
    print(f"load_runs -> DataFrame:                           {t_load:6.2f} s")
    for name, t in timings.items():
        print(f"vitscale {name + ':':<42}{t:6.2f} s")
    print(f"files: {len(files)} ({', '.join(files)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
