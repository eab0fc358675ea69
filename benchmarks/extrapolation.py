"""Extrapolating learning curves: the 72-evaluation comparison of benchmarks/RESULTS.md
("Extrapolating learning curves") in one command, and the selection of extrapolate's design.

Each JFT-300M few-shot learning curve of Alabdulmohsin, Neyshabur & Zhai (NeurIPS 2022;
analysis.reference.jft) is fitted on its published fit rows (Training 1) and scored on its
later rows (Training 0) by the RMSE of log error (analysis.holdout), for: their estimators
M1-M4 and a broken neural scaling law with one break (scaling_baselines.py); "vitscale fit"
as it was before extrapolate (the Zhai et al. 2021 law on the curve's own frontier, 200
bootstrap refits, their band as the interval); analysis.scaling.extrapolate as it was at
commit BEFORE (loaded from git) and as it is. The interval estimators are also scored by
the coverage of their intervals at LEVELS and, where they have a predictive density, by
the mean log-likelihood of the held-out points (the density of the error itself, per unit
of error, as Lee et al. (ICML 2025) score NSL-PFN: analysis.extrapolation.Predictive.logpdf).
Then: the ImageNet 5-shot crossover of ViT-B/16 and BiT-R50x1, and coverage on synthetic
curves drawn from known laws (synthetic_curves.py).

``--select`` instead chooses extrapolate's LATE without reading a held-out row: on
backtests inside the fit rows (analysis.holdout.inner_split: cut A holds out each curve's
last doubling of fit rows, cut B the doubling before it), LATE minimises the mean RMSE over
the grid below; it prints those scores for the candidates. The interval's scale is not
selected here: analysis.calibration learns it from the held-out rows of other curves, and
the main table scores it leave one dataset out (the calibration learnt without any curve
of the scored dataset) beside the shipped calibration, which is in sample.

M2 and M4 iterate up to 10,000 rounds (12 and 23 s per fit on a loaded 2-core machine, ~45
minutes for the 72): ``--cache PATH`` keeps every baseline's predictions and timings in a
JSON file and reuses them; both extrapolates are always rerun.

Usage: python benchmarks/extrapolation.py [--cache PATH] [--jobs N] [--out FILE]
       [--details FILE] [--no-synthetic] [--synthetic-power-law] [--select]
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import time
import types
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy.stats import norm, t

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scaling_baselines as baselines  # noqa: E402
import synthetic_curves as synthetic  # noqa: E402

from analysis import calibration, extrapolation, holdout  # noqa: E402
from analysis.crossover import crossovers  # noqa: E402
from analysis.reference import jft  # noqa: E402
from analysis.scaling import extrapolate, fit_power_law  # noqa: E402

BEFORE = "b5bf201"  # the commit whose analysis/extrapolation.py is "extrapolate (before)"
POWER_LAW, OLD, NEW = "vitscale fit", "extrapolate (before)", "extrapolate"
IN_SAMPLE = "extrapolate, shipped"
ESTIMATORS = (*baselines.ESTIMATORS, POWER_LAW, OLD)
CACHED = (*baselines.ESTIMATORS, POWER_LAW)
LABELS = {
    POWER_LAW: "vitscale fit (before)",
    IN_SAMPLE: "extrapolate, shipped JFT calibration (in sample)",
    NEW: "**extrapolate, calibrated leave one dataset out**",
}
FAMILIES = {"ViT": "ViT", "BiT": "ResNet", "Mixer": "Mixer"}  # column -> jft family
LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)  # also MSCE's levels
BOOTSTRAP = 200
# Lee et al., "Bayesian Neural Scaling Law Extrapolation with Prior-Data Fitted Networks"
# (ICML 2025, arXiv:2505.23032), the same 72 curves and split: (RMSLE mean, log-likelihood,
# MSCE on the vision curves).
PUBLISHED = {
    "NSL-PFN": (0.0280, 3.330, 0.0512),
    "LC-PFN": (0.0428, None, None),
    "BNSL (their fit)": (0.0406, None, None),
    "M4 (their run)": (0.0415, None, None),
    "MCMC (M4)": (None, 3.024, 0.0381),
}
# --select: the backtest cuts (before, reach) of holdout.inner_split and the grids
CUTS = {"A": (1.0, 2.0), "B": (2.0, 2.0)}
GRID_LATE = [round(float(v), 2) for v in np.arange(0.70, 1.0001, 0.01)]


def _key(split: holdout.Split) -> str:
    return f"{split.name}|{split.metric}"


@functools.cache
def before_module() -> types.ModuleType:
    """analysis/extrapolation.py as of commit BEFORE, read with git and loaded as a module."""
    root = Path(__file__).resolve().parents[1]
    path = f"{BEFORE}:analysis/extrapolation.py"
    src = subprocess.run(
        ["git", "-C", str(root), "show", path], check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType("extrapolation_before")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(src, path, "exec"), module.__dict__)
    return module


def _implied_logpdf(old, u: np.ndarray, noise: float, m: np.ndarray) -> np.ndarray:
    """The old interval as a law: its level-L interval mu +- sqrt((z_L noise)^2 + (k_L m)^2)
    is the central interval of one symmetric law of log y, whose CDF at mu + u is the p
    with half(p) = u (found by bisection); its density is 1 / half'(p)."""
    c = old.K95 / t.ppf(0.975, old.T_DOF)
    u = np.maximum(u, 1e-12)

    def half(p):
        return np.hypot(norm.ppf(p) * noise, c * t.ppf(p, old.T_DOF) * m)

    lo, hi = np.full_like(u, 0.5), np.full_like(u, 1.0 - 1e-15)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = half(mid) < u
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    p = 0.5 * (lo + hi)
    zn, zt = norm.ppf(p), t.ppf(p, old.T_DOF)
    slope = (noise**2 * zn / norm.pdf(zn) + (c * m) ** 2 * zt / t.pdf(zt, old.T_DOF)) / np.maximum(
        half(p), 1e-300
    )
    at_zero = np.hypot(noise / norm.pdf(0.0), c * m / t.pdf(0.0, old.T_DOF))
    return -np.log(np.where(p - 0.5 < 1e-9, at_zero, slope))


def _old_law(old, x, y, xt, yt) -> dict:
    """The old estimator's bands at LEVELS (its own formula, one fit) and the mean log
    density its intervals imply at the held-out points."""
    pred, lo95, hi95, d = old.extrapolate_with_details(x, y, xt)
    z = np.log(xt / d.x_last)
    m = d.s * (np.maximum(np.maximum(z, np.log(x.min() / d.x_last) - z), 0.0) + old.DELTA0)
    mu = np.log(pred)
    bands = {}
    for level in LEVELS:
        half = np.hypot(norm.ppf(0.5 + level / 2) * d.noise, old._k_model(level) * m)
        bands[level] = [np.minimum(np.exp(mu - half), 1.0), np.minimum(np.exp(mu + half), 1.0)]
    np.testing.assert_allclose(bands[0.95], [lo95, hi95], rtol=1e-9)
    ly = np.log(yt)
    loglik = _implied_logpdf(old, np.abs(ly - mu), d.noise, m) - ly
    return {"pred": pred, "bands": bands, "loglik": float(np.mean(loglik))}


def _as_result(law: extrapolation.Predictive, y_held: np.ndarray) -> dict:
    """A predictive law's median, bands at LEVELS and mean log density at ``y_held``."""
    return {
        "pred": law.median,
        "bands": {level: list(law.interval(level)) for level in LEVELS},
        "loglik": float(np.mean(law.logpdf(y_held))),
    }


def _predict(job: tuple[str, holdout.Split]) -> dict:
    name, s = job
    old = before_module() if name == OLD else None  # read once, not timed
    start = time.perf_counter()
    if name in baselines.ESTIMATORS:
        out = {"pred": baselines.ESTIMATORS[name](s.x_fit, s.y_fit)(s.x_held)}
    elif name == POWER_LAW:
        pred, lo, hi = holdout.predict(s, estimator="power-law", bootstrap=BOOTSTRAP)
        out = {"pred": pred, "bands": {0.95: [lo, hi]}}
    elif name == OLD:
        out = _old_law(old, s.x_fit, s.y_fit, s.x_held, s.y_held)
    else:  # the shipped calibration
        out = _as_result(extrapolation.predictive(s.x_fit, s.y_fit, s.x_held), s.y_held)
    sec = time.perf_counter() - start
    bands = {
        str(k): [np.asarray(b, float).tolist() for b in v] for k, v in out.get("bands", {}).items()
    }
    return {**out, "pred": np.asarray(out["pred"], float).tolist(), "bands": bands, "sec": sec}


def _dataset(split: holdout.Split) -> str:
    return split.metric.split("/")[1]


def calibrated(splits: list) -> tuple[dict, calibration.Calibration]:
    """extrapolate's results on every split, {estimator: {key: result}}, with the shipped
    JFT calibration (in sample) and with a calibration learnt without any curve of the
    scored dataset (analysis.calibration.out_of_fold); and calibration.learn on all."""
    from tqdm import tqdm

    laws, secs = [], []
    for s in tqdm(splits, desc=NEW, unit="curve", leave=False):
        start = time.perf_counter()
        laws.append(extrapolation.predictive(s.x_fit, s.y_fit, s.x_held))
        secs.append(time.perf_counter() - start)
    curves = [law.residuals(s.y_held) for law, s in zip(laws, splits, strict=True)]
    folds = calibration.out_of_fold(curves, [_dataset(s) for s in splits])

    def results(cals: list) -> dict:
        return {
            _key(s): {
                **_as_result(
                    extrapolation.Predictive.from_details(law.details, calibration=c), s.y_held
                ),
                "sec": sec,
            }
            for s, law, c, sec in zip(splits, laws, cals, secs, strict=True)
        }

    n = len(splits)
    out = {IN_SAMPLE: results([calibration.JFT] * n), NEW: results(folds)}
    return out, calibration.learn(curves)


def run(name: str, splits: list, *, jobs: int, done: dict) -> dict:
    """``{key: prediction}`` of estimator ``name`` for every split (``done``: cached)."""
    from tqdm import tqdm

    todo = [s for s in splits if _key(s) not in done]
    jobs_ = [(name, s) for s in todo]
    bar = dict(desc=name, unit="curve", leave=False, total=len(todo))
    if jobs > 1 and todo:
        with ProcessPoolExecutor(jobs) as pool:
            outs = list(tqdm(pool.map(_predict, jobs_), **bar))
    else:
        outs = [_predict(j) for j in tqdm(jobs_, **bar)]
    return {**done, **{_key(s): o for s, o in zip(todo, outs, strict=True)}}


def _bands(r: dict) -> dict[float, list]:
    """A result's intervals by level (older caches: one 95% band as lo/hi)."""
    if "lo" in r:
        return {0.95: [r["lo"], r["hi"]]}
    return {float(k): v for k, v in r.get("bands", {}).items()}


def summarise(name: str, res: dict, splits: list, m4_rmse: np.ndarray | None) -> dict:
    """One row of the table: RMSE mean, median, per family; wins; median seconds per fit
    (a median: a cached run's slowest fits may include time it was paused); log-likelihood;
    mean coverage per level; mean width of the 95% interval."""
    rs = [res[_key(s)] for s in splits]
    rmse = np.array(
        [holdout.log_rmse(r["pred"], s.y_held) for s, r in zip(splits, rs, strict=True)]
    )
    fam = np.array([s.family for s in splits])
    row = {
        "estimator": LABELS.get(name, name),
        "rmse": rmse,
        "mean": np.nanmean(rmse),
        "median": np.nanmedian(rmse),
        **{
            col: np.nanmean(rmse[fam == f]) if (fam == f).any() else np.nan
            for col, f in FAMILIES.items()
        },
        "wins": None if m4_rmse is None else int(np.sum(rmse < m4_rmse)),
        "sec": np.median([r["sec"] for r in rs]),
        "loglik": np.mean([r["loglik"] for r in rs]) if "loglik" in rs[0] else None,
        "cov": {},
    }
    for level in _bands(rs[0]):
        row["cov"][level] = np.array(
            [holdout.coverage(s.y_held, *_bands(r)[level]) for s, r in zip(splits, rs, strict=True)]
        )
    if set(row["cov"]) == set(LEVELS):
        row["msce"] = float(np.mean([(row["cov"][v] - v) ** 2 for v in LEVELS]))
    if 0.95 in row["cov"]:
        row["width"] = np.mean([np.mean(np.log(np.divide(*_bands(r)[0.95][::-1]))) for r in rs])
    return row


def _fmt(v, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and np.isnan(v)) else format(v, spec)


def table(rows: list[dict], total: int) -> str:
    head = (
        "| estimator | mean RMSLE | median | ViT | BiT | Mixer | wins vs M4 | s per fit (median) "
        "| log-lik. | MSCE | "
        + " | ".join(f"cov. {100 * v:.0f}%" for v in LEVELS)
        + " | width 95% (log) |"
    )
    out = [head, "|---|" + "---:|" * (11 + len(LEVELS))]
    for r in rows:
        cells = [r["estimator"], *(_fmt(r.get(k), ".4f") for k in ("mean", "median", *FAMILIES))]
        cells += [
            "-" if r.get("wins") is None else f"{r['wins']}/{total}",
            _fmt(r.get("sec"), ".3f"),
        ]
        cells += [_fmt(r.get("loglik"), ".3f"), _fmt(r.get("msce"), ".4f")]
        cells += [
            _fmt(r["cov"][v].mean() if v in r.get("cov", {}) else None, ".3f") for v in LEVELS
        ]
        cells.append(_fmt(r.get("width"), ".4f"))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def published_rows() -> list[dict]:
    """Lee et al.'s numbers on the same rows, quoted (not rerun here)."""
    return [
        {
            "estimator": f"{name} (Lee et al. 2025, quoted)",
            "mean": m,
            "loglik": ll,
            "msce": msce,
            "cov": {},
        }
        for name, (m, ll, msce) in PUBLISHED.items()
    ]


def crossover_line() -> str:
    """ImageNet 5-shot: where ViT-B/16's observed curve overtakes BiT-R50x1's."""
    m = jft.measurements()
    m = m[m["metric"] == "fewshot/imagenet/5shot"]
    a, b = (m[m["model"] == name] for name in ("ViT-B/16", "BiT-R50x1"))
    lines = []
    for c in crossovers(a["examples_seen"], a["error"], b["examples_seen"], b["error"]):
        who = "ViT-B/16 overtakes BiT-R50x1" if c.leader == "a" else "BiT-R50x1 overtakes ViT-B/16"
        lines.append(
            f"{who} at {c.x:.3g} examples seen (between ViT-B/16's points {c.x_before:.3g} "
            f"and {c.x_after:.3g}; error {c.y:.4f})"
        )
    return "\n".join(lines) or "no crossover"


def _power_law_raw(x, y, xt):
    """vitscale's law on the raw curve (no frontier step: on noisy curves the frontier keeps
    only the running minimum, which biases the fit low) and its bootstrap band."""
    law, samples = fit_power_law(x, y, bootstrap=BOOTSTRAP)
    a, b, c, d = (samples[:, [i]] for i in range(4))
    lo, hi = np.percentile(a * (xt[None, :] + d) ** (-b) + c, [2.5, 97.5], axis=0)
    return law.error(xt), lo, hi


def synthetic_table(with_power_law: bool) -> str:
    predictors = {NEW: lambda x, y, xt: extrapolate(x, y, xt)}
    if with_power_law:
        predictors[POWER_LAW] = _power_law_raw
    lines = [
        "| law | noise sd (log) | train pts | estimator | RMSE vs truth | cov. mean "
        "| cov. median | mean width (log) |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for n_train in (60, 15):
        for name, predict in predictors.items():
            if name != NEW and n_train != 60:
                continue
            for law, sigma, n, rmse, cm, cmed, w in synthetic.coverage_rows(
                predict, n_train=n_train
            ):
                lines.append(
                    f"| {law} | {sigma} | {n} | {name} | {rmse:.4f} | {cm:.3f} | {cmed:.3f} | {w:.3f} |"
                )
    return "\n".join(lines)


def _over_cuts(label: str, by_cut: dict[str, dict]) -> dict:
    """One table row from one :func:`summarise` row per backtest cut: each number the mean
    over the cuts (the label gives each cut's mean RMSLE)."""
    rows = list(by_cut.values())
    out = {
        k: None if rows[0].get(k) is None else float(np.mean([r[k] for r in rows]))
        for k in ("mean", "median", *FAMILIES, "sec", "loglik", "msce", "width")
    }
    cuts = "/".join(f"{r['mean']:.4f}" for r in rows)
    out["estimator"] = f"{label} ({'/'.join(by_cut)}: {cuts})"
    out["cov"] = {
        v: np.array([np.mean([r["cov"][v].mean() for r in rows])]) for v in rows[0]["cov"]
    }
    return out


def select(splits: list) -> str:
    """Choose LATE on backtests inside the fit rows (module docstring); a report of the
    choice and of the candidates' scores there."""
    dev = {
        cut: [d for s in splits if (d := holdout.inner_split(s, before=b, reach=r)) is not None]
        for cut, (b, r) in CUTS.items()
    }
    details = {
        cut: [extrapolation.predictive(s.x_fit, s.y_fit, s.x_held).details for s in ds]
        for cut, ds in dev.items()
    }

    def new(label: str, late: float) -> dict:
        by_cut = {}
        for cut, ds in dev.items():
            res = {
                _key(s): {
                    **_as_result(extrapolation.Predictive.from_details(d, late=late), s.y_held),
                    "sec": np.nan,
                }
                for d, s in zip(details[cut], ds, strict=True)
            }
            by_cut[cut] = summarise(label, res, ds, None)
        return _over_cuts(label, by_cut)

    by_late = {v: new("", v) for v in GRID_LATE}
    late = min(GRID_LATE, key=lambda v: by_late[v]["mean"])
    rows = [
        _over_cuts(
            f"extrapolate at {BEFORE}" if name == OLD else name,
            {
                cut: summarise(name, run(name, ds, jobs=1, done={}), ds, None)
                for cut, ds in dev.items()
            },
        )
        for name in (OLD, "M1", "M3", "BNSL")
    ]
    rows.append(new("local law alone (LATE 1)", 1.0))
    rows.append(new(f"**selected**: LATE {late}", late))
    sizes = ", ".join(f"{cut} {len(ds)}" for cut, ds in dev.items())
    return "\n".join(
        [
            f"## Selection on backtests inside the fit rows ({sizes}; no held-out row read)",
            "",
            table(rows, 0),
            "",
            "LATE: mean RMSLE "
            + ", ".join(f"{v:.2f} {by_late[v]['mean']:.4f}" for v in GRID_LATE[::5]),
            f"analysis/extrapolation.py has LATE {extrapolation.LATE}"
            + ("." if late == extrapolation.LATE else f", not the selected {late}."),
        ]
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", type=Path, help="JSON file of the baselines' predictions, reused")
    p.add_argument("--jobs", type=int, default=1, help="processes for the baselines (default 1)")
    p.add_argument("--out", type=Path, help="also write the markdown report here")
    p.add_argument("--details", type=Path, help="write per-curve RMSE and coverage (JSON)")
    p.add_argument("--no-synthetic", action="store_true", help="skip the synthetic curves")
    p.add_argument(
        "--synthetic-power-law", action="store_true", help="also the bootstrap band there (slow)"
    )
    p.add_argument("--select", action="store_true", help="only the selection on the fit rows")
    args = p.parse_args()

    splits = jft.splits()
    if args.select:
        text = select(splits) + "\n"
        print(text)
        if args.out:
            args.out.write_text(text)
        return 0
    cache = json.loads(args.cache.read_text()) if args.cache and args.cache.exists() else {}
    results = {}
    for name in ESTIMATORS:
        start = time.perf_counter()
        done = cache.get(name, {}) if name in CACHED else {}
        results[name] = run(name, splits, jobs=args.jobs if name in CACHED else 1, done=done)
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        if args.cache and name in CACHED:
            cache[name] = results[name]
            args.cache.write_text(json.dumps(cache))
    ours, learnt = calibrated(splits)
    results.update(ours)
    m4 = summarise("M4", results["M4"], splits, None)["rmse"]
    rows = [summarise(n, results[n], splits, None if n == "M4" else m4) for n in results]
    new, old = rows[-1], rows[ESTIMATORS.index(OLD)]
    shipped = "equals" if learnt == calibration.JFT else "DIFFERS FROM"
    report = [
        f"## {len(splits)} JFT evaluations (RMSE of log error on the held-out rows)",
        "",
        table(rows + published_rows(), len(splits)),
        "",
        f"extrapolate: mean RMSLE {new['mean']:.4f} (before {old['mean']:.4f}), "
        f"{100 * (new['mean'] / rows[3]['mean'] - 1):+.1f}% against M4; 95% coverage pooled "
        f"over the points {_pooled(new, splits):.3f}; curves covered under 90% at 95%: "
        + (", ".join(_worst(new, splits)) or "none"),
        "",
        f"calibration.learn on all {len(splits)} curves: {learnt} ({shipped} "
        "analysis.calibration.JFT); out-of-fold coverage "
        + ", ".join(f"{v:g}: {new['cov'][v].mean():.3f}" for v in LEVELS),
        "",
        "## Crossover, ImageNet 5-shot (observed curves, analysis.crossover)",
        "",
        crossover_line(),
    ]
    if not args.no_synthetic:
        report += [
            "",
            "## Synthetic curves (20 per cell, known law, log-normal noise; held out 1.07-2.1x the last x)",
            "",
            synthetic_table(args.synthetic_power_law),
        ]
    text = "\n".join(report) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.details:
        args.details.write_text(json.dumps(_per_curve(rows, splits), indent=1))
    return 0


def _per_curve(rows: list[dict], splits: list) -> dict:
    """--details: each estimator's RMSE and 95% coverage per curve."""
    return {
        r["estimator"]: {
            _key(s): {
                "rmse": r["rmse"][i],
                **({"coverage95": r["cov"][0.95][i]} if 0.95 in r["cov"] else {}),
            }
            for i, s in enumerate(splits)
        }
        for r in rows
    }


def _pooled(row: dict, splits: list) -> float:
    n = np.array([len(s.y_held) for s in splits])
    return float(np.sum(row["cov"][0.95] * n) / n.sum())


def _worst(row: dict, splits: list) -> list[str]:
    return [
        f"{s.name} {s.metric.split('/')[1]} {s.metric.split('/')[2]} ({c:.2f})"
        for s, c in zip(splits, row["cov"][0.95], strict=True)
        if c < 0.9
    ]


if __name__ == "__main__":
    sys.exit(main())
