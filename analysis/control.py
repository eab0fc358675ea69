"""The positive control's verdict: the glyph world with a fraction f of its pixels moved
by the rules registered in experiments/preregistered/permuted.md before any
of its cells ran (``vitscale summary runs/control``).

The ResNet's prior (locality, translation equivariance) is what the paper says buys data
efficiency (Dosovitskiy et al., ICLR 2021, Sec. 3.1, 4.3); moving pixels by one fixed
permutation takes it away (at ImageNet scale, a ResNet-50 from 73.5% to 39.4% top-1:
Jaegle et al., "Perceiver", ICML 2021). Which world a cell learned is its pre-training
set; the worlds (their fraction f, ``None`` for sigma + tau, and their transfer task) are
:func:`vitscale.kinds.control_worlds`.

The registered rules, as computed here:

- a cell's value: the best ``k``-shot accuracy on its own world's transfer task during
  training (percent); a point (world, model, subset): the mean over pre-training seeds,
  its spread the range over them;
- noise: a point with fewer than :data:`SEEDS` seeds borrows the largest spread of the
  same model over the points with :data:`SEEDS` seeds; the noise unit of a (world,
  subset) is the larger of the two families' spreads; a lead (or a change of the gap)
  is beyond the noise above :data:`FACTOR` noise units (the larger of the two, for a change);
- H0: the ViT at the largest subset under sigma + tau against f = 0, within the noise;
- H1: at every subset the gap (ResNet - ViT) at the highest f is below the lowest f's
  beyond the noise, and no step to the next level raises it beyond the noise;
- H2: at a level with :data:`SEEDS` seeds at both ends, the ResNet ahead at the smallest
  subset and the ViT at the largest, each beyond the noise;
- H3: the crossing subset (log-linear in the mean gaps) never rises as f rises and is
  lower at the highest f than at the lowest (none: above every subset);
- falsifier: the ResNet ahead (mean gap > 0) at every subset at every level.

No torch import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from vitscale.kinds import control_worlds
from vitscale.record import STATUS_DONE, fewshot_key

from .summary import _json_safe as _json
from .summary import _num

FACTOR = 2.0  # noise units a lead or a change must exceed (registered)
SEEDS = 3  # pre-training seeds of the points that decide (registered)
SHOTS = 5  # the registered metric's k: the best 5-shot accuracy during training
FAMILIES = ("ResNet", "ViT")
_GAP_KEYS = ["fraction", "num_examples"]


@dataclass(frozen=True)
class World:
    """A world of the control: its pre-training set's name, the fraction of pixels it
    moves (``None``: sigma + tau, the ViT's invariance control) and its transfer task."""

    name: str
    fraction: float | None
    transfer: str


WORLDS = {name: World(name, f, transfer) for name, (f, transfer) in control_worlds().items()}


def is_control(frame: pd.DataFrame, worlds: Mapping[str, World] = WORLDS) -> bool:
    """Whether a cells frame is the control's: every pre-training set one of ``worlds``,
    and some world with its pixels moved among them."""
    if "pretrain_dataset" not in frame.columns or frame.empty:
        return False
    names = set(frame["pretrain_dataset"].dropna())
    moved = {w.name for w in worlds.values() if w.fraction != 0.0}
    return bool(names) and names <= set(worlds) and bool(names & moved)


@dataclass(frozen=True)
class Control:
    shots: int
    # world, fraction, family, model, num_examples: mean, spread, seeds, values
    points: pd.DataFrame
    gaps: pd.DataFrame  # world, fraction, num_examples: ResNet, ViT (models, means), gap, unit
    h0: dict[str, Any] | None
    h1: dict[str, Any] | None
    h2: dict[str, Any] | None
    h3: dict[str, Any] | None
    falsifier: dict[str, Any] | None

    def table(self) -> pd.DataFrame:
        """Rows (world, model), columns subsets: ``mean ± spread`` (``mean`` for one seed)."""
        p = self.points.assign(
            value=[
                f"{r.mean:.1f}" + (f" ± {r.spread:.1f}" if r.seeds > 1 else "")
                for r in self.points.itertuples()
            ],
            level=[_level(f) for f in self.points["fraction"]],
        )
        table = p.pivot(index=["level", "model"], columns="num_examples", values="value")
        table.columns = [f"{int(n):,}" for n in table.columns]
        return table

    def to_dict(self) -> dict[str, Any]:
        """Everything :meth:`lines` says, as numbers (``vitscale summary --json``)."""
        points = [
            {
                "world": r.world,
                "fraction": _num(r.fraction),
                "family": r.family,
                "model": r.model,
                "num_examples": int(r.num_examples),
                "mean": _num(r.mean),
                "seed_spread": _num(r.spread) if r.seeds > 1 else None,
                "seeds": int(r.seeds),
                "values": {str(s): _num(v) for s, v in r.values.items()},
            }
            for r in self.points.itertuples()
        ]
        gaps = [{k: _json(v) for k, v in row.items()} for row in self.gaps.to_dict("records")]
        return {
            "metric": f"fewshot/<world's transfer task>/{self.shots}shot",
            "noise_factor": FACTOR,
            "points": points,
            "gaps": gaps,
            **{k: _json(getattr(self, k)) for k in ("h0", "h1", "h2", "h3", "falsifier")},
            "verdict": self.lines(),
        }

    def lines(self) -> list[str]:
        """The verdict in plain words, each rule with the numbers that decide it."""
        return [
            f"metric: {self.shots}-shot accuracy on each world's own transfer glyphs (%), best "
            "value during training; mean ± spread (max - min) over seeds; gap = ResNet - ViT; "
            f"noise unit = the larger spread of the two (one seed: its model's largest "
            f"{SEEDS}-seed spread); beyond the noise = over {FACTOR:g} noise units",
            _h0_line(self.h0),
            *_h1_lines(self.h1),
            *_h2_lines(self.h2),
            _h3_line(self.h3),
            _falsifier_line(self.falsifier),
        ]


# ------------------------------------------------------------------------------ the numbers


def summarise(
    frame: pd.DataFrame, *, worlds: Mapping[str, World] = WORLDS, shots: int = SHOTS
) -> Control:
    """The control's points, gaps and verdicts from a cells frame (finished cells only)."""
    done = frame[(frame["status"] == STATUS_DONE) & frame["pretrain_dataset"].isin(set(worlds))]
    rows = []
    for r in done.to_dict("records"):
        world = worlds[r["pretrain_dataset"]]
        value = r.get(fewshot_key(world.transfer, shots))
        if pd.isna(value) or pd.isna(r["num_examples"]):
            continue
        rows.append(
            {
                "world": world.name,
                "fraction": world.fraction,
                "family": r["family"],
                "model": r["model"],
                "num_examples": int(r["num_examples"]),
                "seed": r.get("seed"),
                "value": float(value),
            }
        )
    if not rows:
        raise ValueError(
            f"no finished cell of the control has its world's {shots}-shot transfer accuracy"
        )
    points = _points(pd.DataFrame(rows))
    gaps = _gaps(points)
    return Control(
        shots=shots,
        points=points,
        gaps=gaps,
        h0=_h0(points),
        h1=_h1(gaps),
        h2=_h2(gaps),
        h3=_h3(gaps),
        falsifier=_falsifier(gaps),
    )


def _points(cells: pd.DataFrame) -> pd.DataFrame:
    keys = ["world", "fraction", "family", "model", "num_examples"]
    out = []
    for key, group in cells.groupby(keys, sort=False, dropna=False):
        values = dict(zip(group["seed"], group["value"], strict=True))
        v = group["value"].to_numpy()
        out.append(
            dict(zip(keys, key, strict=True))
            | {
                "mean": float(v.mean()),
                "spread": float(v.max() - v.min()) if len(v) > 1 else float("nan"),
                "seeds": len(v),
                "values": values,
            }
        )
    points = pd.DataFrame(out)
    # The stand-in for a point with fewer seeds: its model's largest SEEDS-seed spread.
    decided = points[points.seeds >= SEEDS].groupby("model")["spread"].max()
    points["noise"] = [
        r.spread if r.seeds >= SEEDS else decided.get(r.model, float("nan"))
        for r in points.itertuples()
    ]
    order = points["fraction"].map(lambda f: 2.0 if f is None or pd.isna(f) else f)
    return points.assign(_o=order).sort_values(["_o", "family", "model", "num_examples"]).drop(
        columns="_o"
    ).reset_index(drop=True)  # fmt: skip


def _gaps(points: pd.DataFrame) -> pd.DataFrame:
    """Per (pixel level, subset): each family's best point (highest mean), the gap, the
    noise unit, and whether every shared seed's own gap has one sign."""
    rows = []
    moved = points[points["fraction"].notna()]
    for (world, fraction, n), group in moved.groupby(
        ["world", "fraction", "num_examples"], sort=True
    ):
        best = {}
        for family in FAMILIES:
            fam = group[group.family == family]
            if len(fam):
                best[family] = fam.loc[fam["mean"].idxmax()]
        if len(best) < 2:
            continue
        r, v = best["ResNet"], best["ViT"]
        shared = sorted(set(r["values"]) & set(v["values"]))
        signs = {np.sign(r["values"][s] - v["values"][s]) for s in shared}
        rows.append(
            {
                "world": world,
                "fraction": float(fraction),
                "num_examples": int(n),
                "resnet_model": r["model"],
                "resnet": r["mean"],
                "resnet_seeds": int(r["seeds"]),
                "vit_model": v["model"],
                "vit": v["mean"],
                "vit_seeds": int(v["seeds"]),
                "gap": r["mean"] - v["mean"],
                "unit": max(r["noise"], v["noise"]),
                "decides": bool(min(r["seeds"], v["seeds"]) >= SEEDS),
                "seeds_agree": (len(signs) == 1) if len(shared) > 1 else None,
            }
        )
    if not rows:  # one family alone so far (a grid still running): no gap measured yet
        return pd.DataFrame(columns=[*_GAP_KEYS, "gap", "unit", "decides"])
    return pd.DataFrame(rows).sort_values(_GAP_KEYS).reset_index(drop=True)


def _beyond(value: float, unit: float) -> bool | None:
    """|value| beyond FACTOR noise units; None when the unit is not known."""
    return bool(abs(value) > FACTOR * unit) if np.isfinite(unit) else None


def _h0(points: pd.DataFrame) -> dict[str, Any] | None:
    vit = points[points.family == "ViT"]
    control = vit[vit["fraction"].isna()]
    glyphs = vit[vit["fraction"] == 0.0]
    shared = sorted(set(control.num_examples) & set(glyphs.num_examples))
    if not shared:
        return None
    n = shared[-1]
    a = control[control.num_examples == n].iloc[0]
    b = glyphs[(glyphs.num_examples == n) & (glyphs.model == a.model)]
    if b.empty:
        return None
    b = b.iloc[0]
    unit = max(a["noise"], b["noise"])
    moved = _beyond(a["mean"] - b["mean"], unit)
    return {
        "model": a.model,
        "num_examples": int(n),
        "sigma_tau": a["mean"],
        "sigma_tau_spread": a["spread"],
        "sigma_tau_seeds": int(a["seeds"]),
        "glyphs": b["mean"],
        "glyphs_spread": b["spread"],
        "glyphs_seeds": int(b["seeds"]),
        "difference": a["mean"] - b["mean"],
        "unit": unit,
        "holds": None if moved is None else not moved,
    }


def _h1(gaps: pd.DataFrame) -> dict[str, Any] | None:
    levels = sorted(gaps["fraction"].unique())
    if len(levels) < 2:
        return None
    subsets = []
    for n, group in gaps.groupby("num_examples", sort=True):
        g = group.set_index("fraction").reindex(levels)
        if g["gap"].isna().any():
            continue
        lo, hi = g.iloc[0], g.iloc[-1]
        unit = max(lo["unit"], hi["unit"])
        falls = bool(lo["gap"] - hi["gap"] > FACTOR * unit) if np.isfinite(unit) else None
        rises = [
            {"from": a, "to": b, "rise": g.at[b, "gap"] - g.at[a, "gap"]}
            for a, b in zip(levels, levels[1:], strict=False)
            if g.at[b, "gap"] - g.at[a, "gap"] > FACTOR * max(g.at[a, "unit"], g.at[b, "unit"])
        ]
        subsets.append(
            {
                "num_examples": int(n),
                "gaps": {str(f): g.at[f, "gap"] for f in levels},
                "fall": lo["gap"] - hi["gap"],
                "unit": unit,
                "falls": falls,
                "rises": rises,
                "holds": None if falls is None else bool(falls and not rises),
            }
        )
    if not subsets:
        return None
    verdicts = [s["holds"] for s in subsets]
    holds = None if None in verdicts else all(verdicts)
    return {"levels": levels, "subsets": subsets, "holds": holds}


def _h2(gaps: pd.DataFrame) -> dict[str, Any] | None:
    if gaps.empty or gaps.num_examples.nunique() < 2:
        return None
    small, large = gaps.num_examples.min(), gaps.num_examples.max()
    levels = []
    for fraction, group in gaps.groupby("fraction", sort=True):
        ends = group.set_index("num_examples")
        if small not in ends.index or large not in ends.index:
            continue
        s, b = ends.loc[small], ends.loc[large]
        resnet = bool(s["gap"] > 0 and _beyond(s["gap"], s["unit"]))
        vit = bool(b["gap"] < 0 and _beyond(b["gap"], b["unit"]))
        levels.append(
            {
                "fraction": float(fraction),
                "gap_smallest": s["gap"],
                "unit_smallest": s["unit"],
                "gap_largest": b["gap"],
                "unit_largest": b["unit"],
                "decided": bool(s["decides"] and b["decides"]),
                "resnet_leads_smallest": resnet,
                "vit_leads_largest": vit,
                "crossover": resnet and vit,
            }
        )
    decided = [lv for lv in levels if lv["decided"]]
    return {
        "smallest": int(small),
        "largest": int(large),
        "levels": levels,
        "holds_at": [lv["fraction"] for lv in decided if lv["crossover"]],
        "holds": bool(any(lv["crossover"] for lv in decided)) if decided else None,
    }


def crossing(subsets: np.ndarray, gaps: np.ndarray) -> float:
    """Where the gap (ResNet - ViT) first turns from positive to zero or negative, going up
    in subset size: linear in log subset between the two subsets around it; the smallest
    subset when the ViT leads there already; ``inf`` when the ResNet leads everywhere."""
    if gaps[0] <= 0:
        return float(subsets[0])
    for i in range(len(gaps) - 1):
        if gaps[i] > 0 >= gaps[i + 1]:
            t = gaps[i] / (gaps[i] - gaps[i + 1])
            lo, hi = math.log(subsets[i]), math.log(subsets[i + 1])
            return float(math.exp(lo + t * (hi - lo)))
    return math.inf


def _h3(gaps: pd.DataFrame) -> dict[str, Any] | None:
    levels = []
    for fraction, group in gaps.groupby("fraction", sort=True):
        g = group.sort_values("num_examples")
        x = crossing(g["num_examples"].to_numpy(float), g["gap"].to_numpy(float))
        levels.append(
            {
                "fraction": float(fraction),
                "crossing": x,
                "at_smallest": bool(x == g.num_examples.min()),
            }
        )
    if len(levels) < 2:
        return None
    xs = [lv["crossing"] for lv in levels]
    rises = [
        (a["fraction"], b["fraction"])
        for a, b in zip(levels, levels[1:], strict=False)
        if b["crossing"] > a["crossing"]
    ]
    return {"levels": levels, "rises": rises, "holds": bool(not rises and xs[-1] < xs[0])}


def _falsifier(gaps: pd.DataFrame) -> dict[str, Any] | None:
    if gaps.empty:
        return None
    ahead = gaps[gaps.gap <= 0]
    return {
        "holds": bool(ahead.empty),
        "vit_ahead_at": [
            {"fraction": r.fraction, "num_examples": int(r.num_examples), "gap": r.gap}
            for r in ahead.itertuples()
        ],
    }


# ------------------------------------------------------------------------------ the words


def _level(fraction: float | None) -> str:
    if fraction is None or pd.isna(fraction):
        return "sigma + tau"
    return f"f = {fraction:g}"


def _yes(holds: bool | None) -> str:
    return {True: "holds", False: "does not hold", None: "not decided"}[holds]


def _pm(mean: float, spread: float, seeds: int) -> str:
    return f"{mean:.1f}" + (f" ± {spread:.1f}" if seeds > 1 else " (one seed)")


def _h0_line(h: dict[str, Any] | None) -> str:
    head = "H0 (under sigma + tau the ViT does not move beyond the seed noise)"
    if h is None:
        return f"{head}: not measured (no ViT under sigma + tau and at f = 0 at one subset)"
    return (
        f"{head}: {_yes(h['holds'])}: {h['model']} at {h['num_examples']:,} images "
        f"{_pm(h['sigma_tau'], h['sigma_tau_spread'], h['sigma_tau_seeds'])} under sigma + tau "
        f"vs {_pm(h['glyphs'], h['glyphs_spread'], h['glyphs_seeds'])} at f = 0: "
        f"{h['difference']:+.1f} points, against {FACTOR:g} x {h['unit']:.1f}"
    )


def _h1_lines(h: dict[str, Any] | None) -> list[str]:
    head = "H1 (the ResNet's lead at each subset falls as f rises)"
    if h is None:
        return [f"{head}: not measured (fewer than two levels at a subset)"]
    out = [f"{head}: {_yes(h['holds'])}"]
    for s in h["subsets"]:
        path = " -> ".join(f"{g:+.1f}" for g in s["gaps"].values())
        levels = "/".join(f"{float(f):g}" for f in s["gaps"])
        rises = "; ".join(
            f"rises {r['rise']:.1f} from f = {r['from']:g} to {r['to']:g}" for r in s["rises"]
        )
        out.append(
            f"  {s['num_examples']:,} images: gap {path} (f = {levels}): falls "
            f"{s['fall']:.1f} against {FACTOR:g} x {s['unit']:.1f}"
            + (f"; {rises}" if rises else "; no rise beyond the noise")
            + f": {_yes(s['holds'])}"
        )
    return out


def _h2_lines(h: dict[str, Any] | None) -> list[str]:
    head = "H2 (at some f the ResNet leads at the smallest subset and the ViT at the largest)"
    if h is None:
        return [f"{head}: not measured (fewer than two subsets)"]
    out = [f"{head}: {_yes(h['holds'])}" + (
        f" at f = {', '.join(f'{f:g}' for f in h['holds_at'])}" if h["holds_at"] else ""
    )]  # fmt: skip
    for lv in h["levels"]:
        note = "" if lv["decided"] else f" (fewer than {SEEDS} seeds: reported, not decided)"
        out.append(
            f"  f = {lv['fraction']:g}: gap {lv['gap_smallest']:+.1f} at {h['smallest']:,} "
            f"(noise unit {lv['unit_smallest']:.1f}), {lv['gap_largest']:+.1f} at "
            f"{h['largest']:,} ({lv['unit_largest']:.1f}): "
            + ("crossover beyond the noise" if lv["crossover"] else _no_crossover(lv))
            + note
        )
    return out


def _no_crossover(lv: dict[str, Any]) -> str:
    parts = [
        "the ResNet ahead at the smallest beyond the noise"
        if lv["resnet_leads_smallest"]
        else "no ResNet lead beyond the noise at the smallest",
        "the ViT ahead at the largest beyond the noise"
        if lv["vit_leads_largest"]
        else "no ViT lead beyond the noise at the largest",
    ]
    return "no crossover: " + ", ".join(parts)


def _crossing_text(lv: dict[str, Any]) -> str:
    if math.isinf(lv["crossing"]):
        return "none"
    return f"<= {lv['crossing']:,.0f}" if lv["at_smallest"] else f"~{lv['crossing']:,.0f}"


def _h3_line(h: dict[str, Any] | None) -> str:
    head = "H3 (the subset where the families cross falls as f rises)"
    if h is None:
        return f"{head}: not measured (fewer than two levels)"
    where = ", ".join(f"f = {lv['fraction']:g}: {_crossing_text(lv)}" for lv in h["levels"])
    why = "; ".join(f"rises from f = {a:g} to {b:g}" for a, b in h["rises"])
    return f"{head}: {_yes(h['holds'])}: crossing subset {where}" + (f" ({why})" if why else "")


def _falsifier_line(h: dict[str, Any] | None) -> str:
    head = "falsifier (the ResNet leads at every subset at every level)"
    if h is None:
        return f"{head}: not measured"
    if h["holds"]:
        return f"{head}: holds: no crossover anywhere, even with the convolution's prior taken away"
    where = ", ".join(
        f"f = {a['fraction']:g} at {a['num_examples']:,} ({a['gap']:+.1f})"
        for a in h["vit_ahead_at"]
    )
    return f"{head}: does not hold: the ViT leads (mean gap <= 0) at {where}"
