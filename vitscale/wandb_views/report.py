"""The W&B report of a finished (or partly finished) grid: what ``vitscale wandb report
--help`` lists, all computed locally from the run folders before anything is sent.

W&B reports embed media that live in runs, so the figures and the table are logged to
one *assets run* (job type ``report``, group ``<grid>.report``, kept out of the grid's
own group) whose id is a digest of its content: publishing the same results twice
reuses it, and a report save that failed after the upload is retried without uploading
again.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import keys as K
from .study import Study, StudyError

ASSETS_JOB_TYPE = "report"
TABLE_KEY = "table6"
FIGURE_PREFIX = "figures/"
VERDICT_KEY = "verdict"


def version() -> str:
    """vitscale's version, with the git commit when running from a checkout."""
    import vitscale

    text = vitscale.__version__
    try:
        commit = subprocess.run(
            ["git", "-C", str(Path(vitscale.__file__).parent), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if commit.returncode == 0 and commit.stdout.strip():
            text += f" (git {commit.stdout.strip()})"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return text


@dataclass(frozen=True)
class ReportAssets:
    """Everything the report shows that is computed here rather than read live."""

    group: str
    cells_total: int
    cells_done: int
    figures: tuple[Path, ...]  # PNG files
    table_columns: tuple[str, ...]
    table_rows: tuple[tuple, ...]
    table_markdown: str
    verdict: tuple[str, ...]
    grid_file: str | None
    grid_text: str | None
    version: str

    @property
    def group_of_assets(self) -> str:
        return f"{self.group}.report"

    def figure_key(self, path: Path) -> str:
        return FIGURE_PREFIX + path.stem

    def digest(self) -> str:
        h = hashlib.sha256()
        for part in (
            self.group,
            json.dumps([self.table_columns, self.table_rows], default=str),
            "\n".join(self.verdict),
            self.grid_text or "",
            self.version,
        ):
            h.update(part.encode() + b"\0")
        for path in self.figures:
            h.update(path.name.encode() + b"\0" + path.read_bytes())
        return h.hexdigest()

    @property
    def run_id(self) -> str:
        return f"vitscale-report-{self.digest()[:12]}"

    def manifest(self) -> dict[str, Any]:
        """What ``--dry-run`` prints beside the report spec."""
        return {
            "run_id": self.run_id,
            "group": self.group_of_assets,
            "cells": {"total": self.cells_total, "done": self.cells_done},
            "figures": {self.figure_key(p): str(p) for p in self.figures},
            TABLE_KEY: {
                "columns": list(self.table_columns),
                "rows": [list(r) for r in self.table_rows],
            },
            VERDICT_KEY: list(self.verdict),
            "grid_file": self.grid_file,
            "version": self.version,
        }


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    try:
        import pandas as pd

        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return str(value)


def _grid_text(study: Study, grid_file: Path | None) -> tuple[str | None, str | None]:
    """The grid file's text: the one given, else the one the cells last ran from (recorded
    in their config.json by ``vitscale grid``), else ``experiments/<grid>.yaml`` if present."""
    recorded = Path(study.grid_file) if study.grid_file else None
    path = grid_file or next(
        (p for p in (recorded, Path("experiments") / f"{study.group}.yaml") if p and p.is_file()),
        Path("experiments") / f"{study.group}.yaml",
    )
    if not path.is_file():
        if grid_file is not None:
            raise StudyError(f"--grid-file {grid_file}: no such file")
        return None, None
    from ..grid.spec import load_grid

    try:
        name = load_grid(path).name
    except ValueError as e:
        raise StudyError(str(e).splitlines()[0]) from None
    if name != study.group:
        if grid_file is None:
            return None, None
        raise StudyError(
            f"--grid-file {path} is grid {name!r}, but the runs are grid {study.group!r}"
        )
    return str(path), path.read_text()


def check_inputs(study: Study, *, grid_file: Path | None = None) -> tuple[str | None, str | None]:
    """What :func:`build_assets` would refuse, checked without drawing anything (so a
    command can check W&B in between and still write nothing on a failure); returns the
    grid file's path and text (None when not attached)."""
    if not study.run_dirs:
        raise StudyError("a report is made from run folders (runs/<grid>), not a grid file")
    if not any(c.status == "done" for c in study.cells):
        counts = dict(Counter(str(c.status) for c in study.cells))
        raise StudyError(f"no finished cells to report yet (statuses: {counts})")
    return _grid_text(study, grid_file)


def build_assets(
    study: Study, *, out: Path, shots: int = 5, grid_file: Path | None = None
) -> ReportAssets:
    """Draw the figures into ``out`` and compute the table and the verdict."""
    from analysis import paper, summary, tables
    from analysis.draw import FigureOptions, compute_metrics, draw_figures
    from analysis.settings import label_settings

    from ..record import STATUS_DONE
    from ..record.cells import load_runs

    grid_path, grid_text = check_inputs(study, grid_file=grid_file)
    cells, _ = label_settings(load_runs(study.run_dirs)[0])
    done = cells[cells["status"] == STATUS_DONE]

    options = FigureOptions(out=out, shots=shots, curves=True, formats=("png",))
    written = draw_figures(cells, options)
    figures = tuple(p for p in written if p.suffix == ".png")

    frame, metrics = compute_metrics(done, metric=None, shots=shots)
    table = tables.table6(  # as `vitscale figures` writes it: each set's largest subset
        summary.fig5_cells(frame), metrics=metrics or None, reference=paper.table6_frame()
    )
    markdown = next(
        (p.read_text() for p in written if p.name == "table6.md"), tables.to_markdown(table)
    )
    try:
        verdict = tuple(summary.summarise(cells, shots=shots).lines())
    except ValueError as e:
        verdict = (f"no verdict: {e}",)
    return ReportAssets(
        group=study.group,
        cells_total=len(cells),
        cells_done=len(done),
        figures=figures,
        table_columns=tuple(str(c) for c in table.columns),
        table_rows=tuple(tuple(_plain(v) for v in row) for row in table.itertuples(index=False)),
        table_markdown=markdown,
        verdict=verdict,
        grid_file=grid_path,
        grid_text=grid_text,
        version=version(),
    )


def build_report(
    study: Study, assets: ReportAssets, *, entity: str, project: str, title: str | None = None
):
    """The report (a ``wandb_workspaces.reports.v2.Report``), ready to save."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces import expr

    from .workspace import fig4_panels, fig5_panels, stable_ids

    # Runsets name no project: they read the report's own (naming one makes the library
    # look its id up over the network while building the spec).
    grid_runs = wr.Runset(
        name=f"grid {study.group}",
        filters=expr.And(expr.Metric("Group") == study.group),
    )
    assets_run = wr.Runset(
        name="report assets",
        filters=expr.And(expr.Metric("ID") == assets.run_id),
    )
    media = stable_ids(
        "report:figures",
        [
            wr.MediaBrowser(title=p.stem, media_keys=[assets.figure_key(p)], num_columns=1)
            for p in assets.figures
        ],
    )
    table = stable_ids(
        "report:table",
        [wr.WeavePanelSummaryTable(table_name=TABLE_KEY, layout=wr.Layout(w=24, h=12))],
    )
    live = fig4_panels(study) + fig5_panels(study)
    unfinished = assets.cells_total - assets.cells_done
    status = f"{assets.cells_done} of {assets.cells_total} cells finished" + (
        f"; {unfinished} still running, pending or failed (figures show finished cells)"
        if unfinished
        else ""
    )
    blocks = [
        wr.P(f"Grid {study.group}: {status}. Made with vitscale {assets.version}."),
        wr.H2("The measured answer"),
        wr.UnorderedList(items=list(assets.verdict)),
        wr.H2("Figures"),
        wr.PanelGrid(runsets=[assets_run], panels=media),
        wr.H2("Table 6: ours beside the paper's"),
        wr.PanelGrid(runsets=[assets_run], panels=table),
        wr.MarkdownBlock(text=assets.table_markdown),
        wr.H2("Live: Figs. 4 and 5 over the grid's runs"),
        wr.PanelGrid(runsets=[grid_runs], panels=live),
        wr.H2("Grid file"),
    ]
    if assets.grid_text is not None:
        blocks += [
            wr.P(assets.grid_file or ""),
            wr.CodeBlock(code=assets.grid_text, language="yaml"),
        ]
    else:
        blocks.append(wr.P("Not attached: give --grid-file to include it."))
    return wr.Report(
        entity=entity,
        project=project,
        title=title or f"vitscale: {study.group}",
        description=status,
        blocks=blocks,
        width="fluid",
    )


def report_summary(report, assets: ReportAssets) -> list[str]:
    """What ``--dry-run`` prints: the report's title, its cells, its sections (each H2 with
    what follows it: panels named, other blocks counted) and the figures it uploads, on one
    screen (``--json`` prints the whole spec and the assets)."""
    from .workspace import _panels

    lines = [
        f"report {report.title!r} in {report.entity}/{report.project}: "
        f"{assets.cells_done} of {assets.cells_total} cells finished; "
        f"{len(assets.figures)} figure(s) and Table 6 uploaded as run {assets.run_id!r}",
    ]
    for block in report.blocks:
        kind = type(block).__name__
        if kind in ("H1", "H2", "H3"):
            lines.append(f"  {block.text}")
        elif kind == "PanelGrid":
            lines += _panels(list(block.panels))
        elif kind == "UnorderedList":
            lines += [f"    {item}" for item in block.items]
    return lines


def report_spec(report) -> dict[str, Any]:
    """The report exactly as it is sent to W&B (``--dry-run`` prints this)."""
    return report._to_model().model_dump(mode="json", by_alias=True, exclude_none=True)


def log_assets(
    assets: ReportAssets, *, entity: str | None, project: str, mode: str, directory: Path
) -> str:
    """Log the figures, Table 6 and the verdict to the assets run; returns its id.

    ``mode`` is wandb's: ``online`` to publish, ``offline`` to write it for ``wandb sync``
    (and for tests, which read it back with ``wandb leet inspect``).
    """
    import wandb

    run = wandb.init(
        entity=entity,
        project=project,
        id=assets.run_id,
        name=f"report {assets.group}",
        group=assets.group_of_assets,
        job_type=ASSETS_JOB_TYPE,
        tags=["vitscale-report"],
        config={"grid": assets.group, "grid_file": assets.grid_file, "vitscale": assets.version},
        resume="allow",
        dir=str(directory),
        mode=mode,
        settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
    )
    try:
        payload: dict[str, Any] = {
            assets.figure_key(p): wandb.Image(str(p), caption=p.stem) for p in assets.figures
        }
        payload[TABLE_KEY] = wandb.Table(
            columns=list(assets.table_columns), data=[list(r) for r in assets.table_rows]
        )
        run.log(payload)
        run.summary[VERDICT_KEY] = "\n".join(assets.verdict)
        run.summary[K.STATUS] = "done"
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish()
    return assets.run_id
