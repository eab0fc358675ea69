"""Synthetic run folders that follow the run-folder contract, without training anything.

For the tests and ``benchmarks/analysis_speed.py``, and to try the figures on a laptop:
:func:`write_runs` writes ``root/<grid>/<cell-id>/`` folders with a config.json, a
metrics.jsonl and a result.json shaped exactly as the trainer writes them
(:mod:`vitscale.record`). Accuracies follow a saturating power law in compute and in
data, with noise, so the figures show the paper's kind of curves; compute and parameters
are vitscale's own analytic counts (:mod:`vitscale.flops`) at 32 px.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vitscale import flops
from vitscale import record as rf

# Demo-sized models of each family (vitscale.catalog) and nested subset sizes.
MODELS = (
    "ViT-Pico/8",
    "ViT-Pico/4",
    "ViT-Nano/4",
    "BiT-R11x0.5",
    "BiT-R20x0.5",
    "R50x1+ViT-Pico/16",
)
SUBSETS = (1_000, 3_000, 10_000, 30_000, 100_000)
DATASETS = ("synthetic-shapes", "synthetic-textures")
SHOTS = (1, 5, 10, 25)
STEPS = (200, 400, 800)
RESOLUTION = 32
BATCH = 256


def _dump(path: Path, obj) -> None:
    # Fixtures skip the trainer's fsync (runfolder.write_json_atomic): thousands of them.
    path.write_text(json.dumps(obj, indent=1))


def write_cell(
    run_dir: str | os.PathLike,
    *,
    config: dict,
    metrics: Sequence[dict] = (),
    result: dict | None = None,
) -> Path:
    """Write one run folder: config.json, then metrics.jsonl and result.json when given."""
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    _dump(path / rf.CONFIG, config)
    if metrics:
        with open(path / rf.METRICS, "w") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in metrics)
    if result is not None:
        _dump(path / rf.RESULT, result)
    return path


def _accuracy(exaflops: float, examples: int, shots: int, rng) -> float:
    """Saturating in compute and data (Zhai et al. 2021's form), a few shots cost accuracy."""
    err = 0.05 + 0.5 * (exaflops / 1e-7) ** -0.25 + 0.3 * (examples / 1e3) ** -0.5
    err += 0.1 / shots
    return float(np.clip(1 - err + rng.normal(0, 0.01), 0.01, 0.99))


def cell(
    *,
    model: str,
    subset: int,
    steps: int,
    seed: int = 0,
    grid: str = "fixture",
    datasets: Sequence[str] = DATASETS,
    finetune: dict[str, float] | None = None,
    evals: int = 4,
    rng: np.random.Generator | None = None,
) -> tuple[dict, list[dict], dict]:
    """``(config, metrics rows, result)`` of one finished cell, as the trainer writes them.

    ``finetune`` ({dataset: top-1 fraction}) fills result["finetune"].
    """
    rng = np.random.default_rng(seed) if rng is None else rng
    config = {
        "grid": grid,
        "seed": seed,
        "model": {"name": model, "pool": None, "dropout": 0.0},
        "data": {
            "dataset": "synthetic",
            "root": None,
            "image_size": RESOLUTION,
            "subset": subset,
            "num_examples": subset,
        },
        "train": {"steps": steps, "batch_size": BATCH, "loss": "softmax"},
        "optim": {"name": "adamw", "lr": 1e-3, "weight_decay": 0.1, "schedule": "linear"},
        "eval": {"fewshot": {"datasets": list(datasets), "shots": list(SHOTS)}},
    }
    blob = json.dumps(config, sort_keys=True).encode()
    config["cell_id"] = cell_id = hashlib.sha1(blob).hexdigest()[:10]
    count = flops.count(model, RESOLUTION, num_classes=10, head="pretrain")
    per_example = count.train_flops_per_example / 1e18
    rows, best = [], {}
    for e in range(1, evals + 1):
        step = steps * e // evals
        seen = step * BATCH
        row = {
            rf.STEP: step,
            rf.EXAMPLES_SEEN: seen,
            rf.TRAIN_LOSS: 2.0 / (1 + e),
            rf.LR: 1e-3 * (1 - e / (evals + 1)),
            rf.EXAFLOPS: seen * per_example,
            rf.THROUGHPUT: 1000.0,
        }
        for ds, k in itertools.product(datasets, SHOTS):
            key = rf.fewshot_key(ds, k)
            row[key] = _accuracy(seen * per_example, min(seen, subset), k, rng)
            best[key] = max(row[key], best.get(key, 0.0))
        rows.append(row)
    last = rows[-1]
    result = rf.RunResult(
        status=rf.STATUS_DONE,
        cell_id=cell_id,
        model=model,
        steps=steps,
        examples_seen=last[rf.EXAMPLES_SEEN],
        pretrain_exaflops=last[rf.EXAFLOPS],
        params=count.params,
        wall_clock_s=60.0,
        device_hours=60.0 / 3600,
        final={k: v for k, v in last.items() if k not in (rf.STEP, rf.EXAMPLES_SEEN)},
        best=best,
        finetune=dict(finetune or {}),
    ).to_json()
    return config, rows, result


def write_runs(
    root: str | os.PathLike,
    *,
    cells: int,
    grid: str = "fixture",
    models: Sequence[str] = MODELS,
    subsets: Sequence[int] = SUBSETS,
    datasets: Sequence[str] = DATASETS,
    steps: Sequence[int] = STEPS,
    evals: int = 4,
    seed: int = 0,
) -> list[Path]:
    """Write ``cells`` finished cells into ``root/grid/``: every (steps, subset, model)
    triple, then again with the next seed, until there are ``cells``. Returns the run
    folders."""
    rng = np.random.default_rng(seed)
    out = []
    per_seed = list(itertools.product(steps, subsets, models))
    for i in range(cells):
        run_seed, (n_steps, subset, model) = i // len(per_seed), per_seed[i % len(per_seed)]
        config, rows, result = cell(
            model=model,
            subset=subset,
            steps=n_steps,
            seed=run_seed,
            grid=grid,
            datasets=datasets,
            evals=evals,
            rng=rng,
        )
        run_dir = Path(root) / grid / config["cell_id"]
        out.append(write_cell(run_dir, config=config, metrics=rows, result=result))
    return out
