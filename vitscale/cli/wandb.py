"""``vitscale wandb dashboard | report | sync``. Every handler checks its input and builds
what it will send locally first (``--dry-run`` stops there and says what it holds, or prints
it as JSON with ``--json``), then
checks W&B (key, network, project, runs), then writes in one call. Any of these failing
is one line on stderr and exit code 2; API keys never appear in what is printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from ..errors import UserError, user_errors
from .train import add_overrides


def _target(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--entity",
        "-e",
        help="W&B entity (user or team) of the project (default: the cells' wandb.entity)",
    )
    p.add_argument(
        "--project", "-p", help="W&B project the grid's runs log to (default: wandb.project)"
    )


def configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="wandb_command", metavar="ACTION", required=True)

    d = sub.add_parser(
        "dashboard",
        help="create or update the grid's saved W&B workspace (Fig. 4, Fig. 5, curves, run table)",
        description="Create, or update in place, a saved W&B workspace view of one grid: "
        "Fig. 4 (best k-shot accuracy vs pre-training images, per few-shot dataset and k), "
        "Fig. 5 (transfer accuracy vs pre-training exaFLOPs), curves against examples seen "
        "and exaFLOPs, and the run table; runs filtered to the grid's W&B group.",
    )
    d.add_argument(
        "source",
        metavar="GRID_FILE_OR_RUNS",
        help="the grid file (experiments/NAME.yaml) or its run folders (runs/NAME)",
    )
    _target(d)
    d.add_argument("--name", help="the view's name (default: 'vitscale: <grid>')")
    add_overrides(
        d,
        "with a grid file: the same overrides the grid was run with (they change cell ids, "
        "hence run colours)",
    )
    d.add_argument(
        "--dry-run",
        action="store_true",
        help="print the workspace's sections, panels and runs; no network",
    )
    d.add_argument("--json", action="store_true", help="with --dry-run: the full spec as JSON")

    r = sub.add_parser(
        "report",
        help="publish a W&B report of a (partly) finished grid: figures, Table 6, verdict",
        description="Publish a W&B report of a finished or partly finished grid: the "
        "`vitscale figures` PNGs, Table 6 (ours beside the paper's) as a W&B Table, the "
        "`vitscale summary` verdict, live Fig. 4/5 panels, the grid file and the vitscale "
        "version. Publishing the same results again updates the same report.",
    )
    r.add_argument("runs", metavar="RUNS", help="the grid's run folders (runs/NAME)")
    _target(r)
    r.add_argument(
        "--grid-file",
        type=Path,
        help="grid file to attach (default: experiments/<grid>.yaml when it exists)",
    )
    r.add_argument("--title", help="report title (default: 'vitscale: <grid>')")
    r.add_argument(
        "--shots",
        type=int,
        help="k of the k-shot figures and verdict (default 5, or the largest k the grid "
        "measures when it has no 5-shot metric)",
    )
    r.add_argument(
        "--out",
        type=Path,
        help="keep the report's figures in this folder (default: a temporary one)",
    )
    r.add_argument(
        "--dry-run",
        action="store_true",
        help="print the report's sections, panels and figures; no network",
    )
    r.add_argument(
        "--json", action="store_true", help="with --dry-run: the report and its assets as JSON"
    )

    s = sub.add_parser(
        "sync",
        help="upload a grid's offline W&B runs (wandb sync), skipping runs already synced",
        description="Upload every offline W&B run of a grid's cells with `wandb sync`, "
        "skipping those already uploaded; for clusters whose compute nodes have no "
        "internet. Run it again after an interruption: it uploads only what is left.",
    )
    s.add_argument(
        "runs", nargs="+", metavar="RUNS", help="run folders, grid folders or a runs/ directory"
    )
    _target(s)
    s.add_argument("--dry-run", action="store_true", help="list what would be uploaded; no network")


def run(args: argparse.Namespace) -> int:
    handler = {"dashboard": _dashboard, "report": _report, "sync": _sync}[args.wandb_command]
    return handler(args)


def _check_target(args: argparse.Namespace) -> None:
    for option in ("entity", "project"):
        value = getattr(args, option)
        if value is not None and (
            not value.strip() or "/" in value or any(c.isspace() for c in value)
        ):
            raise UserError(
                f"--{option} {value!r}: expected a W&B {option} name (no '/' or spaces)"
            )


def _reason(error: ValueError) -> str:
    """The first message of a (pydantic) validation error, on one line."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        try:
            return str(errors()[0].get("msg", error))
        except (IndexError, TypeError, AttributeError):
            pass
    return str(error).strip().splitlines()[0]


def _dashboard(args: argparse.Namespace) -> int:
    from ..record.wandb import open_project
    from ..wandb_views.remote import save_workspace
    from ..wandb_views.study import load_study
    from ..wandb_views.workspace import build_workspace, workspace_spec, workspace_summary

    _check_target(args)
    study = load_study(args.source, overrides=args.overrides)
    entity, project = study.target(args.entity, args.project)
    try:
        workspace = build_workspace(study, entity=entity, project=project, name=args.name)
        spec = workspace_spec(workspace)
    except ValueError as e:  # the library's validation: a --name it refuses
        raise UserError(f"--name {args.name!r}: {_reason(e)}") from None
    if args.dry_run:
        if args.json:
            print(json.dumps(spec, indent=2))
        else:
            print("\n".join(workspace_summary(workspace, study)))
            print("dry run: nothing sent (--json: the full spec)")
        return 0
    api = open_project(entity, project, group=study.group)
    url, updated = save_workspace(workspace, api, group=study.group)
    print(
        f"{'updated' if updated else 'created'} workspace {workspace.name!r} ({len(study.cells)} cells): {url}"
    )
    return 0


def _report(args: argparse.Namespace) -> int:
    from ..record.wandb import open_project
    from ..wandb_views.remote import publish_report
    from ..wandb_views.report import (
        build_assets,
        build_report,
        check_inputs,
        report_spec,
        report_summary,
    )
    from ..wandb_views.study import StudyError, from_runs

    _check_target(args)
    if args.shots is not None and args.shots < 1:
        raise UserError(f"--shots must be a positive integer, got {args.shots}")
    with tempfile.TemporaryDirectory(prefix="vitscale-report-") as tmp:
        out = args.out or Path(tmp) / "figures"
        if not Path(args.runs).is_dir():
            raise StudyError(f"no such run folder or grid folder: {args.runs}")
        study = from_runs([args.runs])
        entity, project = study.target(args.entity, args.project)
        check_inputs(study, grid_file=args.grid_file)
        api = None
        if not args.dry_run:  # W&B is checked before anything is drawn or written
            api = open_project(entity, project, group=study.group)
        measured = sorted({k for _, k in study.fewshot})
        shots = args.shots or (measured[-1] if measured and 5 not in measured else 5)
        assets = build_assets(study, out=out, shots=shots, grid_file=args.grid_file)
        try:
            report = build_report(study, assets, entity=entity, project=project, title=args.title)
            spec = report_spec(report)
        except ValueError as e:  # the library's validation: a --title it refuses
            raise UserError(f"--title {args.title!r}: {_reason(e)}") from None
        if args.dry_run:
            if args.json:
                print(json.dumps({"report": spec, "assets": assets.manifest()}, indent=2))
            else:
                print("\n".join(report_summary(report, assets)))
                print("dry run: nothing sent (--json: the report and its assets)")
            return 0
        url, updated = publish_report(report, assets, api, directory=Path(tmp))
    print(f"{'updated' if updated else 'published'} report {report.title!r}: {url}")
    return 0


def _sync(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..record.cells import find_run_folders
    from ..record.wandb import open_api, redact
    from ..wandb_views.sync import find_offline_runs, upload

    _check_target(args)
    with user_errors(FileNotFoundError):
        folders, problems = find_run_folders(args.runs)
    for p in [p for p in problems if p.stale]:
        print(f"note: {p}", file=sys.stderr)
    if not folders:
        raise UserError(f"no run folders under {' '.join(args.runs)}")
    runs = find_offline_runs(folders)
    todo = [r for r in runs if not r.synced]
    done = len(runs) - len(todo)
    if not runs:
        print(
            f"nothing to upload: the {len(folders)} cells have no offline W&B runs (they ran "
            "online or with W&B disabled, or $WANDB_DIR points elsewhere)"
        )
        return 0
    if not todo:
        print(f"nothing to upload: all {len(runs)} offline runs are synced already")
        return 0
    if args.dry_run:
        for r in todo:
            print(r.path)
        print(f"{len(todo)} offline runs to upload, {done} synced already")
        return 0
    open_api()
    failed: list[str] = []
    uploaded = 0
    bar = tqdm(todo, desc="uploading", unit="run", file=sys.stderr)
    try:
        for r in bar:
            ok, last = upload(r, entity=args.entity, project=args.project)
            if ok:
                uploaded += 1
            else:
                failed.append(f"{r.path}: {redact(last)}")
    except KeyboardInterrupt:
        bar.close()
        print(
            f"interrupted: {uploaded} of {len(todo)} uploaded; run the same command again "
            "to upload the rest",
            file=sys.stderr,
        )
        return 130
    bar.close()
    print(f"uploaded {uploaded} offline runs, {done} synced already, {len(failed)} failed")
    for f in failed:
        print(f"failed: {f}", file=sys.stderr)
    return 1 if failed else 0
