"""``vitscale figures``, ``vitscale fit`` and ``vitscale summary``: options -> the analysis
library (:mod:`analysis.draw`, :func:`analysis.scaling.fit_groups`,
:func:`analysis.summary.summarise`). Nothing heavy is imported until a handler runs, so
``vitscale --help`` stays fast; the files written are listed in :mod:`analysis.draw`.

``vitscale figures --reference jft-curves --out DIR`` draws a reference data set
(:func:`analysis.draw.reference_figures`); ``vitscale fit --holdout`` backtests an
extrapolation (:mod:`analysis.holdout`): on a reference's curves, on each cell's learning
curve (``--curves``) or on each group's frontier.

``vitscale figures --wandb ENTITY/PROJECT --group GRID --out DIR`` draws the same files
from the grid's W&B runs (:func:`vitscale.record.wandb_runs.load_wandb`, online), so a
laptop with no run folders can redraw a study.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UserError, user_errors

if TYPE_CHECKING:
    from analysis.control import World

SPLIT = "split"  # --holdout without a FRACTION: a reference's published split
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


def _add_reference(p: argparse.ArgumentParser, help_text: str) -> None:
    from analysis.reference import NAMES  # light: no pandas at import

    p.add_argument("--reference", choices=NAMES, help=help_text)


def configure_figures(p: argparse.ArgumentParser) -> None:
    from analysis.figures import AGGREGATES  # light: no pandas at import

    _add_runs(p)
    p.add_argument("--out", "-o", required=True, type=Path, help="folder for the figure files")
    p.add_argument(
        "--paper",
        action="store_true",
        help="redraw the paper's Figs. 3 and 5 and Table 6 from its tables",
    )
    _add_reference(
        p,
        "draw a reference data set's --shots curves: jft-curves, the JFT-300M few-shot "
        "learning curves of Alabdulmohsin et al. 2022, error against pre-training exaFLOPs "
        "(Fig. 5's view; Mixer left out: no compute count) and against examples seen, "
        "crossovers marked",
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
    if not args.paper and not args.runs and not args.wandb and not args.reference:
        raise UserError(
            "vitscale figures: give RUNS_DIR..., --wandb ENTITY/PROJECT, --paper and/or "
            "--reference NAME"
        )
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
    from analysis.draw import draw_figures, paper_figures, reference_figures

    _check_figures(args)
    written: list[Path] = []
    if args.paper:
        written += paper_figures(args.out, args.formats, fit=args.fit, bootstrap=args.bootstrap)
    if args.reference:
        written += reference_figures(args.reference, args.out, args.formats, shots=args.shots)
    if args.runs:
        cells = _load(args.runs)
        if cells.empty:
            raise UserError(f"no run folders found under {' '.join(args.runs)}")
        written += draw_figures(cells, _options(args), worlds=control_worlds())
    if args.wandb:
        cells, history = _load_wandb(args.wandb, args.group, curves=args.curves)
        if cells.empty:
            raise UserError(f"no W&B runs in group {args.group!r} of {args.wandb}")
        written += draw_figures(cells, _options(args), history=history, worlds=control_worlds())
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
    p.add_argument(
        "--holdout",
        nargs="?",
        const=SPLIT,
        metavar="FRACTION",
        help="backtest instead of fitting: fit each curve's early part, predict the rest, "
        "report the RMSE of log error and the coverage of the --level interval. FRACTION "
        "(0-1): hold out the last FRACTION of each curve's log-x range, e.g. 0.3; without "
        "it: a --reference's published split. Curves: --reference's, each cell's with "
        "--curves, else each --by group's frontier",
    )
    _add_reference(
        p,
        "with --holdout: a reference data set's curves (jft-curves: the 72 JFT-300M few-shot "
        "learning curves of Alabdulmohsin et al. 2022, split by their authors)",
    )
    p.add_argument(
        "--curves",
        action="store_true",
        help="with --holdout on runs: each cell's learning curve (metrics.jsonl: examples "
        "seen -> few-shot error; --metric, default the --shots-shot ones) instead of the "
        "frontiers",
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help="with --reference: only this model, repeatable (e.g. ViT-B/16)",
    )
    p.add_argument(
        "--estimator",
        default="extrapolate",
        help="with --holdout: extrapolate (default; analysis.scaling.extrapolate) or "
        "power-law (the law above on the curve's frontier, its bootstrap band)",
    )


def _frames(args: argparse.Namespace):
    """The paper's Table 6 and/or the finished cells under RUNS_DIR, as one frame."""
    import pandas as pd

    from analysis import paper

    from ..record import STATUS_DONE

    frames = [paper.table6_frame()] if args.paper else []
    if args.runs:
        cells = _load(args.runs)
        frames.append(cells[cells["status"] == STATUS_DONE])
    return pd.concat(frames, ignore_index=True)


def run_fit(args: argparse.Namespace) -> int:
    """Handler of ``vitscale fit``: the law's parameters with bootstrap intervals, or with
    ``--holdout`` a backtest of extrapolation (:func:`run_holdout`)."""
    import json

    from analysis.scaling import fit_groups

    if args.bootstrap < 0:
        raise UserError(f"--bootstrap must be >= 0, got {args.bootstrap}")
    if not 0 < args.level < 1:
        raise UserError(f"--level must lie in (0, 1), got {args.level}")
    if args.holdout is not None or args.reference:
        return run_holdout(args)
    if not args.paper and not args.runs:
        raise UserError("vitscale fit: give RUNS_DIR..., --paper and/or --reference NAME --holdout")
    for option in ("curves", "model"):
        if getattr(args, option):
            raise UserError(f"--{option} goes with --holdout")
    by = None if args.by.lower() == "none" else args.by
    _, results, failures = fit_groups(
        _frames(args),
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


def _fraction(args: argparse.Namespace) -> float | None:
    """--holdout's FRACTION (None: the reference's published split, also what
    ``--reference`` alone backtests)."""
    if args.holdout in (None, SPLIT):
        if not args.reference:
            raise UserError("runs have no published split: give --holdout FRACTION, e.g. 0.3")
        return None
    try:
        fraction = float(args.holdout)
    except ValueError:
        fraction = float("nan")
    if not 0 < fraction < 1:
        raise UserError(
            f"--holdout {args.holdout!r}: give a FRACTION in (0, 1) of the log-x range to "
            "hold out, or nothing (a --reference's published split)"
        )
    return fraction


def _holdout_splits(args: argparse.Namespace, fraction: float | None) -> list:
    """The curves --holdout backtests: the reference's, each cell's (--curves) or each
    group's frontier."""
    from analysis import holdout
    from analysis import metrics as M

    if args.reference:
        if args.runs or args.paper or args.curves:
            raise UserError("--reference: give it alone (no RUNS_DIR, --paper or --curves)")
        from analysis.reference import jft

        metrics = [args.metric] if args.metric else None
        with user_errors(ValueError):
            return jft.splits(models=args.model, metrics=metrics, fraction=fraction)
    if args.model:
        raise UserError("--model selects a --reference's curves; for runs use --by model")
    if not args.paper and not args.runs:
        raise UserError("vitscale fit --holdout: give RUNS_DIR..., --paper or --reference NAME")
    frame = _frames(args)
    if args.curves:
        if args.paper:
            raise UserError("--curves backtests the cells' own learning curves: not with --paper")
        from vitscale.record.cells import load_history

        history, _ = load_history(frame)
        found = M.fewshot_metrics(history, shots=args.shots)
        metrics = [args.metric] if args.metric else found
        if not metrics or metrics[0] not in history.columns:
            raise UserError(
                f"--metric {args.metric!r}: no such curve in metrics.jsonl; few-shot metrics: "
                f"{', '.join(found) or 'none found'}"
            )
        return holdout.history_splits(history, metrics=metrics, fraction=fraction)
    frame, metric = M.resolve_metric(frame, args.metric, shots=args.shots)
    by = None if args.by.lower() == "none" else args.by
    for column in (X_COLUMNS[args.x], by):
        if column is not None and column not in frame.columns:
            raise UserError(f"no column {column!r} in the results (--x, --by)")
    return holdout.frontier_splits(
        frame, metric=metric, x=X_COLUMNS[args.x], by=by, fraction=fraction
    )


def run_holdout(args: argparse.Namespace) -> int:
    """``vitscale fit --holdout``: a table of the curves' RMSE of log error, coverage and
    width, and their summary (:mod:`analysis.holdout`)."""
    import json

    from analysis import holdout

    fraction = _fraction(args)
    splits = _holdout_splits(args, fraction)
    with user_errors(ValueError):
        scores, failures = holdout.evaluate(
            splits,
            estimator=args.estimator,
            level=args.level,
            bootstrap=args.bootstrap,
            progress=not args.json,
        )
    summary = holdout.summarise(scores)
    if args.json:
        out = {
            "holdout": SPLIT if fraction is None else fraction,
            "estimator": args.estimator,
            "summary": summary,
            "curves": [s.as_dict() for s in scores],
            "failures": failures,
        }
        print(json.dumps(out, indent=2))
    else:
        if scores:
            print(holdout.table(scores).to_string(index=False), end="\n\n")
        print("\n".join(holdout.summary_lines(summary)))
        for name, msg in failures.items():
            print(f"cannot fit {name}: {msg}")
    if not scores:
        raise UserError(f"no curve could be backtested ({'; '.join(failures.values()) or 'none'})")
    return 0


def configure_summary(p: argparse.ArgumentParser) -> None:
    _add_runs(p)
    p.add_argument(
        "--metric",
        metavar="COLUMN",
        help="accuracy column to compare, or 'average(a, b, ...)' of several (default: the "
        "mean over transfer tasks of the best --shots-shot accuracy)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def control_worlds() -> dict[str, World]:
    """The positive control's worlds (:mod:`vitscale.data.synthetic.permuted` owns them) as
    :class:`analysis.control.World`, by pre-training set."""
    from analysis.control import World

    from ..data.synthetic.permuted import control_worlds as worlds

    return {name: World(name, f, transfer) for name, (f, transfer) in worlds().items()}


def _run_control(cells, args: argparse.Namespace, worlds: dict[str, World]) -> int:
    """``vitscale summary`` on the control's cells: its registered verdict
    (experiments/preregistered/permuted.md, :mod:`analysis.control`)."""
    import json

    from analysis import control

    if args.metric:
        raise UserError(
            "--metric: the control's metric is registered (each world's own transfer "
            "glyphs, --shots-shot); leave --metric out"
        )
    with user_errors(ValueError):
        c = control.summarise(cells, worlds=worlds, shots=args.shots)
    if args.json:
        print(json.dumps(c.to_dict(), indent=2))
        return 0
    print(
        f"{args.shots}-shot accuracy on each world's transfer glyphs (%), by level, model and "
        "pre-training images (mean ± spread over seeds):"
    )
    print(c.table().to_string(na_rep="-"))
    print()
    print("\n".join(c.lines()))
    return 0


def run_summary(args: argparse.Namespace) -> int:
    """Handler of ``vitscale summary``: cells by model and subset, and the verdict (the
    positive control's registered one for its cells)."""
    import json

    from analysis import metrics as M
    from analysis import summary
    from analysis.control import is_control

    if not args.runs:
        raise UserError("vitscale summary: give RUNS_DIR...")
    cells = _load(args.runs, progress=False)
    if is_control(cells, worlds := control_worlds()):
        return _run_control(cells, args, worlds)
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
