"""The measured answer to the paper's question, in a few lines (``vitscale summary``).

Paper Fig. 4 asks whether, with little pre-training data, the ResNets transfer better than
the ViTs, and whether the ViTs catch up as the data grows (same number of steps for every
subset); Fig. 5 whether accuracy rises with pre-training compute within each family. This
module answers both from finished cells, on whatever transfer metric the runs measured:
by default the mean over transfer tasks of the best ``k``-shot accuracy (Fig. 4's early
stopping). Numbers only: the verdict states what was measured, it is not tuned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from vitscale.runfolder import STATUS_DONE

from . import metrics as M

__all__ = ["Summary", "summarise", "NOISE_POINTS"]

# A change of the gap smaller than this (accuracy points) is not called a trend: in the
# demo, two few-shot seeds of one cell differ by ~2 points per task, so the mean over
# seeds and three tasks carries about a point of sampling noise.
NOISE_POINTS = 1.0


@dataclass(frozen=True)
class Summary:
    metric: str  # the column compared (a few-shot metric or an average of them)
    by_subset: pd.DataFrame  # rows: pre-training subset size; best ViT, best ResNet, gap
    by_model: pd.DataFrame  # rows: model; columns: subset sizes
    compute: pd.DataFrame  # per family: models, Spearman rank correlation exaFLOPs ~ accuracy

    def lines(self) -> list[str]:
        """The verdict in plain words, with the numbers that support it."""
        out = [f"metric: {M.label(self.metric)}, best value during training"]
        rows = self.by_subset.dropna(subset=["gap"])
        if len(rows) >= 2:
            small, large = rows.iloc[0], rows.iloc[-1]
            lead = "ahead" if small["gap"] > 0 else "behind"
            out.append(
                f"smallest subset ({small.name:,} images): best ResNet {small['ResNet']:.1f} vs best "
                f"ViT {small['ViT']:.1f}, ResNets {abs(small['gap']):.1f} points {lead}"
            )
            if small["gap"] <= 0:
                trend = "was never a ResNet lead: the small-data effect is not reproduced"
            elif large["gap"] < 0:
                trend = "reverses: the ViTs overtake"
            elif abs(large["gap"] - small["gap"]) < NOISE_POINTS:
                trend = f"barely changes (less than {NOISE_POINTS:g} point)"
            elif large["gap"] < small["gap"]:
                trend = "shrinks"
            else:
                trend = "does not shrink"
            out.append(
                f"largest subset ({large.name:,} images): best ResNet {large['ResNet']:.1f} vs best "
                f"ViT {large['ViT']:.1f}; the gap {trend} ({small['gap']:+.1f} -> {large['gap']:+.1f})"
            )
        for family, row in self.compute.iterrows():
            if np.isfinite(row["spearman"]):
                out.append(
                    f"{family}: accuracy vs pre-training compute over {int(row['models'])} models, "
                    f"Spearman rank correlation {row['spearman']:+.2f}"
                )
        return out


def _spearman(x: pd.Series, y: pd.Series) -> float:
    if len(x) < 2 or x.nunique() < 2 or y.nunique() < 2:
        return float("nan")
    return float(np.corrcoef(x.rank(), y.rank())[0, 1])


def summarise(frame: pd.DataFrame, *, metric: str | None = None, shots: int = 5) -> Summary:
    """Summarise a cells frame (:func:`vitscale.results.load_runs`); finished cells only."""
    done = frame[frame["status"] == STATUS_DONE]
    if metric is None:
        found = M.fewshot_metrics(done, shots=shots)
        if not found:
            raise ValueError(f"no {shots}-shot few-shot metrics in the finished cells")
        done, metric = M.add_average(done, found) if len(found) > 1 else (done, found[0])
    if metric not in done.columns:
        raise ValueError(f"no column {metric!r}; metrics: {', '.join(M.transfer_metrics(done))}")
    done = done[done[metric].notna() & done["num_examples"].notna()]
    by_model = done.pivot_table(
        index="model", columns="num_examples", values=metric, aggfunc="mean"
    )
    best = done.groupby(["num_examples", "model", "family"])[metric].mean().reset_index()
    by_subset = best.groupby(["num_examples", "family"])[metric].max().unstack("family")
    by_subset = by_subset.reindex(columns=["ViT", "ResNet"]).astype(float)
    by_subset["gap"] = by_subset["ResNet"] - by_subset["ViT"]
    by_subset.index = by_subset.index.astype(int)
    # Compute trend: each model at the largest subset it was trained on, per family.
    largest = done[done["num_examples"] == done.groupby("model")["num_examples"].transform("max")]
    models = largest.groupby(["family", "model"])[[metric, "exaflops"]].mean().reset_index()
    compute = (
        models.groupby("family").apply(
            lambda g: pd.Series(
                {"models": len(g), "spearman": _spearman(g["exaflops"], g[metric])}
            ),
            include_groups=False,
        )
        if len(models)
        else pd.DataFrame(columns=["models", "spearman"])
    )
    return Summary(metric=metric, by_subset=by_subset, by_model=by_model, compute=compute)
