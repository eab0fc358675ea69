"""`analysis` runs without torch: importing it and drawing every figure never loads it.

Checked in a fresh interpreter (this test process has torch loaded by conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import argparse, sys
    from pathlib import Path

    import pandas as pd

    import analysis
    from analysis import draw, metrics, paper, scaling, tables
    from tests.helpers import run_folders as fixtures
    from vitscale.cli import figures as cli
    from vitscale.record import cells as load
    from analysis.figures import fig3, fig4, fig5, training_curves
    assert "wandb" not in sys.modules, "import analysis loaded wandb"

    out = Path(sys.argv[1])
    fixtures.write_runs(out / "runs", cells=60)

    def run(which, argv):
        parser = argparse.ArgumentParser()
        getattr(cli, f"configure_{which}")(parser)
        assert getattr(cli, f"run_{which}")(parser.parse_args(argv)) == 0

    # Every figure: the paper's redraws (with fits) and ours (with curves), plus a fit.
    run("figures", [str(out / "runs"), "--paper", "--overlay-paper", "--curves", "--fit",
                    "--bootstrap", "10", "--out", str(out / "figs"), "--format", "png"])
    run("fit", [str(out / "runs"), "--bootstrap", "10"])
    cells, _ = load.load_runs(out / "runs")
    history, _ = load.load_history(cells)
    two = pd.concat(
        [cells, cells.assign(pretrain_dataset="x", num_examples=cells["num_examples"] * 10)]
    )
    fig3.write(two, out / "figs", metric="fewshot/synthetic-shapes/5shot", formats=("png",))
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torchvision", "accelerate"))
    assert not heavy, heavy
    assert not any(m.startswith(("vitscale.train", "vitscale.models.vit", "vitscale.data")) for m in sys.modules)
    print(len(list((out / "figs").iterdir())))
    """
)


def test_analysis_never_imports_torch(tmp_path):
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Paper: Figs. 3, 5 and Table 6 (md, tex); ours: Fig. 4 x 2 datasets, Fig. 5, Table 6
    # (md, tex), curves x 2; and the Fig. 3 drawn last.
    assert int(done.stdout.split()[-1]) == 4 + 7 + 1
