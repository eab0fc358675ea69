"""The measured answer to the paper's two questions, in numbers and a few lines
(``vitscale summary``).

**Fig. 4 (data).** With little pre-training data, do the ResNets transfer better than the
ViTs, and do the ViTs catch up as the data grows? Every subset is trained for the same
number of steps (paper Sec. 4.3), so the comparison uses the one training duration that
spans the most subsets (the Fig. 4 duration; other durations feed Fig. 5 only). Per subset:
the best ViT and the best ResNet (highest mean over pre-training seeds), each with its
seed spread, and the gap (best ResNet - best ViT).

**Fig. 5 (compute).** Does accuracy rise with pre-training compute, and which family buys
more accuracy per exaFLOP? Each (model, duration) at the largest subset is one point
(mean over its seeds); each family's Pareto frontier is the best accuracy reached with
at most a given compute (:mod:`analysis.frontier`); the frontiers are compared over the
compute range both cover, and where the leading family changes they cross.

**Noise.** The *seed spread* of a cell (a model at a subset and duration) is the range
(max - min) of the metric over its pre-training seeds: for two seeds, their difference.
The verdict's spread is the largest spread among the four cells that decide it (the best
ViT and the best ResNet at the smallest and at the largest subset). A change of the gap
is called a trend only when it exceeds :data:`NOISE_FACTOR` times that spread; with a
single seed the spread is not measured and :data:`NOISE_POINTS` stands in, and the
verdict says so.

Numbers only: the verdict states what was measured, whichever way it falls. By default
the metric is the best accuracy during training (Fig. 4's early stopping) of the grid's
first few-shot set at 5 shots (its first shot count where it measures no 5-shot);
``--shots K`` averages every transfer task's ``K``-shot accuracy. No torch import.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from vitscale.record import STATUS_DONE

from . import metrics as M
from . import settings as S
from .frontier import pareto_frontier

# The smallest gap change called a trend when no seed spread was measured (one seed): two
# few-shot seeds of one cell differ by ~2 points per task, about a point on a 3-task mean.
NOISE_POINTS = 1.0
# A gap change counts as a trend when it exceeds this many seed spreads.
NOISE_FACTOR = 3.0
# The study's question is the paper's: the ViT against the BiT ResNet (Figs. 4 and 5). Other
# families present get their own frontier line, and no gap.
FAMILIES = ("ViT", "ResNet")
_KEYS = ["model", "family", "num_examples", "steps"]


@dataclass(frozen=True)
class Summary:
    metric: str  # the column compared (a few-shot metric or an average of them)
    steps: int  # the Fig. 4 duration (training steps shared by the most subsets)
    cells: pd.DataFrame  # one row per (model, family, subset, steps): mean, spread, seeds, exaflops
    by_model: pd.DataFrame  # Fig. 4 duration: rows model, columns subset, seed means
    by_subset: pd.DataFrame  # rows subset: best ViT/ResNet (model, mean, spread, seeds), gap
    frontier: pd.DataFrame  # largest subset: one row per (family, model, steps), on_frontier
    comparison: dict[str, Any]  # frontiers at equal compute: range, segments, crossings
    compute_metric: str = ""  # the frontiers' column: Fig. 5's (analysis.metrics.compute_metric)
    # settings: what differs between cells of one model, subset and duration besides the
    # seed (analysis.settings), and, with "best", the setting kept for each
    settings: list[str] = dataclasses.field(default_factory=list)
    chosen: list[str] = dataclasses.field(default_factory=list)

    def table(self) -> pd.DataFrame:
        """The Fig. 4 cells as text, ``mean ± spread`` (``mean`` alone for one seed):
        rows model (ResNets first), columns subset."""
        fig4 = self.cells[self.cells.steps == self.steps]
        text = fig4.assign(
            value=[
                f"{r.mean:.1f}" + (f" ± {r.spread:.1f}" if np.isfinite(r.spread) else "")
                for r in fig4.itertuples()
            ]
        )
        table = text.pivot(index="model", columns="num_examples", values="value")
        order = fig4.drop_duplicates("model").sort_values(["family", "model"])
        table = table.loc[order.model]
        table.columns = [f"{int(n):,}" for n in table.columns]
        return table

    # ------------------------------------------------------------------ the verdict, in numbers

    @property
    def gap_change(self) -> dict[str, Any] | None:
        """Smallest -> largest subset: the gap at each, its shrink, the spread it is held against."""
        rows = self.by_subset.dropna(subset=["gap"])
        if len(rows) < 2:
            return None
        small, large = rows.iloc[0], rows.iloc[-1]
        spreads = [row[f"{f}_spread"] for row in (small, large) for f in ("ViT", "ResNet")]
        measured = [s for s in spreads if np.isfinite(s)]
        spread = max(measured) if measured else float("nan")
        shrink = float(small["gap"] - large["gap"])
        threshold = NOISE_FACTOR * spread if np.isfinite(spread) else NOISE_POINTS
        return {
            "smallest": int(small.name),
            "largest": int(large.name),
            "gap_smallest": float(small["gap"]),
            "gap_largest": float(large["gap"]),
            "shrink": shrink,
            "seed_spread": spread,
            "spread_ratio": shrink / spread if np.isfinite(spread) and spread > 0 else float("inf"),
            "threshold": threshold,
            "trend": bool(abs(shrink) > threshold),
            "resnet_lead_at_smallest": bool(small["gap"] > 0),
            "crossover": bool(large["gap"] <= 0 < small["gap"]),
        }

    def to_dict(self) -> dict[str, Any]:
        """Everything :meth:`lines` says, as numbers (``vitscale summary --json``)."""

        def side(row: pd.Series, family: str) -> dict[str, Any] | None:
            if not isinstance(row[f"{family}_model"], str):
                return None
            return {
                "model": row[f"{family}_model"],
                "mean": _num(row[family]),
                "seed_spread": _num(row[f"{family}_spread"]),
                "seeds": int(row[f"{family}_seeds"]),
            }

        subsets = [
            {
                "num_examples": int(n),
                "vit": side(row, "ViT"),
                "resnet": side(row, "ResNet"),
                "gap": _num(row["gap"]),
            }
            for n, row in self.by_subset.iterrows()
        ]
        frontier = {
            family: [
                {
                    "model": r.model,
                    "steps": int(r.steps),
                    "exaflops": _num(r.exaflops),
                    "mean": _num(r.mean),
                    "seed_spread": _num(r.spread),
                    "seeds": int(r.seeds),
                    "on_frontier": bool(r.on_frontier),
                }
                for r in group.itertuples()
            ]
            for family, group in self.frontier.groupby("family", sort=False)
        }
        change = self.gap_change
        return {
            "metric": self.metric,
            "compute_metric": self.compute_metric or self.metric,
            "fig4_steps": self.steps,
            "settings": {"differing_keys": self.settings, "best_chosen": self.chosen},
            "subsets": subsets,
            "gap_change": {k: _num(v) for k, v in change.items()} if change else None,
            "frontier": frontier,
            "frontier_comparison": _json_safe(self.comparison),
            "by_model": {
                m: {str(int(k)): v for k, v in row.dropna().items()}
                for m, row in self.by_model.iterrows()
            },
            "verdict": self.lines(),
        }

    # ------------------------------------------------------------------ the verdict, in words

    def lines(self) -> list[str]:
        """The verdict in plain words, with the numbers that support it."""
        seeds = sorted({int(s) for s in self.cells.loc[self.cells.steps == self.steps, "seeds"]})
        out = [
            f"metric: {M.label(self.metric)}, best value during training; Fig. 4 cells: "
            f"{self.steps:,} steps, {'/'.join(map(str, seeds))} seed(s) per cell, "
            "mean ± spread (max - min over seeds)"
        ]
        if self.chosen:
            out.append(
                f"settings: cells differ in {', '.join(self.settings)} besides their seed; the "
                "best setting of each model, subset and duration is kept (seed mean):"
            )
            out += [f"  {line}" for line in self.chosen]
        elif self.settings:
            out.append(
                f"settings: cells differ in {', '.join(self.settings)} besides their seed; each "
                "setting is its own row (its values after the model's name), never averaged "
                "(--settings best keeps the best of each)"
            )
        change = self.gap_change
        if change is not None:
            small = self.by_subset.loc[change["smallest"]]
            large = self.by_subset.loc[change["largest"]]
            lead = "ahead" if small["gap"] > 0 else "behind"
            out.append(
                f"smallest subset ({change['smallest']:,} images): best ResNet {_side(small, 'ResNet')}"
                f" vs best ViT {_side(small, 'ViT')}: ResNets {abs(small['gap']):.1f} points {lead}"
            )
            out.append(
                f"largest subset ({change['largest']:,} images): best ResNet {_side(large, 'ResNet')}"
                f" vs best ViT {_side(large, 'ViT')}: the gap {_trend(change)}"
            )
        out += self._frontier_lines()
        return out

    def _frontier_lines(self) -> list[str]:
        out = []
        for family, group in self.frontier.groupby("family", sort=False):
            front = group[group.on_frontier]
            points = ", ".join(
                f"{r.model} {r.steps:,} steps {r.exaflops:.3g} EF -> {r.mean:.1f}"
                for r in front.itertuples()
            )
            out.append(
                f"{family} compute frontier ({M.label(self.compute_metric or self.metric)}) at "
                f"{int(group.num_examples.iloc[0]):,} images "
                f"({len(group)} run{'s' if len(group) != 1 else ''}, {len(front)} on the frontier): {points}"
            )
        c = self.comparison
        if not c:
            if set(FAMILIES) <= set(self.frontier.family):
                out.append(
                    "the two families' compute ranges do not overlap: no comparison at equal compute"
                )
            return out
        parts = [
            f"{s['leader']} ahead from {s['from']:.3g} to {s['to']:.3g} EF "
            f"(by {s['margin_min']:.1f}-{s['margin_max']:.1f} points)"
            if s["leader"] != "tie"
            else f"level from {s['from']:.3g} to {s['to']:.3g} EF"
            for s in c["segments"]
        ]
        out.append("at equal pre-training compute: " + "; ".join(parts))
        if c["crossings"]:
            where = ", ".join(f"~{x:.3g} EF" for x in c["crossings"])
            out.append(f"the frontiers cross at {where}")
        else:
            out.append(
                f"the frontiers do not cross between {c['range'][0]:.3g} and {c['range'][1]:.3g} EF"
            )
        return out


def _num(value: Any) -> Any:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str) or value is None:
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    value = float(value)
    return value if math.isfinite(value) else None


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return _num(obj) if isinstance(obj, float | int | np.floating | np.integer) else obj


def _side(row: pd.Series, family: str) -> str:
    spread = row[f"{family}_spread"]
    plus = f" ± {spread:.1f}" if np.isfinite(spread) else ""
    return f"{row[family]:.1f}{plus} ({row[f'{family}_model']})"


def _trend(c: dict[str, Any]) -> str:
    numbers = f"{c['gap_smallest']:+.1f} -> {c['gap_largest']:+.1f}"
    if np.isfinite(c["seed_spread"]):
        against = (
            f"{abs(c['shrink']) / c['seed_spread']:.1f}x the largest seed spread of these cells "
            f"({c['seed_spread']:.1f})"
            if c["seed_spread"] > 0
            else "the seeds agree exactly"
        )
    else:
        against = f"one seed: no spread measured, a change under {NOISE_POINTS:g} point is noise"
    if not c["resnet_lead_at_smallest"]:
        return f"was never a ResNet lead: the small-data effect is not reproduced ({numbers})"
    if not c["trend"]:
        return f"does not change beyond the noise ({numbers}; {against})"
    if c["crossover"]:
        return f"reverses: the ViTs overtake ({numbers}; a change of {c['shrink']:.1f} points, {against})"
    if c["shrink"] > 0:
        return f"shrinks by {c['shrink']:.1f} points ({numbers}; {against})"
    return f"grows by {-c['shrink']:.1f} points ({numbers}; {against})"


def _cells(done: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One row per (model, family, subset, steps): mean, spread and count over seeds."""
    g = done.groupby(_KEYS, sort=True)
    cells = g[metric].agg(mean="mean", lo="min", hi="max", seeds="count")
    cells["spread"] = np.where(cells.seeds > 1, cells.hi - cells.lo, np.nan)
    cells["exaflops"] = g["exaflops"].mean()
    return cells.drop(columns=["lo", "hi"]).reset_index()


def fig4_steps(cells: pd.DataFrame) -> int | None:
    """Fig. 4's training duration: the ``steps`` that span the most subsets (ties: the
    longest). The paper trains every subset for the same steps; a grid's other durations
    (Fig. 5's shorter runs on the largest subset) must not mix into Fig. 4's points.
    ``None`` when the frame has no ``steps``."""
    if "steps" not in cells.columns or cells["steps"].isna().all():
        return None
    spans = cells.dropna(subset=["steps"]).groupby("steps")["num_examples"].nunique()
    return int(max(spans.index, key=lambda s: (spans[s], s)))


def fig5_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """The cells Fig. 5 and Table 6 read: those pre-trained on the largest subset of their
    pre-training set (the paper's compute study trains every model on all of JFT; a Fig. 4
    grid's smaller subsets would add points at the same compute that say nothing about
    what it buys). Published checkpoints and cells of unknown size are kept."""
    if "num_examples" not in frame.columns or frame.empty:
        return frame
    n = frame["num_examples"]
    if "pretrain_dataset" in frame.columns:
        largest = n.groupby(frame["pretrain_dataset"]).transform("max")
    else:
        largest = n.max()
    keep = n.isna() | (n == largest)
    if "published" in frame.columns:
        keep |= frame["published"].fillna(False).astype(bool)
    return frame[keep]


def _by_subset(fig4: pd.DataFrame) -> pd.DataFrame:
    rows = {}
    for n, group in fig4.groupby("num_examples"):
        row: dict[str, Any] = {}
        for family in FAMILIES:
            fam = group[group.family == family]
            best = fam.loc[fam["mean"].idxmax()] if len(fam) else None
            row[family] = best["mean"] if best is not None else np.nan
            row[f"{family}_model"] = best["model"] if best is not None else None
            row[f"{family}_spread"] = best["spread"] if best is not None else np.nan
            row[f"{family}_seeds"] = best["seeds"] if best is not None else 0
        row["gap"] = row["ResNet"] - row["ViT"]
        rows[int(n)] = row
    columns = [f"{f}{s}" for f in FAMILIES for s in ("", "_model", "_spread", "_seeds")] + ["gap"]
    return pd.DataFrame.from_dict(rows, orient="index", columns=columns).sort_index()


def _measured(done: pd.DataFrame, metric: str, settings: str) -> tuple[pd.DataFrame, list, list]:
    """The finished cells with a value of ``metric``, one setting or each kept apart
    (:func:`analysis.settings.apply`), with their duration in steps."""
    done = done[done[metric].notna() & done["num_examples"].notna()].copy()
    if done.empty:
        raise ValueError(f"no finished cell has a value of {metric!r}")
    done, differing, chosen = S.apply(done, select=settings, metric=metric)
    if "steps" not in done.columns or done["steps"].isna().all():
        done["steps"] = 0  # cells from sources without a duration: one duration
    done["steps"] = done["steps"].fillna(0).astype(int)
    return done, differing, chosen


def _frontier(cells: pd.DataFrame) -> pd.DataFrame:
    """Every (model, duration) at the largest subset, with its family-frontier flag."""
    largest = cells[cells.num_examples == cells.num_examples.max()]
    parts = []
    for _, group in largest.groupby("family", sort=False):
        group = group.sort_values(["exaflops", "mean"]).copy()
        keep = pareto_frontier(group["exaflops"].to_numpy(float), group["mean"].to_numpy(float))
        group["on_frontier"] = False
        group.iloc[keep, group.columns.get_loc("on_frontier")] = True
        parts.append(group)
    if not parts:
        return largest.assign(on_frontier=False).iloc[:0]
    return pd.concat(parts, ignore_index=True)


def _best_within(front: pd.DataFrame, compute: float) -> float:
    """The best accuracy a family's frontier reaches with at most ``compute`` exaFLOPs."""
    reached = front.loc[front.exaflops <= compute * (1 + 1e-9), "mean"]
    return float(reached.max()) if len(reached) else float("nan")


def compare_frontiers(frontier: pd.DataFrame) -> dict[str, Any]:
    """Which family's frontier is higher at equal compute, over the range both cover.

    The range runs from the larger of the two families' smallest run costs to the smaller
    of their largest (no extrapolation beyond either family's runs). At every frontier
    point in it (and its two ends),
    each family's value is the best accuracy reached with at most that compute; constant
    leaders form segments, and a change of leader is a crossing (placed at the point where
    the new leader takes over).
    """
    fronts = {f: frontier[frontier.family == f].sort_values("exaflops") for f in FAMILIES}
    if any(front.empty for front in fronts.values()):
        return {}
    lo = max(front.exaflops.min() for front in fronts.values())
    hi = min(front.exaflops.max() for front in fronts.values())
    if lo > hi:
        return {}
    xs = sorted(
        {
            float(x)
            for front in fronts.values()
            for x in front.loc[front.on_frontier, "exaflops"]
            if lo <= x <= hi
        }
        | {lo, hi}
    )
    segments: list[dict[str, Any]] = []
    crossings: list[float] = []
    for x in xs:
        margin = _best_within(fronts["ViT"], x) - _best_within(fronts["ResNet"], x)
        leader = "ViT" if margin > 0 else "ResNet" if margin < 0 else "tie"
        by = abs(margin)
        if segments and segments[-1]["leader"] == leader:
            s = segments[-1]
            s.update(to=x, margin_min=min(s["margin_min"], by), margin_max=max(s["margin_max"], by))
            continue
        if segments and {segments[-1]["leader"], leader} == set(FAMILIES):
            crossings.append(x)
        segments.append({"leader": leader, "from": x, "to": x, "margin_min": by, "margin_max": by})
    return {"range": [lo, hi], "segments": segments, "crossings": crossings}


def summarise(
    frame: pd.DataFrame,
    *,
    metric: str | None = None,
    shots: int | None = None,
    settings: str = "show",
) -> Summary:
    """Summarise a cells frame (:func:`vitscale.record.cells.load_runs`); finished cells only.

    The metric: ``metric``; else, with ``shots``, the mean over transfer tasks of the best
    ``shots``-shot accuracy; else the grid's first few-shot set
    (:func:`analysis.metrics.grid_metric`). The compute frontiers read ``metric`` too when
    it is given, else Fig. 5's (:func:`analysis.metrics.compute_metric`), so that the
    summary and the figure name the same winner. Cells that differ in more than their
    seed are kept apart or the best chosen (``settings``, :mod:`analysis.settings`)."""
    done = frame[frame["status"] == STATUS_DONE]
    given = metric
    if metric is None and shots is None:
        metric = M.grid_metric(done)
    if metric is None:
        k = M.default_shots(done) if shots is None else shots
        found = M.fewshot_metrics(done, shots=k)
        if not found:
            present = ", ".join(M.fewshot_metrics(done)) or "none"
            raise ValueError(
                f"no {k}-shot few-shot metrics in the finished cells (few-shot metrics: "
                f"{present}); give --metric COLUMN or --shots K"
            )
        done, metric = M.add_average(done, found) if len(found) > 1 else (done, found[0])
    if metric not in done.columns:
        try:  # an average named by its parts, "average(a, b, ...)"
            done, metric = M.add_average(done, M.average_parts(metric))
        except ValueError:
            valid = ", ".join(M.transfer_metrics(done))
            raise ValueError(
                f"no column {metric!r}; metrics: {valid}, or 'average(a, b, ...)' of them"
            ) from None
    finished = done
    done, differing, chosen = _measured(finished, metric, settings)
    cells = _cells(done, metric)
    steps = fig4_steps(cells)
    fig4 = cells[cells.steps == steps]
    by_model = fig4.pivot_table(index="model", columns="num_examples", values="mean")
    # the frontiers read every cell with a value of theirs, not only those with the data view's
    compute, on = (finished, metric) if given else M.compute_metric(finished, shots=shots)
    frontier = _frontier(cells if on == metric else _cells(_measured(compute, on, settings)[0], on))
    return Summary(
        metric=metric,
        steps=steps,
        cells=cells,
        by_model=by_model,
        by_subset=_by_subset(fig4),
        frontier=frontier,
        comparison=compare_frontiers(frontier),
        compute_metric=on,
        settings=differing,
        chosen=chosen,
    )
