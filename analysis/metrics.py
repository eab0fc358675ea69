"""Which columns of a cells frame (:mod:`vitscale.record.cells`) are transfer metrics,
their averages, and their labels. An average over several transfer metrics is a derived
column: ``average-5`` when it is exactly Fig. 5's five fine-tuning datasets
(docs/protocol.md, "The figures"), else ``average(<metric>, ...)`` naming its parts, so
two averages share a name only when they average the same things.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from vitscale.record import FINAL, fewshot_key, finetune_key, parse_fewshot_key, parse_finetune_key

from .paper import AVERAGE_5, AVERAGE_5_DATASETS, DATASETS, dataset_name

_AVERAGE_PREFIX = "average("


def _present(frame: pd.DataFrame, column: str) -> bool:
    return column in frame.columns and bool(frame[column].notna().any())


def _dataset(metric: str) -> str | None:
    if parsed := parse_fewshot_key(metric):
        return parsed[0]
    return parse_finetune_key(metric)


def metric_order(metric: str) -> tuple:
    """Sort key: the paper's datasets in Table 6's order, then the rest by name."""
    ds = _dataset(metric)
    paper_order = list(DATASETS)
    rank = paper_order.index(ds) if ds in paper_order else len(paper_order)
    shots = parsed[1] if (parsed := parse_fewshot_key(metric)) else 0
    return (rank, ds or metric, shots, metric)


_FEWSHOT_SETS = "config.eval.fewshot.datasets"
_FEWSHOT_SHOTS = "config.eval.fewshot.shots"
FALLBACK_SHOTS = 5  # frames without the grid's configs (the paper's tables, references)


def _listed(frame: pd.DataFrame, column: str) -> list:
    """The first non-empty list in a config column (a grid's cells share it), or []."""
    if column not in frame.columns:
        return []
    return next((list(v) for v in frame[column] if isinstance(v, tuple | list) and v), [])


def default_shots(frame: pd.DataFrame) -> int:
    """The shot count compared by default: 5 (the paper's headline few-shot number) when
    the grid measures it, else its first (``eval.fewshot.shots``); 5 without configs."""
    shots = [int(k) for k in _listed(frame, _FEWSHOT_SHOTS)]
    return FALLBACK_SHOTS if not shots or FALLBACK_SHOTS in shots else shots[0]


def grid_metric(frame: pd.DataFrame) -> str | None:
    """The grid's first few-shot set at :func:`default_shots`, whatever its name (an own
    ``imagefolder:`` set as well as ours), when any cell has a value of it."""
    datasets = _listed(frame, _FEWSHOT_SETS)
    if not datasets:
        return None
    key = fewshot_key(str(datasets[0]), default_shots(frame))
    return key if _present(frame, key) else None


def fewshot_metrics(frame: pd.DataFrame, *, shots: int | None = None) -> list[str]:
    """Best few-shot columns with any value, optionally only ``shots``-shot ones."""
    out = []
    for c in frame.columns:
        parsed = parse_fewshot_key(c)
        if parsed and (shots is None or parsed[1] == shots) and _present(frame, c):
            out.append(c)
    return sorted(out, key=metric_order)


def finetune_metrics(frame: pd.DataFrame) -> list[str]:
    """Fine-tuning accuracy columns with any value."""
    found = (c for c in frame.columns if parse_finetune_key(c) and _present(frame, c))
    return sorted(found, key=metric_order)


def transfer_metrics(frame: pd.DataFrame, *, shots: int = 5) -> list[str]:
    """The transfer metrics a compute plot shows: fine-tuning accuracy when any cell has it
    (Table 6, Fig. 5), else ``shots``-shot linear accuracy (Fig. 4's measure)."""
    return finetune_metrics(frame) or fewshot_metrics(frame, shots=shots)


def average_name(metrics: Sequence[str]) -> str:
    """``average-5`` for Fig. 5's five fine-tuning datasets, else ``average(a, b, ...)``."""
    if sorted(metrics) == sorted(finetune_key(ds) for ds in AVERAGE_5_DATASETS):
        return AVERAGE_5
    return _AVERAGE_PREFIX + ", ".join(sorted(metrics)) + ")"


def average_parts(name: str) -> list[str]:
    """The metrics an average column averages (inverse of :func:`average_name`)."""
    if name == AVERAGE_5:
        return [finetune_key(ds) for ds in AVERAGE_5_DATASETS]
    if name.startswith(_AVERAGE_PREFIX) and name.endswith(")"):
        return [p.strip() for p in name[len(_AVERAGE_PREFIX) : -1].split(",")]
    raise ValueError(f"{name!r} is not an average column ('average-5' or 'average(a, b, ...)')")


def add_average(frame: pd.DataFrame, metrics: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """A copy of ``frame`` with the mean of ``metrics`` (rows missing any part get NaN)."""
    if not metrics:
        raise ValueError("add_average: no metrics to average")
    missing = [m for m in metrics if m not in frame.columns]
    if missing:
        raise ValueError(
            f"add_average: unknown metric columns {missing}; metric columns have names like "
            "'fewshot/<dataset>/<k>shot' or 'finetune/<dataset>/top1'"
        )
    name = average_name(metrics)
    out = frame.copy()
    out[name] = frame[list(metrics)].mean(axis=1, skipna=False)
    return out, name


def compute_metric(frame: pd.DataFrame, *, shots: int | None = None) -> tuple[pd.DataFrame, str]:
    """The one metric of the compute views (Fig. 5, Table 6, the summary's compute lines,
    ``vitscale fit``; docs/protocol.md): fine-tuned accuracy where any cell has it (the
    paper's Table 6), else the ``shots``-shot linear accuracy (Fig. 4's), the average when
    there are several. Returns the frame (with the average added) and the column;
    ValueError when the frame has neither."""
    found = transfer_metrics(frame, shots=default_shots(frame) if shots is None else shots)
    if not found:
        raise ValueError("no transfer metrics (few-shot or fine-tuning) in the results")
    return add_average(frame, found) if len(found) > 1 else (frame, found[0])


def resolve_metric(
    frame: pd.DataFrame, metric: str | None, *, shots: int | None = None
) -> tuple[pd.DataFrame, str]:
    """The column a fit reads (``vitscale fit --metric``): ``metric`` when the frame has it;
    an ``average-...`` name computed from its parts; None: the transfer metric found, or
    the average of those found. Returns the frame (with the average added) and the column;
    :class:`~vitscale.errors.UserError` naming the metrics there are otherwise."""
    from vitscale.errors import UserError

    shots = default_shots(frame) if shots is None else shots
    if metric is None:
        try:
            return compute_metric(frame, shots=shots)
        except ValueError as e:
            raise UserError(str(e)) from None
    if metric in frame.columns:
        return frame, metric
    try:
        frame, _ = add_average(frame, average_parts(metric))
    except ValueError:
        valid = ", ".join(transfer_metrics(frame, shots=shots)) or "none found"
        raise UserError(f"--metric {metric!r}: no such column; metrics: {valid}") from None
    return frame, metric


def comparable(metric: str, reference: pd.DataFrame) -> bool:
    """Whether ``reference`` (e.g. the paper's Table 6) measured the same thing: same column."""
    return _present(reference, metric)


def label(metric: str) -> str:
    """Axis label with units for a metric column."""
    if metric.startswith(FINAL):
        return label(metric[len(FINAL) :]).replace(" (%)", ", final (%)")
    if metric == AVERAGE_5:
        return "Average-5 transfer accuracy (%)"
    if metric.startswith(_AVERAGE_PREFIX):
        n = metric.count(",") + 1
        return f"Average accuracy over {n} transfer tasks (%)"
    if parsed := parse_fewshot_key(metric):
        ds, k = parsed
        return f"{dataset_name(ds)} {k}-shot accuracy (%)"
    if ds := _dataset(metric):
        return f"{dataset_name(ds)} accuracy, fine-tuned (%)"
    if metric == "upstream/top1":
        return "Upstream top-1 accuracy (%)"
    return metric


def short_label(metric: str) -> str:
    """A column header for tables: "ImageNet", "CIFAR-10 5-shot", "Average-5"."""
    if metric == AVERAGE_5:
        return "Average-5"
    if metric.startswith(_AVERAGE_PREFIX):
        return f"Average ({metric.count(',') + 1})"
    if parsed := parse_fewshot_key(metric):
        return f"{dataset_name(parsed[0])} {parsed[1]}-shot"
    if ds := _dataset(metric):
        return dataset_name(ds)
    return metric


# Units of the x axes the figures use.
_AXES = {
    "exaflops": "Pre-training compute (exaFLOPs)",
    "compute/exaflops": "Pre-training compute (exaFLOPs)",
    "num_examples": "Pre-training dataset size (images)",
    "examples_seen": "Examples seen in pre-training (images)",
    "params": "Parameters",
    "epochs": "Pre-training epochs",
    "step": "Training step",
    "pretrain_dataset": "Pre-training dataset",
    "wall_clock_s": "Wall-clock time (s)",
    "device_hours": "Device-hours",
}


def axis_label(column: str) -> str:
    """Axis label with units for any column: a metric or a run quantity."""
    return _AXES.get(column) or label(column)
