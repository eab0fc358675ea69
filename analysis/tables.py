"""Table 6 ("transfer accuracy and pre-training compute"), as markdown and LaTeX.

One row per (model, pre-training dataset, epochs): the mean of that group's finished
cells (seeds), their number, the pre-training exaFLOPs and each transfer metric. Given a
``reference`` (the paper's Table 6), the paper's value sits beside ours, "(paper)", for
every row whose model name matches one of the paper's (the paper's row with the nearest
number of epochs) and every metric the paper measured under the same name
(:func:`analysis.metrics.comparable`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from vitscale.catalog import FAMILIES
from vitscale.record import finetune_key

from . import metrics as M
from .figures._data import finished
from .paper import AVERAGE_5, AVERAGE_5_DATASETS

KEYS = ("model", "family", "pretrain_dataset", "num_examples", "epochs")
PAPER = " (paper)"


def table6(
    frame: pd.DataFrame,
    *,
    metrics: Sequence[str] | None = None,
    reference: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The table as a frame of display columns (numbers left unformatted)."""
    if metrics is None:  # the transfer metrics found, and average-5 when its five are there
        metrics = M.transfer_metrics(frame)
        if {finetune_key(d) for d in AVERAGE_5_DATASETS} <= set(metrics):
            metrics = [*metrics, AVERAGE_5]
    frame = _with_average(frame, metrics)
    data = finished(frame, ["model"]).copy()
    data["epochs"] = data["epochs"].round(2)
    value_cols = ["exaflops", *metrics]
    grouped = data.groupby(list(KEYS), dropna=False, sort=False)
    table = grouped[value_cols].mean()
    table.insert(0, "cells", grouped.size())
    table = table.reset_index()
    # Paper order: family, then models by their cheapest row, then data size and epochs.
    order = table.assign(
        _f=table["family"].map(lambda f: FAMILIES.index(f) if f in FAMILIES else 99),
        _m=table.groupby("model")["exaflops"].transform("min"),
    )
    order = order.sort_values(["_f", "_m", "model", "num_examples", "epochs"])
    table = order.drop(columns=["_f", "_m"]).reset_index(drop=True)

    columns = {
        "model": "Model",
        "pretrain_dataset": "Pre-training",
        "num_examples": "Images",
        "epochs": "Epochs",
        "cells": "Cells",
        "exaflops": "exaFLOPs",
    }
    out = table[list(columns)].rename(columns=columns)
    ref = None if reference is None else _with_average(reference, metrics)
    matched = _match(table, ref) if ref is not None else None
    if matched is not None and matched["model"].isna().all():
        matched = None  # no model of ours is in the reference: no paper columns
    if matched is not None:
        at = out.columns.get_loc("exaFLOPs") + 1
        out.insert(at, "exaFLOPs" + PAPER, matched["exaflops"].to_numpy())
    for metric in metrics:
        name = M.short_label(metric)
        out[name] = table[metric].to_numpy()
        if matched is not None and M.comparable(metric, ref):
            out[name + PAPER] = matched[metric].to_numpy()
    return out.reset_index(drop=True)


def _with_average(frame: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Compute an average column the caller asked for but the frame lacks."""
    for m in metrics:
        if m in frame.columns:
            continue
        try:
            parts = M.average_parts(m)
        except ValueError:
            continue  # not an average; finished() names the missing column
        if all(p in frame.columns for p in parts):
            frame, _ = M.add_average(frame, parts)
    return frame


def _match(table: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """For each of our rows, the reference row of the same model nearest in epochs."""
    ref = ref.reset_index(drop=True)
    rows = []
    for model, epochs in zip(table["model"], table["epochs"], strict=True):
        cands = ref[ref["model"] == model]
        if cands.empty:
            rows.append(None)
            continue
        if isinstance(epochs, float) and not math.isnan(epochs) and cands["epochs"].notna().any():
            dist = (np.log(cands["epochs"].astype(float)) - math.log(max(epochs, 1e-12))).abs()
            rows.append(dist.idxmin())
        else:
            rows.append(cands.index[0])
    out = pd.DataFrame([ref.loc[i] if i is not None else pd.Series(dtype=object) for i in rows])
    return out.reindex(columns=ref.columns).reset_index(drop=True)


def _fmt(column: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "–"
    if column.startswith("exaFLOPs"):
        v = float(value)
        return f"{v:.0f}" if v >= 100 else f"{v:.3g}"
    if column in ("Cells",):
        return str(int(value))
    if column == "Epochs":
        return f"{float(value):g}"
    if column == "Images":
        return _si(float(value))
    if isinstance(value, float | np.floating):
        return f"{value:.2f}"
    return str(value)


def _si(n: float) -> str:
    """1000 -> 1k, 303000000 -> 303M: how the paper writes dataset sizes."""
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:g}"


def _cells(table: pd.DataFrame) -> list[list[str]]:
    return [[_fmt(c, v) for c, v in zip(table.columns, row, strict=True)] for row in table.values]


def to_markdown(table: pd.DataFrame) -> str:
    """GitHub markdown; numbers right-aligned, accuracies in percent with two decimals."""
    cols = list(table.columns)
    align = ["---" if c in ("Model", "Pre-training") else "---:" for c in cols]
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in _cells(table)]
    return "\n".join(lines) + "\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "–": "--"}  # fmt: skip


def _tex(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)


def to_latex(table: pd.DataFrame, *, caption: str | None = None, label: str = "tab:compute") -> str:
    """A booktabs ``table`` environment (needs ``\\usepackage{booktabs}``)."""
    cols = list(table.columns)
    spec = "".join("l" if c in ("Model", "Pre-training") else "r" for c in cols)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(_tex(c) for c in cols) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(_tex(v) for v in row) + r" \\" for row in _cells(table)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption:
        lines.append(rf"\caption{{{_tex(caption)}}}")
    lines += [rf"\label{{{label}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write(
    frame: pd.DataFrame,
    out_dir: str | os.PathLike,
    *,
    metrics: Sequence[str] | None = None,
    reference: pd.DataFrame | None = None,
    stem: str = "table6",
    caption: str | None = None,
    note: str = "",
) -> list[Path]:
    """Write ``stem.md`` and ``stem.tex``; returns their paths. The markdown opens with
    what its columns measure (and ``note``: which cells it reads)."""
    table = table6(frame, metrics=metrics, reference=reference)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, tex = out / f"{stem}.md", out / f"{stem}.tex"
    measured = [M.label(m) for m in (metrics or M.transfer_metrics(frame))]
    head = f"Accuracy columns: {'; '.join(measured)}" + (f"; {note}" if note else "") + ".\n\n"
    md.write_text(head + to_markdown(table))
    tex.write_text(to_latex(table, caption=caption))
    return [md, tex]
