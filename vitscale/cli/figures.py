"""``vitscale figures``, ``vitscale fit`` and ``vitscale summary``: options -> the analysis
library (:mod:`analysis.draw`, :func:`analysis.scaling.fit_groups`,
:func:`analysis.summary.summarise`). Nothing heavy is imported until a handler runs, so
``vitscale --help`` stays fast; the files written are listed in :mod:`analysis.draw`.

``vitscale figures --wandb ENTITY/PROJECT --group GRID --out DIR`` draws the same files
from the grid's W&B runs (:func:`vitscale.record.wandb_runs.load_wandb`, online), so a
laptop with no run folders can redraw a study.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError, user_errors

# --x of `vitscale fit`: the cost axis of the law.
X_COLUMNS = {"exaflops": "exaflops", "examples": "num_examples", "examples_seen": "examples_seen"}


def _add_runs(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUNS_DIR",
        help="run folders, grid folders (runs/<grid>) or a runs/ directory, any mix",
    )
    p.add_argument(
        "--shots", type=int, default=5, help="k of the k-shot accuracy to plot (default 5)"
    )


def configure_figures(p: argparse.ArgumentParser) -> None:
    from analysis.figures import AGGREGATES  # light: no pandas at import

    _add_runs(p)
    p.add_argument("--out", "-o", required=True, type=Path, help="folder for the figure files")
    p.add_argument(
        "--paper",
        action="store_true",
        help="redraw the paper's Figs. 3 and 5 and Table 6 from its tables",
    )
    p.add_argument(
        "--overlay-paper",
        action="store_true",
        help="draw Table 6's points on comparable compute panels (else beside them)",
    )
    p.add_argument(
        "--metric",
        action="append",
        metavar="COLUMN",
        help="metric column for the compute figure, repeatable "
        "(default: the transfer metrics found and their average)",
    )
    p.add_argument(
        "--group-by",
        default="model",
        metavar="COLUMN",
        help="one line per value of this column in the data-size figure and the curves "
        "(default model; any column, e.g. config.optim.lr)",
    )
    p.add_argument(
        "--color-by",
        default="family",
        metavar="COLUMN",
        help="colour and frontier grouping of the compute figure (default family)",
    )
    p.add_argument(
        "--agg",
        choices=AGGREGATES,
        default="mean",
        help="combine cells sharing a line and an x value (default mean over seeds)",
    )
    p.add_argument(
        "--fit", action="store_true", help="draw the power-law fit on the compute figure"
    )
    p.add_argument(
        "--bootstrap",
        type=int,
        default=200,
        help="bootstrap refits for the --fit band (default 200)",
    )
    p.add_argument("--curves", action="store_true", help="also plot the metrics along training")
    p.add_argument(
        "--wandb",
        metavar="ENTITY/PROJECT",
        help="read the cells (and, with --curves, their history) from W&B instead of run "
        "folders: a laptop with no run folders redraws a study (online; needs --group)",
    )
    p.add_argument(
        "--group", metavar="GRID", help="with --wandb: the grid's name, its runs' W&B group"
    )
    p.add_argument(
        "--format",
        dest="formats",
        nargs="+",
        choices=("png", "pdf", "svg"),
        default=["png", "pdf"],
        help="file formats (default png pdf)",
    )


def _load(paths: list[str], *, progress: bool = True):
    """The cells under ``paths``; unreadable folders are listed on stderr and skipped."""
    from ..record.cells import load_runs

    with user_errors(FileNotFoundError):
        cells, problems = load_runs(paths, progress=progress)
    if problems:
        print(f"skipped {len(problems)} unreadable run folder(s):", file=sys.stderr)
        for p in problems[:20]:
            print(f"  {p}", file=sys.stderr)
        if len(problems) > 20:
            print(f"  ... and {len(problems) - 20} more", file=sys.stderr)
    return cells


def _load_wandb(path: str, group: str | None, *, curves: bool):
    """Cells (and a history loader for --curves) of one grid's W&B runs, online."""
    entity, _, project = path.partition("/")
    if not entity or not project or "/" in project:
        raise UserError(f"--wandb {path!r}: expected ENTITY/PROJECT, e.g. my-team/vitscale")
    if not group:
        raise UserError("--wandb needs --group GRID (the grid's name: its runs' W&B group)")
    from ..record.wandb import open_project, translated_errors
    from ..record.wandb_runs import load_wandb, load_wandb_history

    api = open_project(entity, project, group=group)
    with translated_errors():
        cells, problems = load_wandb(project=project, entity=entity, group=group, api=api)
    for p in problems:
        print(f"skipped: {p}", file=sys.stderr)

    def history(done):
        with translated_errors():
            steps = load_wandb_history(project=project, entity=entity, group=group, api=api)
        return steps[steps["cell_id"].isin(set(done["cell_id"]))]

    return cells, (history if curves else None)


def _options(args: argparse.Namespace):
    from analysis.draw import FigureOptions

    return FigureOptions(
        out=args.out,
        shots=args.shots,
        metrics=args.metric,
        group_by=args.group_by,
        color_by=args.color_by,
        agg=args.agg,
        overlay_paper=args.overlay_paper,
        fit=args.fit,
        bootstrap=args.bootstrap,
        curves=args.curves,
        formats=tuple(args.formats),
    )


def _check_figures(args: argparse.Namespace) -> None:
    if not args.paper and not args.runs and not args.wandb:
        raise UserError("vitscale figures: give RUNS_DIR..., --wandb ENTITY/PROJECT and/or --paper")
    if args.wandb and args.runs:
        raise UserError("give RUNS_DIR... or --wandb ENTITY/PROJECT, not both")
    if args.group and not args.wandb:
        raise UserError("--group selects a grid's W&B runs: use it with --wandb ENTITY/PROJECT")
    if args.shots < 1:
        raise UserError(f"--shots must be a positive integer, got {args.shots}")
    if args.bootstrap < 0:
        raise UserError(f"--bootstrap must be >= 0, got {args.bootstrap}")


def run_figures(args: argparse.Namespace) -> int:
    """Handler of ``vitscale figures``: prints the files written, one per line."""
    from analysis.draw import draw_figures, paper_figures

    _check_figures(args)
    written: list[Path] = []
    if args.paper:
        written += paper_figures(args.out, args.formats, fit=args.fit, bootstrap=args.bootstrap)
    if args.runs:
        cells = _load(args.runs)
        if cells.empty:
            raise UserError(f"no run folders found under {' '.join(args.runs)}")
        written += draw_figures(cells, _options(args))
    if args.wandb:
        cells, history = _load_wandb(args.wandb, args.group, curves=args.curves)
        if cells.empty:
            raise UserError(f"no W&B runs in group {args.group!r} of {args.wandb}")
        written += draw_figures(cells, _options(args), history=history)
    for path in written:
        print(path)
    return 0


def configure_fit(p: argparse.ArgumentParser) -> None:
    _add_runs(p)
    p.add_argument(
        "--x",
        choices=tuple(X_COLUMNS),
        default="exaflops",
        help="cost axis: total pre-training exaFLOPs (default), pre-training dataset size "
        "(examples), or examples seen",
    )
    p.add_argument(
        "--metric",
        metavar="COLUMN",
        help="accuracy column, e.g. finetune/imagenet/top1, fewshot/<dataset>/5shot, "
        "average-5 (default: the average of the transfer metrics found)",
    )
    p.add_argument(
        "--by",
        default="family",
        metavar="COLUMN",
        help="fit each value of this column separately (default family; 'none': all together)",
    )
    p.add_argument(
        "--paper", action="store_true", help="fit the paper's Table 6 instead of (or with) runs"
    )
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap refits (default 1000)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run_fit(args: argparse.Namespace) -> int:
    """Handler of ``vitscale fit``: the law's parameters with bootstrap intervals."""
    import json

    import pandas as pd

    from analysis import paper
    from analysis.scaling import fit_groups

    from ..record import STATUS_DONE

    if not args.paper and not args.runs:
        raise UserError("vitscale fit: give RUNS_DIR... and/or --paper")
    if args.bootstrap < 0:
        raise UserError(f"--bootstrap must be >= 0, got {args.bootstrap}")
    if not 0 < args.level < 1:
        raise UserError(f"--level must lie in (0, 1), got {args.level}")
    frames = [paper.table6_frame()] if args.paper else []
    if args.runs:
        cells = _load(args.runs)
        frames.append(cells[cells["status"] == STATUS_DONE])
    by = None if args.by.lower() == "none" else args.by
    _, results, failures = fit_groups(
        pd.concat(frames, ignore_index=True),
        metric=args.metric,
        shots=args.shots,
        x=X_COLUMNS[args.x],
        by=by,
        bootstrap=args.bootstrap,
        level=args.level,
        seed=args.seed,
        progress=not args.json,
    )
    if args.json:
        out = {k: v.as_dict() for k, v in results.items()}
        out.update({k: {"error": v} for k, v in failures.items()})
        print(json.dumps(out, indent=2))
    else:
        for name, fit in results.items():
            print(f"== {by or 'all'} = {name}\n{fit}\n")
        for name, msg in failures.items():
            print(f"== {by or 'all'} = {name}: cannot fit: {msg}\n")
    if not results:
        raise UserError(f"no group could be fitted ({'; '.join(failures.values())})")
    return 0


def configure_summary(p: argparse.ArgumentParser) -> None:
    _add_runs(p)
    p.add_argument(
        "--metric",
        metavar="COLUMN",
        help="accuracy column to compare (default: the mean over transfer tasks of the best "
        "--shots-shot accuracy)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run_summary(args: argparse.Namespace) -> int:
    """Handler of ``vitscale summary``: cells by model and subset, and the verdict."""
    import json

    from analysis import metrics as M
    from analysis import summary

    if not args.runs:
        raise UserError("vitscale summary: give RUNS_DIR...")
    cells = _load(args.runs, progress=False)
    with user_errors(ValueError):
        s = summary.summarise(cells, metric=args.metric, shots=args.shots)
    if args.json:
        print(json.dumps(s.to_dict(), indent=2))
        return 0
    print(
        f"{M.label(s.metric)}, by model and pre-training images "
        f"({s.steps:,} steps; mean ± spread over seeds):"
    )
    print(s.table().to_string(na_rep="-"))
    print()
    print("\n".join(s.lines()))
    return 0
