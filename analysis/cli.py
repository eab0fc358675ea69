"""``vitscale figures`` and ``vitscale fit``: argument set-up and handlers.

vitscale/cli.py registers these; this module imports nothing heavy at import time so
``vitscale --help`` stays fast (pandas and matplotlib load inside the handlers).

``vitscale figures --paper --out DIR`` redraws the paper's figures from its tables:

- ``paper_fig3_transfer_imagenet.png|pdf``: Fig. 3 from Table 5 (band: Table 6's ResNets);
- ``paper_fig5_compute.png|pdf``: Fig. 5 (average-5 and ImageNet panels) from Table 6
  (``--fit`` adds the power-law fits);
- ``paper_table6.md``, ``paper_table6.tex``: Table 6.

(The ``paper_`` prefix keeps them apart from ours when both are drawn into one folder.)

``vitscale figures RUNS_DIR... --out DIR`` draws ours (finished cells only):

- ``fig4_<metric>.png|pdf``: each few-shot dataset's best ``--shots``-shot accuracy
  against pre-training dataset size, one line per ``--group-by`` value (Fig. 4);
- ``fig5_compute.png|pdf``: accuracy against pre-training exaFLOPs, a panel for the
  average over the transfer metrics found and one per metric, Pareto frontier per family
  (Fig. 5); ``--fit`` adds the Zhai et al. power law with its bootstrap band;
- ``fig3_<metric>.png|pdf``: only when the runs span several pre-training datasets;
- ``table6.md``, ``table6.tex``: our cells, the paper's values beside them for models
  the paper has;
- ``curves_<metric>.png|pdf`` with ``--curves``: the same metrics along training.

``vitscale figures --wandb ENTITY/PROJECT --group GRID --out DIR`` draws the same files
from the grid's W&B runs (:func:`analysis.load.load_wandb`, online), so a laptop with no
run folders can redraw a study.

``--overlay-paper`` draws Table 6's points (hollow markers) in every compute panel whose
metric the paper measured under the same name (fine-tuned ``finetune/imagenet/top1``
and the other Table 6 datasets). Few-shot or synthetic-task accuracy is not comparable
with the paper's fine-tuned accuracy; then the paper's two panels are drawn beside ours
in the same figure, on their own y axes, and a note says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = [
    "configure_figures",
    "run_figures",
    "draw_figures",
    "compute_metrics",
    "configure_fit",
    "run_fit",
    "X_COLUMNS",
]

# --x of `vitscale fit`: the cost axis of the law.
X_COLUMNS = {"exaflops": "exaflops", "examples": "num_examples", "examples_seen": "examples_seen"}


def _user_error(message: str) -> Exception:
    from vitscale.cli import UserError  # lazily: vitscale.cli imports this module

    return UserError(message)


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
    from vitscale.results import load_runs

    try:
        cells, problems = load_runs(paths, progress=progress)
    except FileNotFoundError as e:
        raise _user_error(str(e)) from None
    if problems:
        print(f"skipped {len(problems)} unreadable run folder(s):", file=sys.stderr)
        for p in problems[:20]:
            print(f"  {p}", file=sys.stderr)
        if len(problems) > 20:
            print(f"  ... and {len(problems) - 20} more", file=sys.stderr)
    return cells


def _check_column(cells, column: str, option: str) -> None:
    if column not in cells.columns:
        config = [c for c in cells.columns if c.startswith("config.")][:8]
        raise _user_error(
            f"{option} {column!r}: no such column; valid are the result columns "
            f"(model, family, size, patch, pretrain_dataset, num_examples, ...) and the "
            f"config columns ({', '.join(config)}, ...)"
        )


def _paper_figures(out: Path, formats, *, fit: bool, bootstrap: int) -> list[Path]:
    from analysis import paper, tables
    from analysis.figures import fig3, fig5

    written = fig3.write_paper(out, formats=formats)
    written += fig5.write_paper(out, fit=fit, bootstrap=bootstrap, formats=formats)
    written += tables.write(
        paper.table6_frame(),
        out,
        stem="paper_table6",
        caption="Paper Table 6: transfer accuracy (%) and pre-training exaFLOPs, JFT-300M.",
    )
    return written


def compute_metrics(done, *, metric: list[str] | None, shots: int):
    """The compute figure's (and Table 6's) metric columns: ``metric`` as given, else the
    transfer metrics found and, when there are several, their average (added to the
    returned frame)."""
    from analysis import metrics as M

    metrics = list(metric) if metric else M.transfer_metrics(done, shots=shots)
    frame = done
    if len(metrics) > 1 and not metric:
        frame, avg = M.add_average(done, metrics)
        metrics = [avg, *metrics]
    return frame, metrics


def draw_figures(cells, args, *, history=None) -> list[Path]:
    """Our figures and Table 6 from a cells frame, as ``vitscale figures`` draws them;
    ``history(done_cells)`` gives the curves' per-step frame (default: the run folders'
    metrics.jsonl)."""
    return _run_figures(cells, args, history=history)


def _run_figures(cells, args, *, history=None) -> list[Path]:
    from analysis import metrics as M
    from analysis import paper, tables
    from analysis.figures import curves, fig3, fig4, fig5
    from analysis.summary import fig4_steps, fig5_cells
    from vitscale.results import load_history
    from vitscale.runfolder import STATUS_DONE

    done = cells[cells["status"] == STATUS_DONE]
    if done.empty:
        counts = cells["status"].value_counts().to_dict()
        raise _user_error(f"no finished cells to plot (statuses: {counts or 'no cells'})")
    for option, column in (("--group-by", args.group_by), ("--color-by", args.color_by)):
        _check_column(done, column, option)
    for m in args.metric or ():
        _check_column(done, m, "--metric")
    out, formats = args.out, args.formats
    written: list[Path] = []

    fewshot = M.fewshot_metrics(done, shots=args.shots)
    for metric in fewshot:
        written += fig4.write(
            done, out, metric=metric, hue=args.group_by, agg=args.agg, formats=formats
        )
    if not fewshot:
        print(f"note: no {args.shots}-shot metrics found; no Fig. 4-style plot", file=sys.stderr)

    frame, metrics = compute_metrics(done, metric=args.metric, shots=args.shots)
    compute = fig5_cells(frame)  # Fig. 5 and Table 6: the largest subset of each set
    t6 = paper.table6_frame()
    panels = []
    for m in metrics:
        overlay = args.overlay_paper and M.comparable(m, t6)
        panels.append(fig5.Panel(compute, m, M.short_label(m), t6 if overlay else None))
    if args.overlay_paper and not any(p.reference is not None for p in panels):
        print(
            "note: the paper's Table 6 is fine-tuned accuracy on ImageNet, CIFAR, Pets and "
            f"Flowers; none of {metrics} is comparable, so its panels are drawn beside ours",
            file=sys.stderr,
        )
        panels += [fig5.Panel(t6, m, f"Paper: {title}") for m, title in fig5.PAPER_PANELS]
    if metrics:
        written += fig5.write(
            panels,
            out,
            hue=args.color_by,
            fit=args.fit,
            bootstrap=args.bootstrap,
            formats=formats,
        )

    if done["pretrain_dataset"].nunique() > 1 and metrics:
        written += fig3.write(frame, out, metric=metrics[0], agg=args.agg, formats=formats)

    written += tables.write(fig5_cells(done), out, metrics=metrics or None, reference=t6)

    if args.curves:  # Fig. 4's cells: a grid's shorter Fig. 5 runs would mix into its curves
        duration = fig4_steps(done)
        fig4_cells = done if duration is None else done[done["steps"] == duration]
        steps = history(fig4_cells) if history is not None else load_history(fig4_cells)[0]
        for metric in fewshot:
            written += curves.write(
                steps, out, metric=metric, hue=args.group_by, agg=args.agg, formats=formats
            )
    return written


def _load_wandb(path: str, group: str | None, *, curves: bool):
    """Cells (and a history loader for --curves) of one grid's W&B runs, online."""
    entity, _, project = path.partition("/")
    if not entity or not project or "/" in project:
        raise _user_error(f"--wandb {path!r}: expected ENTITY/PROJECT, e.g. my-team/vitscale")
    if not group:
        raise _user_error("--wandb needs --group GRID (the grid's name: its runs' W&B group)")
    from analysis.load import load_wandb, load_wandb_history
    from vitscale.wandb_views import remote

    try:
        api = remote.open_project(entity, project, group=group)
        with remote.translated_errors():
            cells, problems = load_wandb(project=project, entity=entity, group=group, api=api)
    except remote.WandbError as e:
        raise _user_error(str(e)) from None
    for p in problems:
        print(f"skipped: {p}", file=sys.stderr)

    def history(done):
        try:
            with remote.translated_errors():
                steps = load_wandb_history(project=project, entity=entity, group=group, api=api)
        except remote.WandbError as e:
            raise _user_error(str(e)) from None
        return steps[steps["cell_id"].isin(set(done["cell_id"]))]

    return cells, (history if curves else None)


def run_figures(args: argparse.Namespace) -> int:
    """Handler of ``vitscale figures``: prints the files written, one per line."""
    if not args.paper and not args.runs and not args.wandb:
        raise _user_error(
            "vitscale figures: give RUNS_DIR..., --wandb ENTITY/PROJECT and/or --paper"
        )
    if args.wandb and args.runs:
        raise _user_error("give RUNS_DIR... or --wandb ENTITY/PROJECT, not both")
    if args.group and not args.wandb:
        raise _user_error("--group selects a grid's W&B runs: use it with --wandb ENTITY/PROJECT")
    if args.shots < 1:
        raise _user_error(f"--shots must be a positive integer, got {args.shots}")
    if args.bootstrap < 0:
        raise _user_error(f"--bootstrap must be >= 0, got {args.bootstrap}")
    written: list[Path] = []
    if args.paper:
        written += _paper_figures(args.out, args.formats, fit=args.fit, bootstrap=args.bootstrap)
    if args.runs:
        cells = _load(args.runs)
        if cells.empty:
            raise _user_error(f"no run folders found under {' '.join(args.runs)}")
        written += _run_figures(cells, args)
    if args.wandb:
        cells, history = _load_wandb(args.wandb, args.group, curves=args.curves)
        if cells.empty:
            raise _user_error(f"no W&B runs in group {args.group!r} of {args.wandb}")
        written += _run_figures(cells, args, history=history)
    for path in written:
        print(path)
    return 0


# --------------------------------------------------------------------------- fit


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

    from analysis import metrics as M
    from analysis import paper, scaling
    from vitscale.runfolder import STATUS_DONE

    if not args.paper and not args.runs:
        raise _user_error("vitscale fit: give RUNS_DIR... and/or --paper")
    if args.bootstrap < 0:
        raise _user_error(f"--bootstrap must be >= 0, got {args.bootstrap}")
    if not 0 < args.level < 1:
        raise _user_error(f"--level must lie in (0, 1), got {args.level}")
    frames = [paper.table6_frame()] if args.paper else []
    if args.runs:
        cells = _load(args.runs)
        frames.append(cells[cells["status"] == STATUS_DONE])
    frame = pd.concat(frames, ignore_index=True)
    metric = args.metric
    if metric is None:
        found = M.transfer_metrics(frame, shots=args.shots)
        if not found:
            raise _user_error("no transfer metrics (few-shot or fine-tuning) in the results")
        metric = found[0]
        if len(found) > 1:
            frame, metric = M.add_average(frame, found)
    elif metric not in frame.columns:
        try:
            frame, _ = M.add_average(frame, M.average_parts(metric))
        except ValueError:
            valid = ", ".join(M.transfer_metrics(frame, shots=args.shots)) or "none found"
            raise _user_error(f"--metric {metric!r}: no such column; metrics: {valid}") from None
    x = X_COLUMNS[args.x]
    by = None if args.by.lower() == "none" else args.by
    if by is not None and by not in frame.columns:
        raise _user_error(f"--by {by!r}: no such column (e.g. family, model, size, grid)")
    groups = [("all", frame)] if by is None else list(frame.groupby(by, sort=True))
    results, failures = {}, {}
    for name, group in groups:
        try:
            results[str(name)] = scaling.fit_frontier(
                group,
                metric=metric,
                x=x,
                bootstrap=args.bootstrap,
                level=args.level,
                seed=args.seed,
                progress=not args.json,
            )
        except ValueError as e:
            failures[str(name)] = str(e)
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
        raise _user_error(f"no group could be fitted ({'; '.join(failures.values())})")
    return 0


# --------------------------------------------------------------------------- summary


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
        raise _user_error("vitscale summary: give RUNS_DIR...")
    cells = _load(args.runs, progress=False)
    try:
        s = summary.summarise(cells, metric=args.metric, shots=args.shots)
    except ValueError as e:
        raise _user_error(str(e)) from None
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
