"""``vitscale grid`` and ``vitscale status``: load, validate, plan, then run or submit."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from ..catalog import model_columns
from ..flops import count
from ..plan import recipe_notes
from . import actions
from .actions import decide, headline, retry_hint
from .calibration import ASSUMED, BASES, ESTIMATED, FAMILY, MEASURED
from .cost import SAFETY, START_MIN, CellCost, cell_cost, size_requests
from .placement import Placement, apply_placements, place_grid
from .profile import Profile, SlurmError, load_profile, shape_for
from .spec import Grid, GridError, load_grid
from .status import collect, format_table


def _patch(name: str) -> str:
    _, _, patch = model_columns(name)  # pixels per token side; a hybrid's downsampling
    return "-" if patch is None else str(patch)


def print_dry_run(
    grid: Grid,
    runs_root: Path,
    profile: Profile | None,
    *,
    as_json: bool,
    retry_failed: bool = False,
) -> int:
    """The cells, their cost and totals, then what submission would refuse; with a profile
    also node-hours, time-limit slices, the peak memory per GPU and the micro-batches, and
    the grid's resources checked against it as submission checks them. Exit code 2 when
    anything would be refused."""
    planned = decide(grid, runs_root, retry_failed=retry_failed)
    actions = {p.cell.id: p.action for p in planned}
    est = profile or Profile(name="default")
    costs = [
        cell_cost(c, est, resources=grid.resources_for(c) if profile else None) for c in grid.cells
    ]
    fits = {f.cell.id: f for f in place_grid(grid, profile)} if profile else {}
    problems = grid.problems_on(profile) if profile else []  # what submission would refuse
    problems += [p for f in fits.values() for p in f.problems]
    todo = [c for c in costs if actions[c.cell.id] == "submit"]
    targets = _wandb(grid)
    total = {
        "cells": len(costs),
        "to_run": len(todo),
        "done": sum(a == "skip-done" for a in actions.values()),
        "exaflops": sum(c.exaflops or 0 for c in costs),
        "finetune_exaflops": sum(c.finetune_exaflops or 0 for c in costs),
        "gpu_hours": sum(c.gpu_hours or 0 for c in costs),
        "gpu_hours_to_run": sum(c.gpu_hours or 0 for c in todo),
        "node_hours": sum(c.node_hours or 0 for c in costs) if profile else None,
        "node_hours_to_run": sum(c.node_hours or 0 for c in todo) if profile else None,
        "max_slices": max((c.slices or 0 for c in costs), default=0) if profile else None,
        "time_limit": profile.time_limit if profile else None,
        "sustained_tflops_per_gpu": est.sustained_tflops,
        "profile": est.name,
        "gpu_type": est.gpu_type,
        "gpu_hours_basis": {b: sum(c.basis == b for c in costs) for b in BASES},
        "problems": problems,
        "wandb": [dict(zip(("mode", "entity", "project"), t, strict=True)) for t in targets],
        "data": {name: row for c in grid.cells for name, row in c.plan.sets.items()},
        **_spent(costs, grid),
    }
    rows = [_row(c, actions[c.cell.id], fits.get(c.cell.id)) for c in costs]
    if profile:
        rows = [
            r | {"request": _request(grid, c, profile)} for r, c in zip(rows, costs, strict=True)
        ]
    if as_json:
        print(json.dumps({"grid": grid.name, "cells": rows, "total": total}, indent=2, default=str))
        return _refuse(problems)
    print(
        f"grid {grid.name!r} ({grid.path}): {len(costs)} cells -> {runs_root / grid.name}/<cell id>/"
    )
    columns = _COLUMNS + (_CLUSTER_COLUMNS if profile else ()) + (_MEMORY_COLUMNS if fits else ())
    head = " ".join(format(name, align) for name, align, _ in columns) + "  state"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(" ".join(format(text(r), align) for _, align, text in columns) + f"  {_state(r)}")
    print("-" * len(head))
    node_hours = f", {total['node_hours']:,.1f} node-hours" if profile else ""
    print(
        f"total: {_exaflops(total['exaflops'])} pre-training + "
        f"{_exaflops(total['finetune_exaflops'])} fine-tuning exaFLOPs, "
        f"{total['gpu_hours']:,.1f} GPU-hours{node_hours} (profile {est.name!r}); "
        f"{total['to_run']} cells to run ({total['gpu_hours_to_run']:,.1f} GPU-hours), "
        f"{total['done']} done"
    )
    _legend(grid, planned, rows, costs, total, est, profile, fits, runs_root, targets)
    return _refuse(problems)


def _legend(grid, planned, rows, costs, total, est, profile, fits, runs_root, targets) -> None:
    """What the dry-run's table and totals mean, the sets read and where the cells log:
    printed below them."""
    for row in total["data"].values():
        s = row["splits"]
        print(
            f"data: {row['name']}: {row['num_classes']:,} classes (the smallest with "
            f"{row['smallest_class']:,} train examples), train {s['train']:,}, test "
            f"{s['test']:,} ({row['test_from']}) (`vitscale data list NAME` for more)"
        )
    for mode, entity, project in targets:
        print(
            f"W&B: group {grid.name!r} in {entity or '(your default entity)'}/{project}, mode "
            f"{mode} (wandb.entity, wandb.project, wandb.mode: set them in the grid's base)"
        )
    print(
        "exaFLOPs: pre-training (paper convention, Fig. 5's x-axis); ft: fine-tuning, every "
        "set's learning-rate sweep and retrain at its resolution (few-shot evaluation not counted)"
    )
    print(
        "GPU-h: pre-training + fine-tuning, at the FLOP/s the cell's pre-training reaches; "
        + _basis_line(costs, est, given=profile is not None)
    )
    if warning := _estimated_warning(costs, est):
        print(warning)
    asked = {r["request"]["from"] for r in rows if r["request"]} if profile else set()
    if asked - {"grid"}:
        print("request: nodes x GPUs per node and time per job, the grid's resources: {gpus, time}")
    if "sized" in asked:
        print(
            f"  ~: the grid gives no gpus or no time: the fewest GPUs that finish the cell in one "
            f"time limit at {SAFETY:g}x its GPU-hour estimate, + {START_MIN} min to start and "
            "the profile's signal delay (a short estimate costs a requeue: the cell resumes)"
        )
    if "profile" in asked:
        print(
            "  *: the grid gives no gpus or no time and the estimate cannot size it (no speed "
            "measured on any GPU, or no count of GPUs finishes it in one time limit): every "
            "GPU of its nodes for the profile's time limit; set resources: {gpus: N, time: "
            "'HH:MM:SS'} in the grid to ask for less"
        )
    if profile:
        longest = max(costs, key=lambda c: c.slices or 0)
        print(
            f"node-h: GPU-h / the cell's GPUs x its nodes; slices: jobs of at most "
            f"{profile.time_limit} (the profile's limit, or the cell's time if shorter) it "
            f"runs as, one after another (the longest, {longest.cell.id}: {longest.slices}, "
            f"{_duration((longest.node_hours or 0) / _nodes(grid, longest))} at least)"
        )
    if grid.families:
        print(_spent_lines(total))
    if stale := actions.stale_cells(grid, runs_root):
        print(
            f"{len(stale)} cell(s) in {runs_root / grid.name}/ are from an earlier version of "
            "this grid: not counted (--prune moves them aside)"
        )
    if hint := retry_hint(planned, grid_path=grid.path, runs=runs_root / grid.name):
        print(hint)
    if fits:
        print(
            "GiB/GPU: estimated peak memory of a training or fine-tuning step per GPU "
            f"({'usable ' + format(_usable_gib(profile), '.1f') + ' GiB per GPU' if profile.gpu_mem_gb else 'no gpu_mem_gb in the profile: nothing checked'}); "
            "micro: pre-training micro-batch / per-GPU batch (fine-tuning's after the comma)"
        )


def _wandb(grid: Grid) -> list[tuple[str, str | None, str]]:
    """Where the cells log: each distinct (mode, entity, project)."""
    logged = {
        (c.config.wandb.mode, c.config.wandb.entity, c.config.wandb.project) for c in grid.cells
    }
    return sorted(logged, key=str)


def _row(c, action: str, fit: Placement | None) -> dict:
    """One cell of the dry-run: its JSON object, from which its table row is written."""
    cfg = c.cell.config
    return {
        "id": c.cell.id,
        "block": c.cell.block,
        "model": cfg.model.name,
        "patch": _patch(cfg.model.name),
        "subset": cfg.data.subset,
        "num_examples": c.num_examples,
        "steps": c.steps,
        "examples_seen": c.examples_seen,
        "exaflops": c.exaflops,
        "finetune_exaflops": c.finetune_exaflops,
        "gpu_hours": c.gpu_hours,
        "gpu_hours_basis": c.basis,
        "gpu_hours_measured_on": c.measured_on,
        "node_hours": c.node_hours,
        "slices": c.slices,
        "spent_exaflops": c.spent_exaflops,
        "spent_gpu_hours": c.spent_gpu_hours,
        "branch": cfg.branch.to_dict(),
        "action": action,
        "memory": _memory_json(fit),
        "config": cfg.to_dict(),
    }


def _fmt(value, spec: str = "") -> str:
    return "?" if value is None else format(value, spec)


def _micro(r: dict) -> str:
    m = r["memory"]
    micro = f"{m['micro_batch_size'] or '-'}/{m['per_process_batch']}"
    if m["finetune_per_process_batch"]:
        micro += f",{m['finetune_micro_batch_size'] or '-'}"
    return micro


# The dry-run's table: (header, alignment and width, a row's text).
_COLUMNS = (
    ("id", "<10", lambda r: r["id"]),
    ("model", "<17", lambda r: r["model"]),
    ("patch", ">5", lambda r: r["patch"]),
    ("data", "<12", lambda r: _dataset(r["config"]["data"]["dataset"])),
    ("subset", ">8", lambda r: _subset(r["subset"])),
    ("steps", ">9", lambda r: _fmt(r["steps"], ",")),
    ("examples", ">10", lambda r: _fmt(r["examples_seen"] and _short(r["examples_seen"]))),
    ("exaFLOPs", ">10", lambda r: _fmt(r["exaflops"], ".4g")),
    ("ft", ">7", lambda r: _fmt(r["finetune_exaflops"], ".3g")),
    ("GPU-h", ">9", lambda r: _fmt(r["gpu_hours"], ",.1f")),
    ("basis", "<8", lambda r: r["gpu_hours_basis"]),
)
_CLUSTER_COLUMNS = (
    ("request", ">16", lambda r: _asked(r["request"])),
    ("node-h", ">8", lambda r: _fmt(r["node_hours"], ",.1f")),
    ("slices", ">6", lambda r: _fmt(r["slices"])),
)
_MEMORY_COLUMNS = (  # "!": the step does not fit
    (
        "GiB/GPU",
        ">7",
        lambda r: f"{r['memory']['gib']:>6.1f}{'!' if r['memory']['problems'] else ' '}",
    ),
    ("micro", ">9", _micro),
)
_STATES = {
    "submit": "to run",
    "skip-done": "done (skipped)",
    "skip-running": "running",
    "skip-queued": "queued",
    "skip-failed": "failed (not retried)",
}


def _state(r: dict) -> str:
    state = _STATES[r["action"]]
    m, b = r["config"]["model"], r["branch"]
    if m["pretrained"]:  # nothing to train: its Fig. 5 compute is its recipe's
        from ..published import published_compute

        pub = published_compute(m["name"], m["pretrained_dataset"], m["pretrained_epochs"])
        state += f" (published: {pub.exaflops:.4g} exaFLOPs pre-trained)"
    if b["trunk"]:
        hours = _fmt(r["spent_gpu_hours"], ",.1f")
        state += f" (branch of {b['trunk']} at step {b['step']:,}: spends {hours} GPU-h)"
    elif b["keep"]:
        state += f" (trunk: keeps steps {', '.join(f'{s:,}' for s in b['keep'])})"
    return state


def _spent(costs, grid: Grid) -> dict:
    """What the grid spends where branches share their trunks' stable phases
    (docs/schedules.md), against the independent runs, for the grid and per family."""
    from ..catalog import family

    def totals(of) -> dict:
        exaflops = sum(c.exaflops or 0 for c in of)
        spent = sum(c.spent_exaflops or 0 for c in of)
        hours = sum(c.gpu_hours or 0 for c in of)
        spent_hours = sum(c.spent_gpu_hours or 0 for c in of)
        return {
            "exaflops": exaflops,
            "spent_exaflops": spent,
            "gpu_hours": hours,
            "spent_gpu_hours": spent_hours,
            "saving": 1 - spent / exaflops if exaflops else 0.0,
        }

    names = sorted({family(c.cell.config.model.name) for c in costs})
    grid_total = totals(costs)
    return {
        "spent_exaflops": grid_total["spent_exaflops"],
        "spent_gpu_hours": grid_total["spent_gpu_hours"],
        "saving": grid_total["saving"],
        "trunks": len(grid.families),
        "branches": sum(len(f.branches) for f in grid.families),
        "by_family": {
            f: totals([c for c in costs if family(c.cell.config.model.name) == f]) for f in names
        },
    }


def _spent_lines(total: dict) -> str:
    families = "; ".join(
        f"{name} {_exaflops(t['spent_exaflops'])} of {_exaflops(t['exaflops'])} exaFLOPs, "
        f"{t['spent_gpu_hours']:,.1f} of {t['gpu_hours']:,.1f} GPU-hours ({t['saving']:.0%} saved)"
        for name, t in total["by_family"].items()
    )
    return (
        f"shared stable phases: {total['branches']} cell(s) branch from {total['trunks']} "
        f"trunk(s) (docs/schedules.md): the grid spends {_exaflops(total['spent_exaflops'])} "
        f"exaFLOPs, {total['spent_gpu_hours']:,.1f} GPU-hours, against "
        f"{_exaflops(total['exaflops'])} exaFLOPs, {total['gpu_hours']:,.1f} GPU-hours run "
        f"independently ({total['saving']:.0%} saved); by family: {families}"
    )


def _refuse(problems: list[str]) -> int:
    """After the table: each problem submission would refuse, once, one line each; exit
    code 2 (a problem with the input, as the command line's other errors) if any."""
    sys.stdout.flush()
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 2 if problems else 0


def _request(grid: Grid, cost: CellCost, profile: Profile) -> dict | None:
    """What the cell's job asks SLURM for (:func:`vitscale.grid.profile.shape_for`), and
    whether its resources were the grid's or the profile's whole node and time limit."""
    resources = grid.resources_for(cost.cell)
    try:
        shape = shape_for(resources, profile)
    except SlurmError:  # said with the grid's problems
        return None
    given = (
        "sized"  # from its estimate (cost.size_requests)
        if cost.cell.id in grid.sized
        else "grid"
        if {"gpus", "time"} <= set(resources)
        else "profile"  # a whole node, its limit
    )
    return {"nodes": shape.nodes, "gpus_per_node": shape.gpus_per_node,
            "time_min": shape.time_min, "from": given}  # fmt: skip


def _asked(request: dict | None) -> str:
    if request is None:
        return "-"
    hours, minutes = divmod(request["time_min"], 60)
    gpus = f"{request['nodes']}x{request['gpus_per_node']} GPU"
    return f"{gpus} {hours}:{minutes:02d}h" + {"grid": " ", "sized": "~"}.get(request["from"], "*")


def _nodes(grid: Grid, cost: CellCost) -> int:
    return max(1, int(grid.resources_for(cost.cell).get("nodes", 1)))


def _duration(hours: float) -> str:
    return f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} h"


def _basis_line(costs: list[CellCost], profile: Profile, *, given: bool) -> str:
    """Which cells' GPU-hours are measured, and which assumed (vitscale.grid.calibration)."""
    counts = {b: sum(c.basis == b for c in costs) for b in BASES}
    gpu = profile.gpu_type or "no gpu_type in the profile"
    parts = []
    if counts[MEASURED]:
        parts.append(f"{counts[MEASURED]} cell(s) from their model's speed measured on {gpu}")
    if counts[FAMILY]:
        parts.append(f"{counts[FAMILY]} from their family's measured TFLOP/s on {gpu}")
    if counts[ESTIMATED]:
        parts.append(f"{counts[ESTIMATED]} est. (below)")
    if counts[ASSUMED]:
        if not given:
            how = "--profile NAME budgets from its GPU's measured speeds"
        elif profile.gpu_type:
            how = "benchmarks/gpu_smoke.sh --calibrate adds one"
        else:
            how = "set gpu_type in the profile to estimate from a GPU measured elsewhere"
        parts.append(
            f"{counts[ASSUMED]} assumed at {profile.sustained_tflops:g} TFLOP/s sustained per "
            f"GPU (no measurement: {how})"
        )
    return "; ".join(parts) or "no cells"


def _estimated_warning(costs: list[CellCost], profile: Profile) -> str | None:
    """One line: how many cells' GPU-hours are estimated from another GPU, and how."""
    from ..flops import peak_flops_of

    est = [c for c in costs if c.basis == ESTIMATED]
    if not est:
        return None
    mine = peak_flops_of(profile.gpu_type) / 1e12
    sources = ", ".join(
        f"{gpu} ({mine:.0f}/{peak_flops_of(gpu) / 1e12:.0f})"
        for gpu in dict.fromkeys(c.measured_on for c in est)
    )
    return (
        f"warning: {len(est)} of {len(costs)} cells' GPU-hours are estimated (est.): nothing "
        f"was measured on {profile.gpu_type}, so the speeds measured on {sources} are scaled "
        "by the two GPUs' peak bf16 TFLOP/s (the same share of peak on both); measure it with "
        "benchmarks/gpu_smoke.sh --calibrate"
    )


def _usable_gib(profile: Profile) -> float:
    from ..memory import GiB, usable_bytes

    return usable_bytes(profile.gpu_mem_gb * GiB) / GiB


def _memory_json(f: Placement | None) -> dict | None:
    if f is None:
        return None
    return {
        "processes": f.processes,
        "device": f.device,
        "precision": f.precision,
        "gib": f.memory_gib,
        "micro_batch_size": f.micro_batch,
        "per_process_batch": f.per_process_batch,
        "finetune_per_process_batch": f.finetune_per_process_batch,
        "pretrain_bytes": f.pretrain.as_dict(),
        "finetune_micro_batch_size": f.finetune_micro_batch,
        "finetune_bytes": f.finetune.as_dict() if f.finetune else None,
        "problems": list(f.problems),
    }


def _exaflops(value: float) -> str:
    """15650.2 -> "15,650"; 0.000132 -> "0.000132": whole numbers at paper scale."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _dataset(name: str) -> str:
    """``multilabel:/datasets/jft300m`` -> ``jft300m``: the table names the folder."""
    kind, sep, path = name.partition(":")
    return Path(path).name if sep else name


def _subset(subset) -> str:
    return "all" if subset is None else str(subset)


def _short(n: int) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def grid(
    path: Path,
    *,
    runs_root: Path,
    dry_run: bool,
    as_json: bool,
    executor: str,
    workers: int,
    processes: int,
    profile_path: str | None,
    overrides: list[str] = (),
    wait: bool = False,
    stop_timeout: float | None = None,
    retry_failed: bool = False,
    verify: bool = False,
    prune: bool = False,
    sbatch: bool = False,
) -> int:
    for flag, value in (("--workers", workers), ("--processes", processes)):
        if value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    if stop_timeout is not None and not 0 <= stop_timeout < float("inf"):
        raise ValueError(f"--stop-timeout must be a number of seconds >= 0, got {stop_timeout}")
    if sbatch and (not dry_run or not profile_path):
        raise ValueError(
            "--sbatch prints the job scripts of a dry-run: give --dry-run --profile NAME"
        )
    profile = load_profile(profile_path) if profile_path else None
    if executor == "slurm" and profile is None and not dry_run:
        raise ValueError(
            "--executor slurm needs --profile NAME (slurm/profiles/NAME.yaml) or a path"
        )
    launch = processes if executor == "local" else None  # SLURM: each cell's resources
    # a dry-run for a cluster may plan away from the data: a set not here is said, not refused
    away = dry_run and (profile is not None or executor == "slurm")
    hint = " (a grid planned away from its data? --profile NAME makes this a note)"
    data = dict(check_data=True, absent_ok=away, absent_hint=hint if dry_run else "", verify=verify)
    g = load_grid(
        path,
        overrides=overrides,
        num_processes=launch,
        profile=profile,
        running=not dry_run,
        data=data,
    )
    notes = [n for c in g.cells for n in c.plan.notes]
    notes += recipe_notes(
        [(c.plan.config, c.plan.from_recipe) for c in g.cells if c.plan.from_recipe]
    )
    for note in dict.fromkeys(notes):
        print(f"note: {note}", file=sys.stderr)  # once, not once per cell
    if profile is not None and (problem := _preemption_problem(g, profile)):
        if executor == "slurm" and not dry_run:
            raise GridError([problem])
        print(f"warning: {problem}", file=sys.stderr)
    if profile is not None:
        g.sized = size_requests(g, profile)
    if prune:
        from .slurm import is_queued

        return actions.prune(g, runs_root, dry_run=dry_run, is_queued=is_queued)
    if sbatch:
        from . import slurm

        return slurm.print_scripts(g, runs_root=runs_root, profile=profile)
    if dry_run:
        return print_dry_run(g, runs_root, profile, as_json=as_json, retry_failed=retry_failed)
    if profile is not None:  # micro-batches that fit the profile's GPUs where the grid gives none
        fits = place_grid(g, profile)
        if problems := [p for f in fits for p in f.problems]:
            raise GridError(problems)
        apply_placements(fits)
    if executor == "local":
        return _run_local(
            g,
            runs_root,
            workers=workers,
            processes=processes,
            stop_timeout=stop_timeout,
            retry_failed=retry_failed,
        )
    from . import slurm

    code = slurm.submit(g, runs_root=runs_root, profile=profile, retry_failed=retry_failed)
    actions.write_cells(g, runs_root)  # submitted (sbatch refusing it raised)
    return slurm.wait(g, runs_root=runs_root) if wait and code == 0 else code


def _run_local(
    g: Grid,
    runs_root: Path,
    *,
    workers: int,
    processes: int,
    stop_timeout: float | None,
    retry_failed: bool,
) -> int:
    """``vitscale grid --executor local``: run the cells not done, ``workers`` at once."""
    from .local import DEFAULT_STOP_TIMEOUT, Interrupted, run_local

    planned = decide(g, runs_root, retry_failed=retry_failed)
    actions.write_cells(g, runs_root)
    print(headline(planned, workers=workers), flush=True)
    try:
        codes = run_local(
            planned,
            workers=workers,
            processes=processes,
            stop_timeout=DEFAULT_STOP_TIMEOUT if stop_timeout is None else stop_timeout,
        )
    except Interrupted as e:
        print(f"{e}; `vitscale status {runs_root / g.name}` for details", file=sys.stderr)
        return e.exit_code
    failed = [cid for cid, code in codes.items() if code not in (0, 75)]
    print(
        f"{len(codes)} cells run, {len(failed)} failed; `vitscale status {runs_root / g.name}` for details"
    )
    if failed:
        print(
            f"error: {len(failed)} cell(s) failed: run the same command again to retry them "
            f"(each has {g.retries} retr{'y' if g.retries == 1 else 'ies'}; then "
            "--retry-failed), after fixing the cause",
            file=sys.stderr,
        )
    if hint := retry_hint(planned, grid_path=g.path, runs=runs_root / g.name):
        print(f"error: {hint}", file=sys.stderr)
    return 1 if failed or hint else 0


def _preemption_problem(g: Grid, profile: Profile) -> str | None:
    """The profile's preemption window against the grid's largest cell's checkpoint."""
    size = {c.id: count(c.config.model.name, c.config.data.image_size).params for c in g.cells}
    cell = max(g.cells, key=lambda c: size[c.id], default=None)
    if cell is None:
        return None
    return profile.preemption_problem(
        params=size[cell.id], cell=f"{cell.id} ({cell.config.model.name})"
    )


def status(paths: list[Path], *, shots: int | None, as_json: bool) -> int:
    from .slurm import job_note, job_state

    rows, problems = collect(paths, shots=shots, job_state=job_state, job_note=job_note)
    if as_json:
        said = {
            "problems": [str(p) for p in problems if not p.stale],
            "not_counted": [str(p) for p in problems if p.stale],
        }
        print(json.dumps({"cells": [dataclasses.asdict(r) for r in rows]} | said, indent=2))
        return 0
    print(format_table(rows, shots=shots))
    for p in problems:
        print(f"{'note' if p.stale else 'skipped'}: {p}")
    return 0
