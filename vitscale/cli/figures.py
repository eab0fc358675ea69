"""``vitscale figures``, ``vitscale fit`` and ``vitscale summary``: options -> the analysis
library (:mod:`analysis.draw`, :func:`analysis.scaling.fit_groups`,
:func:`analysis.summary.summarise`). Nothing heavy is imported until a handler runs, so
``vitscale --help`` stays fast; the files written are listed in :mod:`analysis.draw`.

``vitscale figures --reference jft-curves --out DIR`` draws a reference data set
(:func:`analysis.draw.reference_figures`); ``vitscale predict`` extrapolates each curve
to given x with an interval, ``vitscale backtest`` scores such extrapolations on the
curves' held-out ends (:mod:`analysis.holdout`): a reference's curves, each cell's learning
curve (``--curves``) or each group's frontier.

``vitscale figures --wandb ENTITY/PROJECT --group GRID --out DIR`` draws the same files
from the grid's W&B runs (:func:`vitscale.record.wandb_runs.load_wandb`, online), so a
laptop with no run folders can redraw a study.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import MISSING, fields
from pathlib import Path

from ..errors import UserError, user_errors

SPLIT = "split"  # backtest without --fraction: a reference's published split, else:
DEFAULT_FRACTION = 0.3  # the last 30% of each curve's log-x range
# --x of `vitscale fit`: the cost axis of the law.
X_COLUMNS = {"exaflops": "exaflops", "examples": "num_examples", "examples_seen": "examples_seen"}


def _add_figure_options(p: argparse.ArgumentParser, *names: str) -> None:
    """The options :class:`analysis.draw.FigureOptions` declares (``names``: only these),
    each from its field: flag, default, help."""
    from analysis.draw import FigureOptions

    for f in fields(FigureOptions):
        if names and f.name not in names:
            continue
        kw = dict(f.metadata)
        flags = kw.pop("flags", ("--" + f.name.replace("_", "-"),))
        if f.type == "bool":
            kw["action"] = "store_true"
        elif f.default is not MISSING:
            kw["default"] = list(f.default) if isinstance(f.default, tuple) else f.default
        p.add_argument(*flags, dest=f.name, **kw)


def _add_run_dirs(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUNS_DIR",
        help="run folders, grid folders (runs/<grid>) or a runs/ directory, any mix",
    )


def _add_runs(p: argparse.ArgumentParser) -> None:
    """The run folders and how their cells are read: --shots, --settings."""
    _add_run_dirs(p)
    _add_figure_options(p, "shots", "settings")


def _add_reference(p: argparse.ArgumentParser, help_text: str) -> None:
    from analysis.reference import NAMES  # light: no pandas at import

    p.add_argument("--reference", choices=NAMES, help=help_text)


def configure_figures(p: argparse.ArgumentParser) -> None:
    _add_run_dirs(p)  # its --shots and --settings come with the other figure options
    p.add_argument(
        "--paper",
        action="store_true",
        help="redraw the paper's Figs. 3 and 5 and Table 6 from its tables",
    )
    _add_reference(
        p,
        "draw a reference data set's --shots curves: jft-curves, the JFT-300M few-shot "
        "learning curves of Alabdulmohsin et al. 2022, error against pre-training exaFLOPs "
        "(Fig. 5's view) and against examples seen, crossovers marked",
    )
    _add_figure_options(p)
    p.add_argument(
        "--wandb",
        metavar="ENTITY/PROJECT",
        help="read the cells (and, with --curves, their history) from W&B instead of run "
        "folders: a laptop with no run folders redraws a study (online; needs --group)",
    )
    p.add_argument(
        "--group", metavar="GRID", help="with --wandb: the grid's name, its runs' W&B group"
    )


def _load(paths: list[str], *, progress: bool = True):
    """The cells under ``paths``; unreadable folders are listed on stderr and skipped."""
    from analysis.settings import label_settings

    from ..record.cells import load_runs

    with user_errors(FileNotFoundError):
        cells, problems = load_runs(paths, progress=progress)
    cells, _ = label_settings(cells)
    for p in [p for p in problems if p.stale]:
        print(f"note: {p}", file=sys.stderr)
    if problems := [p for p in problems if not p.stale]:
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
    from analysis.settings import label_settings

    with translated_errors():
        cells, problems = load_wandb(project=project, entity=entity, group=group, api=api)
    cells, _ = label_settings(cells)
    for p in problems:
        print(f"skipped: {p}", file=sys.stderr)

    def history(done):
        with translated_errors():
            steps = load_wandb_history(project=project, entity=entity, group=group, api=api)
        return steps[steps["cell_id"].isin(set(done["cell_id"]))]

    return cells, (history if curves else None)


def _options(args: argparse.Namespace):
    from analysis.draw import FigureOptions

    return FigureOptions(**{f.name: getattr(args, f.name) for f in fields(FigureOptions)})


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
    if args.shots is not None and args.shots < 1:
        raise UserError(f"--shots must be a positive integer, got {args.shots}")
    if args.bootstrap is not None and args.bootstrap < 0:
        raise UserError(f"--bootstrap must be >= 0, got {args.bootstrap}")


def run_figures(args: argparse.Namespace) -> int:
    """Handler of ``vitscale figures``: prints the files written, one per line."""
    from analysis import metrics as M
    from analysis.draw import draw_figures, paper_figures, reference_figures

    _check_figures(args)
    written: list[Path] = []
    if args.paper:
        written += paper_figures(args.out, args.formats, fit=args.fit, bootstrap=args.bootstrap)
    if args.reference:
        written += reference_figures(
            args.reference, args.out, args.formats, shots=args.shots or M.FALLBACK_SHOTS
        )
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


def _add_law(p: argparse.ArgumentParser, *, mode: str, bootstrap: int | None = 1000) -> None:
    """What ``fit``, ``predict`` and ``backtest`` share: the curves (RUNS_DIR or --paper;
    their --x, --metric, --by) and the interval's level."""
    _add_runs(p)
    p.set_defaults(mode=mode, reference=None, curves=False, model=None, bootstrap=bootstrap)
    p.add_argument(
        "--paper", action="store_true", help="the paper's Table 6 instead of (or with) runs"
    )
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
        help="a curve (frontier) per value of this column (default family; 'none': one)",
    )
    p.add_argument(
        "--level", type=float, default=0.95, help="interval level, e.g. 0.8 (default 0.95)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    if bootstrap is not None:  # predict has none: its interval is extrapolate's
        p.add_argument("--bootstrap", type=int, help=f"bootstrap refits (default {bootstrap})")


def _add_cell_curves(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--curves",
        action="store_true",
        help="each cell's learning curve (metrics.jsonl: examples seen -> few-shot error; "
        "--metric, default the --shots-shot ones) instead of the frontiers",
    )


def configure_fit(p: argparse.ArgumentParser) -> None:
    _add_law(p, mode="fit")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    # Predictions and backtests are commands of their own: the old flags say where.
    p.add_argument("--predict", nargs="*", help=argparse.SUPPRESS)
    p.add_argument("--holdout", nargs="?", const=SPLIT, help=argparse.SUPPRESS)
    p.add_argument("--reference", help=argparse.SUPPRESS)


def configure_predict(p: argparse.ArgumentParser) -> None:
    _add_law(p, mode="predict", bootstrap=None)
    p.add_argument(
        "--at",
        nargs="+",
        type=float,
        required=True,
        metavar="X",
        help="predict the error at these x (--x's units; with --curves, examples seen) with "
        "the --level interval of analysis.scaling.extrapolate, from each --by group's "
        "frontier or each cell's learning curve",
    )
    _add_cell_curves(p)


def configure_backtest(p: argparse.ArgumentParser) -> None:
    _add_law(p, mode="backtest")
    p.add_argument(
        "--fraction",
        type=float,
        metavar="F",
        help="hold out the last F (0-1) of each curve's log-x range, fit the rest, report "
        "the RMSE of log error and the coverage of the --level interval (default: "
        f"{DEFAULT_FRACTION:g} on runs, a --reference's published split)",
    )
    _add_reference(
        p,
        "a reference data set's curves (jft-curves: the 72 JFT-300M few-shot learning "
        "curves of Alabdulmohsin et al. 2022, split by their authors)",
    )
    _add_cell_curves(p)
    p.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help="with --reference: only this model, repeatable (e.g. ViT-B/16)",
    )
    p.add_argument(
        "--estimator",
        default="extrapolate",
        help="extrapolate (default; analysis.scaling.extrapolate) or power-law (the "
        "saturating law on the curve's frontier, its bootstrap band)",
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
    """Handler of ``vitscale fit``: the law's parameters with bootstrap intervals."""
    import json

    from analysis.scaling import LEGEND, fit_groups

    _check_law(args)
    if args.predict is not None:
        raise UserError("predictions are a command of their own: vitscale predict ... --at X")
    if args.holdout is not None or args.reference:
        raise UserError("backtests are a command of their own: vitscale backtest ...")
    if not args.paper and not args.runs:
        raise UserError("vitscale fit: give RUNS_DIR... and/or --paper")
    by = None if args.by.lower() == "none" else args.by
    fronts, frame, metric = _curves(args, None)
    if by is not None:  # the groups whose frontier can carry the law
        frame = frame[frame[by].astype(str).isin({s.name for s in fronts})]
    _, results, failures = fit_groups(
        frame,
        metric=metric,
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
        print("\n".join([*LEGEND, *_failure_lines(failures, "fit")]))
    if not results:
        raise UserError(f"no group could be fitted ({'; '.join(dict.fromkeys(failures.values()))})")
    return 0


def _check_law(args: argparse.Namespace) -> None:
    if args.bootstrap is not None and args.bootstrap < 0:
        raise UserError(f"--bootstrap must be >= 0, got {args.bootstrap}")
    if not 0 < args.level < 1:
        raise UserError(f"--level must lie in (0, 1), got {args.level}")


def _fraction(args: argparse.Namespace) -> float | None:
    """--fraction: DEFAULT_FRACTION on runs without one; None: the reference's published
    split."""
    if args.fraction is None:
        return None if args.reference else DEFAULT_FRACTION
    if not 0 < args.fraction < 1:
        raise UserError(
            f"--fraction {args.fraction:g}: give a fraction in (0, 1) of the log-x range to "
            f"hold out, or none ({DEFAULT_FRACTION:g} on runs, a --reference's published split)"
        )
    return args.fraction


def _curves(args: argparse.Namespace, fraction: float | None):
    """``(curves, frame, metric)``: the reference's curves, each cell's learning curve
    (--curves) or each group's frontier, cut at ``fraction`` (None: whole, for the law and
    vitscale predict; a reference's published split), those too short to fit said once
    (:func:`_usable`); frame and metric None for a reference."""
    from analysis import holdout
    from analysis import metrics as M

    if args.reference:
        if args.runs or args.paper or args.curves:
            raise UserError("--reference: give it alone (no RUNS_DIR, --paper or --curves)")
        from analysis.reference import jft

        metrics = [args.metric] if args.metric else None
        with user_errors(ValueError):
            return jft.splits(models=args.model, metrics=metrics, fraction=fraction), None, None
    if args.model:
        raise UserError("--model selects a --reference's curves; for runs use --by model")
    if not args.paper and not args.runs:
        raise UserError(f"vitscale {args.mode}: give RUNS_DIR..., --paper or --reference NAME")
    frame = _frames(args)
    if args.curves:
        if args.paper:
            raise UserError("--curves reads the cells' own learning curves: not with --paper")
        curves, metric = _cell_curves(args, frame, fraction)
        return _usable(curves, args, frame, fraction), frame, metric
    frame, metric = M.resolve_metric(frame, args.metric, shots=args.shots)
    by = None if args.by.lower() == "none" else args.by
    for column in (X_COLUMNS[args.x], by):
        if column is not None and column not in frame.columns:
            raise UserError(f"no column {column!r} in the results (--x, --by)")
    curves = holdout.frontier_splits(
        frame, metric=metric, x=X_COLUMNS[args.x], by=by, fraction=fraction
    )
    return _usable(curves, args, frame, fraction), frame, metric


def _cell_curves(args: argparse.Namespace, frame, fraction: float | None) -> tuple[list, str]:
    """Each run's learning curve of --metric (default: its few-shot ones at --shots) in
    metrics.jsonl, cut at ``fraction``, and the metric's name."""
    from analysis import holdout
    from analysis import metrics as M
    from vitscale.record.cells import load_history

    history, _ = load_history(frame)
    found = M.fewshot_metrics(history, shots=args.shots or M.default_shots(frame))
    metrics = [args.metric] if args.metric else found
    if not metrics or metrics[0] not in history.columns:
        raise UserError(
            f"--metric {args.metric!r}: no such curve in metrics.jsonl; few-shot metrics: "
            f"{', '.join(found) or 'none found'}"
        )
    return holdout.history_splits(history, metrics=metrics, fraction=fraction), metrics[0]


# What more points a frontier needs along each --x: which axis of the grid to extend.
MORE_POINTS = {
    "exaflops": "compute points: add durations (train.steps) or model sizes",
    "examples": "data-size points: add pre-training subsets (data.subset)",
    "examples_seen": "points: add durations (train.steps)",
}


def _usable(curves: list, args: argparse.Namespace, frame, fraction: float | None) -> list:
    """The curves long enough to fit; the rest said once, with what would make them long
    enough (a UserError when none is left): a design that cannot support a fit."""
    import numpy as np

    from analysis import holdout
    from analysis.extrapolation import MIN_DISTINCT

    short = holdout.too_short(curves)
    if not short:
        return curves
    if args.curves:
        fitted = _span(len(np.unique(s.x_fit)) for s in short)
        cut = f", and --fraction {fraction:g} leaves {fitted} to fit" if fraction else ""
        need = holdout.evaluations_needed(fraction)
        message = (
            f"{len(short)} of {len(curves)} learning curves have {_evaluations(short)} "
            f"evaluations{cut}: extrapolate needs >= {MIN_DISTINCT} fitted, so >= {need} "
            f"evenly spaced evaluations per run: {_eval_every(frame, need)}"
        )
    else:
        counts = ", ".join(f"{s.name}: {len(np.unique(s.x_fit))}" for s in short)
        held = f" before the held-out last {fraction:g} of their log-x range" if fraction else ""
        instead = _curves_instead(args, frame, fraction) if args.runs else None
        message = (
            f"{len(short)} of {len(curves)} frontiers have fewer than {MIN_DISTINCT} points"
            f"{held} ({counts}; a cell that a cell of less {args.x} beats is not on its "
            f"frontier): a frontier needs "
            f">= {MIN_DISTINCT} {MORE_POINTS[args.x]} to the grid"
            + (f"; {instead}" if instead else "")
        )
    if len(short) == len(curves):
        raise UserError(message)
    print(f"skipped: {message}", file=sys.stderr)
    return [c for c in curves if all(c is not s for s in short)]


def _evaluations(curves: list) -> str:
    """How many evaluations the curves have, e.g. "3" or "2-5"."""
    import numpy as np

    return _span(len(np.unique(np.r_[s.x_fit, s.x_held])) for s in curves)


def _eval_every(frame, need: int) -> str:
    """The train.eval_every that gives ``need`` evenly spaced evaluations per run."""
    steps = sorted({int(s) for s in frame["steps"].dropna()})
    if steps and steps[0] < need:
        return f"train for at least {need} steps (train.steps is {steps[0]}), evaluating every 1/{need}"
    every = (
        f"at most {steps[0] // need} (train.steps {steps[0]} / {need})"
        if len(steps) == 1
        else f"at most 1/{need} of train.steps"
    )
    return f"set train.eval_every to {every} and train again"


def _curves_instead(args: argparse.Namespace, frame, fraction: float | None) -> str | None:
    """What the runs' own learning curves (--curves) support where their frontier cannot
    be fitted: the options that work, or the evaluations per run they lack (None: --metric
    has no learning curve)."""
    import numpy as np

    from analysis import holdout

    try:
        curves, _ = _cell_curves(args, frame[frame["path"].notna()], None)
    except UserError:  # --metric names no curve (a fine-tune's top-1): nothing to add
        return None
    if not curves:
        return "no few-shot learning curves in metrics.jsonl either"
    have = min(len(np.unique(s.x_fit)) for s in curves)
    options = {
        "vitscale predict --curves --at X": None,
        "vitscale backtest --curves": fraction or DEFAULT_FRACTION,
    }
    if args.mode == "backtest":
        del options["vitscale predict --curves --at X"]
    elif args.mode == "predict":
        del options["vitscale backtest --curves"]
    needs = {option: holdout.evaluations_needed(f) for option, f in options.items()}
    works = [option for option, need in needs.items() if have >= need]
    if len(works) == len(needs):
        return "a learning curve per cell: " + (
            "add --curves" if len(needs) == 1 else f"use {' or '.join(works)}"
        )
    lacking = {option: need for option, need in needs.items() if have < need}
    said = ", ".join(f"{option} needs >= {need}" for option, need in lacking.items())
    why = f"{said} evenly spaced evaluations per run: {_eval_every(frame, max(lacking.values()))}"
    if works:
        return f"a learning curve per cell: use {works[0]} ({why})"
    return f"the learning curves per cell have {_evaluations(curves)} evaluations: {why}"


def _span(values) -> str:
    """``{3}`` -> "3", ``{2, 3, 5}`` -> "2-5"."""
    values = sorted(set(values))
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _failure_lines(failures: dict[str, str], what: str) -> list[str]:
    """One line per reason, naming the curves it stopped (not one line per curve)."""
    by_reason: dict[str, list[str]] = {}
    for name, why in failures.items():
        by_reason.setdefault(why, []).append(name)
    return [
        f"cannot {what} {', '.join(names) if len(names) <= 3 else f'{len(names)} curves ({names[0]}, ...)'}: {why}"
        for why, names in by_reason.items()
    ]


def _x_units(args: argparse.Namespace) -> str:
    return (
        "examples seen"
        if args.curves
        else {
            "exaflops": "pre-training exaFLOPs",
            "examples": "pre-training images",
            "examples_seen": "examples seen",
        }[args.x]
    )


def run_predict(args: argparse.Namespace) -> int:
    """Handler of ``vitscale predict --at X ...``: each curve's predicted error at X with
    extrapolate's --level interval, the columns explained, the interval's calibration said."""
    import json

    from analysis import holdout

    _check_law(args)
    if bad := [x for x in args.at if not x > 0]:
        raise UserError(f"--at {bad[0]:g}: x must be a positive {_x_units(args)} count")
    curves, _, _ = _curves(args, None)
    rows, failures = holdout.predictions(curves, args.at, level=args.level)
    if args.json:
        out = {
            "x": _x_units(args),
            "level": args.level,
            "predictions": [r.as_dict() for r in rows],
            "failures": failures,
            "calibration": holdout.calibration_note(args.level),
        }
        print(json.dumps(out, indent=2))
    elif rows:
        print(holdout.prediction_table(rows).to_string(index=False), end="\n\n")
        print("\n".join(holdout.prediction_legend(rows, level=args.level, x=_x_units(args))))
        print(holdout.calibration_note(args.level))
    for line in _failure_lines(failures, "predict"):
        print(line, file=sys.stderr)
    if not rows:
        raise UserError(
            f"no curve could be extrapolated ({'; '.join(dict.fromkeys(failures.values()))})"
        )
    return 0


def run_backtest(args: argparse.Namespace) -> int:
    """Handler of ``vitscale backtest``: a table of the curves' RMSE of log error, coverage and
    width, its columns explained, and their summary (:mod:`analysis.holdout`)."""
    import json

    from analysis import holdout

    _check_law(args)
    fraction = _fraction(args)
    splits, _, _ = _curves(args, fraction)
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
            print("\n".join(holdout.legend(level=args.level, fraction=fraction)), end="\n\n")
        print("\n".join(holdout.summary_lines(summary)))
        if scores and args.estimator == "extrapolate":
            print(holdout.calibration_note(args.level))
        for line in _failure_lines(failures, "backtest"):
            print(line)
    if not scores:
        raise UserError(
            f"no curve could be backtested ({'; '.join(dict.fromkeys(failures.values())) or 'none'})"
        )
    return 0


def configure_summary(p: argparse.ArgumentParser) -> None:
    _add_runs(p)
    p.add_argument(
        "--metric",
        metavar="COLUMN",
        help="accuracy column to compare, or 'average(a, b, ...)' of several (default: the "
        "grid's first few-shot set at 5 shots, else its first shot count; with --shots K, the mean over "
        "transfer tasks of the best K-shot accuracy)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _run_control(cells, args: argparse.Namespace) -> int:
    """``vitscale summary`` on the control's cells: its registered verdict
    (experiments/preregistered/permuted.md, :mod:`analysis.control`)."""
    import json

    from analysis import control

    if args.metric:
        raise UserError(
            "--metric: the control's metric is registered (each world's own transfer "
            "glyphs, 5-shot unless --shots says otherwise); leave --metric out"
        )
    with user_errors(ValueError):
        c = control.summarise(cells, shots=args.shots or control.SHOTS)
    if args.json:
        print(json.dumps(c.to_dict(), indent=2))
        return 0
    print(
        f"{c.shots}-shot accuracy on each world's transfer glyphs (%), by level, model and "
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
    if is_control(cells):
        return _run_control(cells, args)
    with user_errors(ValueError):
        s = summary.summarise(cells, metric=args.metric, shots=args.shots, settings=args.settings)
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
