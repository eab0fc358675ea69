"""Extrapolating learning curves: the 72-evaluation comparison of benchmarks/RESULTS.md
("Extrapolating learning curves") in one command.

Each JFT-300M few-shot learning curve of Alabdulmohsin, Neyshabur & Zhai (NeurIPS 2022;
analysis.reference.jft) is fitted on its published fit rows and scored on its later rows
by the RMSE of log error (analysis.holdout), for: their estimators M1-M4
(scaling_baselines.py); "vitscale fit" as it was before extrapolate (the Zhai et al. 2021
law on the curve's own frontier, 200 bootstrap refits, their band as the interval); and
analysis.scaling.extrapolate with its 95% interval. Then: extrapolate's coverage at other
levels, the ImageNet 5-shot crossover of ViT-B/16 and BiT-R50x1, and coverage on synthetic
curves drawn from known laws (synthetic_curves.py).

M2 and M4 iterate up to 10,000 rounds (12 and 23 s per fit on a loaded 2-core machine, ~45
minutes for the 72): ``--cache PATH`` keeps every baseline's predictions and timings in a
JSON file and reuses them; extrapolate is always rerun.

Usage: python benchmarks/extrapolation.py [--cache PATH] [--jobs N] [--out FILE]
       [--details FILE] [--no-synthetic] [--synthetic-power-law]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scaling_baselines as baselines  # noqa: E402
import synthetic_curves as synthetic  # noqa: E402

from analysis import holdout  # noqa: E402
from analysis.crossover import crossovers  # noqa: E402
from analysis.reference import jft  # noqa: E402
from analysis.scaling import extrapolate, fit_power_law  # noqa: E402

POWER_LAW, NEW = "vitscale fit", "extrapolate"
ESTIMATORS = (*baselines.ESTIMATORS, POWER_LAW, NEW)
LABELS = {POWER_LAW: "vitscale fit (before)", NEW: "**extrapolate (new)**"}
FAMILIES = {"ViT": "ViT", "BiT": "ResNet", "Mixer": "Mixer"}  # column -> jft family
LEVELS = (0.5, 0.8, 0.9, 0.95, 0.99)
BOOTSTRAP = 200


def _key(split: holdout.Split) -> str:
    return f"{split.name}|{split.metric}"


def _predict(job: tuple[str, holdout.Split]) -> dict:
    name, split = job
    start = time.perf_counter()
    lower = upper = None
    if name in baselines.ESTIMATORS:
        pred = baselines.ESTIMATORS[name](split.x_fit, split.y_fit)(split.x_held)
    else:
        method = "power-law" if name == POWER_LAW else "extrapolate"
        pred, lower, upper = holdout.predict(split, estimator=method, bootstrap=BOOTSTRAP)
    out = {"pred": np.asarray(pred, float).tolist(), "sec": time.perf_counter() - start}
    if lower is not None:
        out |= {"lo": np.asarray(lower).tolist(), "hi": np.asarray(upper).tolist()}
    return out


def run(name: str, splits: list, *, jobs: int, done: dict) -> dict:
    """``{key: prediction}`` of estimator ``name`` for every split (``done``: cached)."""
    from tqdm import tqdm

    todo = [s for s in splits if _key(s) not in done]
    results = dict(done)
    jobs_ = [(name, s) for s in todo]
    bar = dict(desc=name, unit="curve", leave=False, total=len(todo))
    if jobs > 1 and todo:
        with ProcessPoolExecutor(jobs) as pool:
            outs = list(tqdm(pool.map(_predict, jobs_), **bar))
    else:
        outs = [_predict(j) for j in tqdm(jobs_, **bar)]
    results.update({_key(s): o for s, o in zip(todo, outs, strict=True)})
    return results


def summarise(name: str, res: dict, splits: list, m4_rmse: np.ndarray | None) -> dict:
    """One row of the table: RMSE mean, median, per family; wins; seconds; coverage."""
    rmse = np.array([holdout.log_rmse(res[_key(s)]["pred"], s.y_held) for s in splits])
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
        "sec": np.mean([res[_key(s)]["sec"] for s in splits]),
    }
    if "lo" in res[_key(splits[0])]:
        r = [res[_key(s)] for s in splits]
        cov = np.array(
            [holdout.coverage(s.y_held, x["lo"], x["hi"]) for s, x in zip(splits, r, strict=True)]
        )
        n = np.array([len(s.y_held) for s in splits])
        row |= {
            "cov": cov,
            "cov_mean": cov.mean(),
            "cov_median": np.median(cov),
            "cov_pooled": np.sum(cov * n) / n.sum(),
            "width": np.mean([np.mean(np.log(x["hi"]) - np.log(x["lo"])) for x in r]),
        }
    return row


def table(rows: list[dict], total: int) -> str:
    head = (
        "| estimator | mean RMSE | median | ViT | BiT | Mixer | wins vs M4 | s per fit "
        "| cov. mean | cov. median | cov. pooled | mean width (log) |"
    )
    out = [head, "|---|" + "---:|" * 11]
    for r in rows:
        cells = [r["estimator"], *(f"{r[k]:.4f}" for k in ("mean", "median", *FAMILIES))]
        cells += ["-" if r["wins"] is None else f"{r['wins']}/{total}", f"{r['sec']:.3f}"]
        if "cov" in r:
            cells += [f"{r[k]:.3f}" for k in ("cov_mean", "cov_median", "cov_pooled")]
            cells.append(f"{r['width']:.4f}")
        else:
            cells += ["-"] * 4
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def level_table(splits: list, at_95: dict) -> str:
    """extrapolate's mean per-curve coverage at other levels (a fit per curve and level)."""
    cells = []
    for level in LEVELS:
        cov = []
        for s in splits:
            if level == 0.95:
                lo, hi = at_95[_key(s)]["lo"], at_95[_key(s)]["hi"]
            else:
                _, lo, hi = extrapolate(s.x_fit, s.y_fit, s.x_held, level=level)
            cov.append(holdout.coverage(s.y_held, lo, hi))
        cells.append(f"{np.mean(cov):.3f}")
    return "\n".join(
        [
            "| level | " + " | ".join(map(str, LEVELS)) + " |",
            "|---|" + "---:|" * len(LEVELS),
            f"| mean coverage ({len(splits)}) | " + " | ".join(cells) + " |",
        ]
    )


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
    args = p.parse_args()

    splits = jft.splits()
    cache = json.loads(args.cache.read_text()) if args.cache and args.cache.exists() else {}
    results = {}
    for name in ESTIMATORS:
        start = time.perf_counter()
        done = cache.get(name, {}) if name != NEW else {}
        results[name] = run(name, splits, jobs=args.jobs if name != NEW else 1, done=done)
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        if args.cache and name != NEW:
            cache[name] = results[name]
            args.cache.write_text(json.dumps(cache))
    m4 = summarise("M4", results["M4"], splits, None)["rmse"]
    rows = [summarise(n, results[n], splits, None if n == "M4" else m4) for n in ESTIMATORS]
    new, before = rows[-1], rows[-2]
    vb = np.array([s.family != "Mixer" for s in splits])
    report = [
        f"## {len(splits)} JFT evaluations (RMSE of log error on the held-out rows; 95% intervals)",
        "",
        table(rows, len(splits)),
        "",
        f"extrapolate: mean RMSE {new['mean']:.4f}, {100 * (new['mean'] / rows[3]['mean'] - 1):+.1f}% "
        f"against M4; coverage ViT+BiT (which set K95) {new['cov'][vb].mean():.3f}, Mixer (held "
        f"out) {new['cov'][~vb].mean():.3f}; mean width {new['width'] / before['width']:.1f}x the "
        "bootstrap band's.",
        "",
        "## extrapolate: coverage at other levels",
        "",
        level_table(splits, results[NEW]),
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
        per_curve = {
            r["estimator"]: {
                _key(s): {"rmse": r["rmse"][i], **({"coverage": r["cov"][i]} if "cov" in r else {})}
                for i, s in enumerate(splits)
            }
            for r in rows
        }
        args.details.write_text(json.dumps(per_curve, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
