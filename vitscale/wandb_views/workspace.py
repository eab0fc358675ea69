"""The grid's saved W&B workspace view, built with wandb's ``wandb-workspaces`` library:
Figs. 4 and 5 as W&B panels (accuracies are fractions, as logged), curves against
examples seen and exaFLOPs (live while the grid runs) and the run table.

Runs are filtered to the grid's W&B group. Every run gets a fixed colour: one hue per
family (ViT blue, ResNet orange, hybrid green, as in ``vitscale figures``) and one shade
per model within it, so Fig. 4 reads one series per model and Fig. 5 reads by family.
Fig. 4 and Fig. 5 points are result.json values: a cell appears when it finishes. Panel
ids are derived from their content, so building the same grid twice gives the same JSON.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .. import record as rf
from ..record.wandb import IDENTITY
from . import keys as K
from .study import Study


def model_colors(study: Study) -> dict[str, str]:
    """A colour per model, the figures' own (:func:`analysis.style.model_color`: its
    family's colour, a shade per patch), so a model looks the same in W&B and on paper."""
    from analysis import style

    family = {c.model: c.family for c in study.cells}
    return {model: style.model_color(model, family[model]) for model in study.models}


def _id(*parts: str) -> str:
    return "vs" + hashlib.sha1("\0".join(parts).encode()).hexdigest()[:10]


def stable_ids(section: str, panels: list) -> list:
    """Give panels ids derived from their section and title (the library draws random
    ones), so the same grid always gives the same spec."""
    for p in panels:
        p._id = _id(section, getattr(p, "title", None) or "", type(p).__name__)
    return panels


def _label(metric: str) -> str:
    """A panel's name for a metric: an own set by its folder's name ("shapes 5-shot")."""
    from analysis.paper import dataset_name

    if parsed := rf.parse_fewshot_key(metric):
        return f"{dataset_name(parsed[0])} {parsed[1]}-shot"
    if dataset := rf.parse_finetune_key(metric):
        return f"{dataset_name(dataset)} fine-tuned"
    return metric


def transfer_metrics(study: Study) -> list[str]:
    """Fig. 5's y axes: fine-tuned accuracies, then the best few-shot accuracies."""
    return [rf.finetune_key(ds) for ds in study.finetune] + [
        K.best(rf.fewshot_key(ds, k)) for ds, k in study.fewshot
    ]


def fig4_panels(study: Study) -> list:
    import wandb_workspaces.reports.v2 as wr

    return stable_ids(
        "fig4",
        [
            wr.ScatterPlot(
                title=f"Fig. 4: {ds} {k}-shot, best during training vs pre-training images",
                x=wr.Config("data.num_examples"),
                y=wr.SummaryMetric(K.best(rf.fewshot_key(ds, k))),
                log_x=True,
            )
            for ds, k in study.fewshot
        ],
    )


def fig5_panels(study: Study) -> list:
    import wandb_workspaces.reports.v2 as wr

    return stable_ids(
        "fig5",
        [
            wr.ScatterPlot(
                title=f"Fig. 5: {_label(metric.removeprefix(rf.BEST))} vs pre-training exaFLOPs",
                x=wr.SummaryMetric(K.EXAFLOPS),
                y=wr.SummaryMetric(metric),
                log_x=True,
            )
            for metric in transfer_metrics(study)
        ],
    )


def curve_panels(study: Study, x: str) -> list:
    import wandb_workspaces.reports.v2 as wr

    metrics = [rf.fewshot_key(ds, k) for ds, k in study.fewshot] + [rf.TRAIN_LOSS]
    return stable_ids(
        f"curves:{x}",
        [
            wr.LinePlot(
                title=f"{_label(metric)} vs {x}",
                x=x,
                y=[metric],
                log_x=x == rf.EXAFLOPS,
                max_runs_to_show=max(len(study.cells), 10),
            )
            for metric in metrics
        ],
    )


def table_columns(study: Study) -> list[str]:
    """The run table's columns, in W&B's ``section:name`` spelling."""
    best = [rf.fewshot_key(ds, k) for ds, k in study.fewshot]
    return [
        "run:displayName",
        "config:model.name.value",
        *(f"summary:{k}" for k in IDENTITY),
        "config:data.subset.value",
        "config:data.num_examples.value",
        "run:state",
        f"summary:{K.RESTARTS}",
        *(f"summary:{K.best(m)}" for m in best),
        *(f"summary:{rf.finetune_key(ds)}" for ds in study.finetune),
        f"summary:{K.EXAFLOPS}",
        f"summary:{K.DEVICE_HOURS}",
    ]


def build_workspace(study: Study, *, entity: str, project: str, name: str | None = None):
    """The workspace view of one grid (a ``wandb_workspaces.workspaces.Workspace``)."""
    import wandb_workspaces.workspaces as ws

    colors = model_colors(study)
    sections = [
        ("Fig. 4: best few-shot accuracy vs pre-training images", fig4_panels(study)),
        ("Fig. 5: transfer accuracy vs pre-training compute", fig5_panels(study)),
        ("Curves vs examples seen", curve_panels(study, rf.EXAMPLES_SEEN)),
        ("Curves vs pre-training exaFLOPs", curve_panels(study, rf.EXAFLOPS)),
    ]
    return ws.Workspace(
        entity=entity,
        project=project,
        name=name or f"vitscale: {study.group}",
        sections=[
            ws.Section(name=title, panels=panels, is_open=True)
            for title, panels in sections
            if panels
        ],
        settings=ws.WorkspaceSettings(x_axis=rf.EXAMPLES_SEEN, max_runs=max(len(study.cells), 10)),
        runset_settings=ws.RunsetSettings(
            filters=ws.And(ws.Metric("Group") == study.group),
            order=[
                ws.Ordering(ws.Config("model.name")),
                ws.Ordering(ws.Config("data.num_examples")),
            ],
            pinned_columns=table_columns(study),
            run_settings={
                c.id: ws.RunSettings(color=colors[c.model])
                for c in sorted(study.cells, key=lambda c: c.id)
            },
        ),
    )


_LISTED = 6  # panels named per section in a summary; the rest counted


def _panels(panels: list, indent: str = "    ") -> list[str]:
    titles = [getattr(p, "title", None) or type(p).__name__ for p in panels]
    lines = [f"{indent}{t}" for t in titles[:_LISTED]]
    if len(titles) > _LISTED:
        lines.append(f"{indent}... and {len(titles) - _LISTED} more")
    return lines


def workspace_summary(workspace, study: Study) -> list[str]:
    """What ``--dry-run`` prints: the view, its runs and its sections with their panels,
    on one screen (``--json`` prints the whole spec)."""
    runs = f"{len(study.cells)} runs of W&B group {study.group!r}"
    lines = [
        f"workspace {workspace.name!r} in {workspace.entity}/{workspace.project}: {runs}, "
        f"{len(study.models)} model(s) ({', '.join(study.models)})",
    ]
    for section in workspace.sections:
        lines.append(f"  {section.name} ({len(section.panels)} panels)")
        lines += _panels(section.panels)
    return lines


def workspace_spec(workspace) -> dict[str, Any]:
    """The view exactly as it is sent to W&B (``--dry-run`` prints this)."""
    return workspace._to_model().model_dump(mode="json", by_alias=True, exclude_none=True)
