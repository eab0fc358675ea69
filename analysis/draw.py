"""Every figure and table of a study in one call: what ``vitscale figures`` writes, as a
library (the W&B report draws through it too).

:func:`paper_figures` redraws the paper's own from its tables (``paper_`` prefix, so both
sets can share a folder):

- ``paper_fig3_transfer_imagenet.png|pdf``: Fig. 3 from Table 5 (band: Table 6's ResNets);
- ``paper_fig5_compute.png|pdf``: Fig. 5 (average-5 and ImageNet panels) from Table 6
  (``fit`` adds the power-law fits);
- ``paper_table6.md``, ``paper_table6.tex``: Table 6.

:func:`draw_figures` draws ours from a cells frame (finished cells only):

- ``fig4_<metric>.png|pdf``: each few-shot dataset's best ``shots``-shot accuracy against
  pre-training dataset size, one line per ``group_by`` value (Fig. 4);
- ``fig5_compute.png|pdf``: accuracy against pre-training exaFLOPs, a panel for the
  average over the transfer metrics found and one per metric, Pareto frontier per family
  (Fig. 5); ``fit`` adds the Zhai et al. power law with its bootstrap band;
- ``fig3_<metric>.png|pdf``: only when the runs span several pre-training datasets;
- ``table6.md``, ``table6.tex``: our cells, the paper's values beside them for models
  the paper has;
- ``curves_<metric>.png|pdf`` with ``curves``: the same metrics along training;
- for the positive control's cells (``worlds``), ``control_gap.png|pdf`` instead of
  Figs. 5 and 3 and Table 6: the gap at the smallest and the largest subset against the
  fraction of pixels moved (:mod:`analysis.figures.control`); its ``fig4_<metric>`` files
  are Fig. 4 per level.

:func:`reference_figures` draws a reference data set (:mod:`analysis.reference`) the same
way; for ``jft-curves``, the JFT-300M learning curves of Alabdulmohsin et al. (2022):

- ``jft-curves_compute_<k>shot.png|pdf``: Fig. 5's view, few-shot error against
  pre-training exaFLOPs, one line per model, crossovers marked;
  ``jft-curves_examples_<k>shot.png|pdf``: against examples seen
  (Fig. 4's axis), every model; ``jft-curves_crossovers_<k>shot.md``: the crossovers.

``overlay_paper`` draws Table 6's points (hollow markers) in every compute panel whose
metric the paper measured under the same name; where none is comparable (few-shot or
synthetic-task accuracy), the paper's two panels are drawn beside ours, with a note.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vitscale.errors import UserError
from vitscale.record import STATUS_DONE

from .figures import AGGREGATES


def _option(default, help: str, **argparse) -> dataclasses.Field:
    """A field that is also ``vitscale figures``' option of its name (``--group-by`` for
    ``group_by``; ``flags`` to name it otherwise), with this default and help; a bool is a
    switch. ``argparse``: what ``add_argument`` takes besides (type, choices, metavar)."""
    return dataclasses.field(default=default, metadata={"help": help, **argparse})


@dataclass(frozen=True)
class FigureOptions:
    """How :func:`draw_figures` draws: the one owner of ``vitscale figures``' options."""

    out: Path = dataclasses.field(
        metadata={
            "help": "folder for the figure files",
            "flags": ("--out", "-o"),
            "type": Path,
            "required": True,
        }  # fmt: skip
    )
    shots: int | None = _option(
        None,
        "k of the k-shot accuracy (default: 5 where the grid measures it, else its first "
        "shot count, eval.fewshot.shots[0])",
        type=int,
    )
    settings: str = _option(
        "show",
        "cells of one model, subset and duration that differ in more than their seed (e.g. "
        "two optim.lr values): 'show' keeps each setting apart, its values after the model's "
        "name (default); 'best' keeps the best setting of each by the seed mean of the "
        "compared metric, as the paper chose its hyper-parameters. Never averaged",
        choices=("show", "best"),
    )
    metrics: Sequence[str] | None = _option(
        None,
        "metric column for the compute figure, repeatable (default: the transfer metrics "
        "found and their average)",
        flags=("--metric",),
        action="append",
        metavar="COLUMN",
    )
    group_by: str = _option(
        "model",
        "one line per value of this column in the data-size figure and the curves (default "
        "model; any column, e.g. config.optim.lr)",
        metavar="COLUMN",
    )
    color_by: str = _option(
        "family",
        "colour and frontier grouping of the compute figure (default family)",
        metavar="COLUMN",
    )
    agg: str = _option(
        "mean",
        "combine cells sharing a line and an x value (default mean over seeds)",
        choices=AGGREGATES,
    )
    overlay_paper: bool = _option(
        False, "draw Table 6's points on comparable compute panels (else beside them)"
    )
    fit: bool = _option(False, "draw the power-law fit on the compute figure")
    bootstrap: int = _option(200, "bootstrap refits for the --fit band (default 200)", type=int)
    curves: bool = _option(False, "also plot the metrics along training")
    formats: Sequence[str] = _option(
        ("png", "pdf"),
        "file formats (default png pdf)",
        flags=("--format",),
        nargs="+",
        choices=("png", "pdf", "svg"),
    )


def check_column(cells, column: str, option: str) -> None:
    """A column a user named must exist; the error lists what does."""
    if column not in cells.columns:
        config = [c for c in cells.columns if c.startswith("config.")][:8]
        raise UserError(
            f"{option} {column!r}: no such column; valid are the result columns "
            f"(model, family, size, patch, pretrain_dataset, num_examples, ...) and the "
            f"config columns ({', '.join(config)}, ...)"
        )


def paper_figures(
    out: Path, formats: Sequence[str] = ("png", "pdf"), *, fit: bool = False, bootstrap: int = 200
) -> list[Path]:
    """The paper's Figs. 3 and 5 and Table 6, redrawn from its tables."""
    from . import paper, tables
    from .figures import fig3, fig5

    written = fig3.write_paper(out, formats=formats)
    written += fig5.write_paper(out, fit=fit, bootstrap=bootstrap, formats=formats)
    written += tables.write(
        paper.table6_frame(),
        out,
        stem="paper_table6",
        caption="Paper Table 6: transfer accuracy (%) and pre-training exaFLOPs, JFT-300M.",
    )
    return written


def reference_figures(
    name: str, out: Path, formats: Sequence[str] = ("png", "pdf"), *, shots: int = 5
) -> list[Path]:
    """A reference data set's curves against compute and examples seen, with crossovers."""
    from vitscale.record import EXAFLOPS, EXAMPLES_SEEN, parse_fewshot_key

    from . import metrics as M
    from .figures import scaling_curves
    from .reference import check_name, jft

    stem = f"{check_name(name)}_{{}}_{shots}shot"
    history = jft.history()
    metrics = M.fewshot_metrics(history, shots=shots)
    if not metrics:
        valid = sorted({p[1] for c in history.columns if (p := parse_fewshot_key(c))})
        raise UserError(f"--shots {shots}: {name} has {', '.join(map(str, valid))}-shot curves")
    uncounted = sorted(history.loc[history[EXAFLOPS].isna(), "model"].unique())
    note = None
    if uncounted:
        note = f"{', '.join(uncounted)}: not drawn (vitscale.flops does not count their layers)"
    written, tables = [], {}
    for x, view, view_note in ((EXAFLOPS, "compute", note), (EXAMPLES_SEEN, "examples", None)):
        paths, found = scaling_curves.write(
            history,
            out,
            metrics=metrics,
            stem=stem.format(view),
            x=x,
            note=view_note,
            formats=formats,
        )
        written += paths
        tables[x] = found
    table = out / f"{stem.format('crossovers')}.md"
    table.write_text(_crossover_table(name, tables))
    return [*written, table]


def _crossover_table(name: str, tables: dict) -> str:
    from . import metrics as M

    lines = [
        f"# Crossovers of the {name} curves (analysis.crossover)",
        "",
        "| x axis | metric | ahead after | behind after | x | between |",
        "|---|---|---|---|---:|---|",
    ]
    for x, found in tables.items():
        for metric, rows in found.items():
            for a, b, c in rows:
                ahead, behind = (a, b) if c.leader == "a" else (b, a)
                lines.append(
                    f"| {x} | {M.short_label(metric)} | {ahead} | {behind} | {c.x:.3g} "
                    f"| [{c.x_before:.3g}, {c.x_after:.3g}] |"
                )
    return "\n".join(lines) + "\n"


def compute_metrics(done, *, metric: Sequence[str] | None, shots: int):
    """The compute figure's (and Table 6's) metric columns: ``metric`` as given, else the
    transfer metrics found and, when there are several, their average (added to the
    returned frame)."""
    from . import metrics as M

    metrics = list(metric) if metric else M.transfer_metrics(done, shots=shots)
    if len(metrics) > 1 and not metric:
        done, avg = M.add_average(done, metrics)
        metrics = [avg, *metrics]
    return done, metrics


def draw_figures(
    cells,
    options: FigureOptions,
    *,
    history: Callable | None = None,
) -> list[Path]:
    """Our figures and Table 6 from a cells frame; ``history(done_cells)`` gives the
    curves' per-step frame (default: the run folders' metrics.jsonl). A frame of the
    positive control's cells (:func:`analysis.control.is_control`) gets its gap figure
    instead of Figs. 5 and 3 and Table 6 (one duration, and each world read on its own
    transfer task: no compute axis, no metric shared between worlds)."""
    done = cells[cells["status"] == STATUS_DONE]
    if done.empty:
        counts = cells["status"].value_counts().to_dict()
        raise UserError(f"no finished cells to plot (statuses: {counts or 'no cells'})")
    o = options
    from . import metrics as M
    from . import settings as S
    from .control import is_control

    if o.shots is None:
        o = dataclasses.replace(o, shots=M.default_shots(done))
    chooser = M.grid_metric(done) or next(iter(M.fewshot_metrics(done, shots=o.shots)), None)
    done, _, chosen = S.apply(done, select=o.settings, metric=chooser)
    for line in chosen:
        print(f"note: {line} (by {chooser})", file=sys.stderr)
    for option, column in (("--group-by", o.group_by), ("--color-by", o.color_by)):
        check_column(done, column, option)
    for m in o.metrics or ():
        check_column(done, m, "--metric")
    fewshot, written = _fig4(done, o)
    if is_control(done):
        written += _control(done, o)
    else:
        frame, metrics = compute_metrics(done, metric=o.metrics, shots=o.shots)
        written += _fig5_fig3_table6(done, frame, metrics, o)
    if o.curves:
        written += _curves(done, fewshot, o, history)
    return written


def _control(done, o: FigureOptions) -> list[Path]:
    from . import control
    from .figures import control as figure

    return figure.write(control.summarise(done, shots=o.shots), o.out, formats=o.formats)


def _fig4(done, o: FigureOptions) -> tuple[list[str], list[Path]]:
    from . import metrics as M
    from .figures import fig4

    fewshot = M.fewshot_metrics(done, shots=o.shots)
    written: list[Path] = []
    for metric in fewshot:
        written += fig4.write(
            done, o.out, metric=metric, hue=o.group_by, agg=o.agg, formats=o.formats
        )
    if not fewshot:
        print(f"note: no {o.shots}-shot metrics found; no Fig. 4-style plot", file=sys.stderr)
    return fewshot, written


def _fig5_fig3_table6(done, frame, metrics: list[str], o: FigureOptions) -> list[Path]:
    from . import metrics as M
    from . import paper, tables
    from .figures import fig3, fig5
    from .summary import fig5_cells

    compute = fig5_cells(frame)  # Fig. 5 and Table 6: the largest subset of each set
    t6 = paper.table6_frame()
    which = _subset_said(frame, compute)
    panels = []
    for m in metrics:
        overlay = o.overlay_paper and M.comparable(m, t6)
        title = M.label(m).removesuffix(" (%)") + which
        panels.append(fig5.Panel(compute, m, title, t6 if overlay else None))
    if o.overlay_paper and not any(p.reference is not None for p in panels):
        print(
            "note: the paper's Table 6 is fine-tuned accuracy on ImageNet, CIFAR, Pets and "
            f"Flowers; none of {metrics} is comparable, so its panels are drawn beside ours",
            file=sys.stderr,
        )
        panels += [fig5.Panel(t6, m, f"Paper: {title}") for m, title in fig5.PAPER_PANELS]
    written: list[Path] = []
    if metrics:
        written += fig5.write(
            panels, o.out, hue=o.color_by, fit=o.fit, bootstrap=o.bootstrap, formats=o.formats
        )
    if done["pretrain_dataset"].nunique() > 1 and metrics:
        written += fig3.write(frame, o.out, metric=metrics[0], agg=o.agg, formats=o.formats)
    written += tables.write(
        fig5_cells(done), o.out, metrics=metrics or None, reference=t6, note=which.strip(" ()")
    )
    return written


def _subset_said(frame, compute) -> str:
    """What part of the cells Fig. 5 and Table 6 read, when it is not all of them."""
    if "num_examples" not in frame.columns or len(compute) == len(frame):
        return ""
    sizes = ", ".join(f"{int(n):,}" for n in sorted(compute["num_examples"].dropna().unique()))
    return f" (the {len(compute)} of {len(frame)} cells at the largest subset: {sizes} images)"


def _curves(done, fewshot: list[str], o: FigureOptions, history: Callable | None) -> list[Path]:
    """Fig. 4's cells along training: a grid's shorter Fig. 5 runs would mix into them."""
    from vitscale.record.cells import load_history

    from .figures import training_curves
    from .summary import fig4_steps

    duration = fig4_steps(done)
    cells = done if duration is None else done[done["steps"] == duration]
    steps = history(cells) if history is not None else load_history(cells)[0]
    written: list[Path] = []
    for metric in fewshot:
        written += training_curves.write(
            steps, o.out, metric=metric, hue=o.group_by, agg=o.agg, formats=o.formats
        )
    return written
