"""`vitscale wandb dashboard | report | sync` and `vitscale figures --wandb`, from a real
finished tiny grid (the local executor, W&B offline), with no W&B server.

Every key a workspace or report panel names is checked against what the grid's runs
logged, read back with wandb's own reader (`wandb leet inspect --json`). The error cases
that need no server run for real: no API key, a server that cannot be reached (a closed
local port), a server that refuses the key (a local HTTP endpoint answering 401), and bad
input; each is one line, exit code 2, nothing written and the key never printed.
Unknown entity or project, a group without runs, and the saves themselves need a W&B
server and are not exercised here.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
import yaml

import vitscale
from analysis import paper, summary, tables
from analysis.draw import FigureOptions, compute_metrics, draw_figures
from vitscale import record as rf
from vitscale.cli import main
from vitscale.record import wandb as W
from vitscale.record.cells import load_history, load_runs
from vitscale.record.wandb_runs import load_wandb_offline
from vitscale.wandb_views import keys as K
from vitscale.wandb_views import remote
from vitscale.wandb_views.report import (
    TABLE_KEY,
    VERDICT_KEY,
    build_assets,
    build_report,
    log_assets,
    report_summary,
)
from vitscale.wandb_views.study import from_runs, load_study
from vitscale.wandb_views.sync import SYNCED_SUFFIX, find_offline_runs
from vitscale.wandb_views.workspace import build_workspace, workspace_spec

from .helpers.configs import tiny_config

FAKE_KEY = "local-0123456789abcdef0123456789abcdef01234567"
WANDB = str(Path(sys.executable).with_name("wandb"))
GRID = "wbviews"
SHOTS = (1, 2)
FEWSHOT = "synthetic-textures"
FINETUNE = "synthetic-glyphs"


def _cells(folder: Path) -> list[Path]:
    """The run folders of a grid folder (beside them: its cells.json)."""
    return sorted(p for p in folder.iterdir() if (p / rf.CONFIG).is_file())


def _grid_file(path: Path) -> Path:
    base = tiny_config(
        train={"steps": 6, "log_every": 2, "eval_every": 3, "checkpoint_every": None},
        eval={
            "fewshot": {
                "datasets": [FEWSHOT],
                "shots": list(SHOTS),
                "seeds": 1,
                "test_examples": 40,
            },
            "upstream": {"examples": 32},
            "finetune": {
                "datasets": [FINETUNE],
                "steps": 1,
                "batch_size": 16,
                "lrs": [0.01],
                "test_examples": 40,
            },
        },
        wandb={"mode": "offline"},
    )
    base["model"] = {"dropout": 0.0}
    grid = {
        "name": GRID,
        "base": base,
        "axes": {"data.subset": [256, 1024]},
        "blocks": [
            {"name": "vit", "axes": {"model.name": ["ViT-Pico/8"]}},
            {"name": "bit", "axes": {"model.name": ["BiT-R11x0.5"]}},
        ],
    }
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


def _no_credentials(mp: pytest.MonkeyPatch, home: Path) -> None:
    """No key anywhere wandb looks (HOME stays: torch's extension cache lives there)."""
    mp.delenv("WANDB_API_KEY", raising=False)
    mp.delenv("WANDB_BASE_URL", raising=False)
    mp.setenv("NETRC", str(home / ".netrc"))
    mp.setenv("WANDB_CONFIG_DIR", str(home / "wandb-config"))


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """The tiny grid run once by the local executor, W&B offline: 2 models x 2 subsets."""
    tmp = tmp_path_factory.mktemp("wandb_views")
    path = _grid_file(tmp / f"{GRID}.yaml")
    with pytest.MonkeyPatch.context() as mp:
        _no_credentials(mp, tmp / "home")
        mp.delenv("WANDB_DIR", raising=False)
        mp.delenv("WANDB_MODE", raising=False)
        mp.setenv("WANDB_SILENT", "true")
        argv = [
            "grid",
            str(path),
            "--executor",
            "local",
            "--workers",
            "2",
            "--runs",
            str(tmp / "runs"),
        ]
        assert main(argv) == 0
    runs = tmp / "runs" / GRID
    results = [rf.read_json(p) for p in runs.glob(f"*/{rf.RESULT}")]
    assert len(results) == 4 and {r["status"] for r in results} == {rf.STATUS_DONE}
    return path, runs


def _inspect(run_file: Path) -> list[dict]:
    done = subprocess.run(
        [WANDB, "leet", "inspect", "--json", str(run_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=os.environ | {"WANDB_MODE": "offline"},
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _dotted(config: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in config.items():
        out.add(prefix + k)
        if isinstance(v, dict):
            out |= _dotted(v, f"{prefix}{k}.")
    return out


def _logged(records: list[dict]) -> dict:
    """What one W&B run holds, by where W&B looks keys up."""
    (header,) = [r["run"] for r in records if r["type"] == "run"]
    summary_keys: set[str] = set()
    history: set[str] = set()
    for r in records:
        if r["type"] == "summary":
            summary_keys |= set(r["summary"].get("update", {}))
        elif r["type"] == "history":
            history |= set(r["history"]["item"])
    config = {k: v for k, v in header["config"]["update"].items() if k != "_wandb"}
    family = next(
        (t.split(":", 1)[1] for t in header.get("tags", ()) if t.startswith("family:")), None
    )
    return {
        "id": header["run_id"],
        "family": family,
        "group": header.get("run_group"),
        "name": header.get("display_name"),
        "config": _dotted(config),
        "summary": summary_keys,
        "history": history,
        "records": records,
    }


@pytest.fixture(scope="module")
def logged(grid):
    """Every cell's W&B run, read back with `wandb leet inspect --json`."""
    _, runs = grid
    out = {}
    for run_file in sorted(runs.glob("*/wandb/offline-run-*/run-*.wandb")):
        info = _logged(_inspect(run_file))
        out[info["id"]] = info
    assert sorted(out) == sorted(p.name for p in _cells(runs))
    return out


def _assert_logged_by_every_run(keys: K.SpecKeys, logged: dict) -> None:
    assert keys.summary and keys.config  # something was checked
    for run in logged.values():
        assert keys.history <= run["history"], (run["id"], keys.history - run["history"])
        missing = keys.summary - run["summary"]
        resnet = run["family"] == "ResNet"  # a ResNet has no patch size: an empty table cell
        assert missing <= ({"patch"} if resnet else set()), (run["id"], missing)
        assert keys.config <= run["config"], (run["id"], keys.config - run["config"])
    # Run attributes are W&B's own (not logged keys): the ones the views use.
    assert keys.run <= {"displayName", "state", "group", "name"}


# --------------------------------------------------------------------------- dashboard


def test_workspace_panels_name_only_logged_keys(grid, logged, capsys):
    _, runs = grid
    argv = ["wandb", "dashboard", str(runs), "-e", "me", "-p", "vitscale", "--dry-run"]
    assert main([*argv, "--json"]) == 0
    spec = json.loads(capsys.readouterr().out)
    keys = K.spec_keys(spec)
    assert keys.history
    _assert_logged_by_every_run(keys, logged)

    sections = {
        s["name"]: s["panels"] for s in spec["spec"]["section"]["panelBankConfig"]["sections"]
    }
    fig4, fig5, by_examples, by_flops = sections.values()
    # Fig. 4: one panel per few-shot (dataset, k), best accuracy vs subset size, log x.
    assert sorted(p["config"]["yAxis"] for p in fig4) == [
        f"summary:best/fewshot/{FEWSHOT}/{k}shot" for k in SHOTS
    ]
    assert {p["config"]["xAxis"] for p in fig4} == {"config:data.value.num_examples"}
    assert all(p["config"]["xAxisLogScale"] for p in fig4 + fig5)
    # Fig. 5: fine-tuned then best few-shot accuracy, against total pre-training exaFLOPs.
    assert [p["config"]["yAxis"] for p in fig5] == [
        f"summary:finetune/{FINETUNE}/top1",
        *(f"summary:best/fewshot/{FEWSHOT}/{k}shot" for k in SHOTS),
    ]
    assert {p["config"]["xAxis"] for p in fig5} == {"summary:pretrain_exaflops"}
    # Curves: every few-shot metric and the loss, against examples seen and exaFLOPs.
    metrics = [f"fewshot/{FEWSHOT}/{k}shot" for k in SHOTS] + ["train/loss"]
    assert [(p["config"]["xAxis"], p["config"]["metrics"]) for p in by_examples] == [
        ("examples_seen", [m]) for m in metrics
    ]
    assert [(p["config"]["xAxis"], p["config"]["metrics"]) for p in by_flops] == [
        ("compute/exaflops", [m]) for m in metrics
    ]

    (runset,) = spec["spec"]["section"]["runSets"]
    (group_filter,) = runset["filters"]["filters"]
    assert group_filter["key"] == {"section": "run", "name": "group"}
    assert {group_filter["value"]} == {r["group"] for r in logged.values()}  # the runs' group
    assert runset["runFeed"]["columnOrder"] == [
        "run:displayName",
        "config:model.name.value",
        "summary:family",
        "summary:size",
        "summary:patch",
        "config:data.subset.value",
        "config:data.num_examples.value",
        "run:state",
        "summary:restarts",
        *(f"summary:best/fewshot/{FEWSHOT}/{k}shot" for k in SHOTS),
        f"summary:finetune/{FINETUNE}/top1",
        "summary:pretrain_exaflops",
        "summary:device_hours",
    ]
    # A colour per run (run id = cell id): one per model, one hue per family.
    colors = spec["spec"]["section"]["customRunColors"]
    assert set(colors) == set(logged)
    cells, _ = load_runs(runs)
    by_model = cells.groupby("model")["cell_id"].apply(lambda ids: {colors[i] for i in ids})
    assert all(len(c) == 1 for c in by_model) and len(set().union(*by_model)) == 2
    assert spec["spec"]["section"]["settings"]["maxRuns"] >= len(logged)


def test_tracker_logs_what_the_run_table_shows(grid, logged):
    """Identity in the summary from the start, readable names, the contract's metrics."""
    _, runs = grid
    cells, _ = load_runs(runs)
    for cell in cells.itertuples():
        run = logged[cell.cell_id]
        records = run["records"]
        updates = [r for r in records if r["type"] == "summary"]
        identity = {
            k: v for r in updates for k, v in r["summary"]["update"].items() if k in W.IDENTITY
        }
        assert identity == W.identity(cell.model)
        assert identity["family"] == cell.family and identity["size"] == cell.size
        assert identity.get("patch") == (None if pd.isna(cell.patch) else cell.patch)
        # set before the first logged step: the run table has them while the cell runs
        first_identity = min(r["num"] for r in updates if "family" in r["summary"]["update"])
        assert first_identity < min(r["num"] for r in records if r["type"] == "history")
        assert run["name"] == f"{cell.model} {cell.subset} {cell.cell_id}"


def test_dry_runs_say_what_they_hold_on_one_screen(grid, assets, capsys):
    """Without --json, a dry run names the view's sections with their panels and the runs
    (the report's: its sections, the verdict, its cells), not 15 KB of JSON."""
    path, runs = grid
    assert main(["wandb", "dashboard", str(path), "-e", "me", "-p", "vitscale", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    workspace = build_workspace(load_study(path), entity="me", project="vitscale")
    assert lines[0].startswith(f"workspace 'vitscale: {GRID}' in me/vitscale: 4 runs of W&B group")
    for section in workspace.sections:
        assert f"  {section.name} ({len(section.panels)} panels)" in lines
        assert all(f"    {p.title}" in lines for p in section.panels[:6])
    assert lines[-1] == "dry run: nothing sent (--json: the full spec)"
    assert len(lines) <= 40
    report = build_report(from_runs([runs]), assets, entity="me", project="vitscale")
    text = report_summary(report, assets)
    assert text[0].startswith(f"report 'vitscale: {GRID}' in me/vitscale: 4 of 4 cells finished")
    assert "  The measured answer" in text and "  Figures" in text
    assert all(f"    {line}" in text for line in assets.verdict)
    assert len(text) <= 40


def test_the_same_workspace_from_the_grid_file_and_from_its_runs(grid):
    path, runs = grid
    a = workspace_spec(build_workspace(load_study(path), entity="me", project="vitscale"))
    b = workspace_spec(build_workspace(load_study(runs), entity="me", project="vitscale"))
    c = workspace_spec(build_workspace(load_study(runs), entity="me", project="vitscale"))
    assert json.dumps(a) == json.dumps(b) == json.dumps(c)  # ids and colours are stable


# --------------------------------------------------------------------------- report


@pytest.fixture(scope="module")
def assets(grid, tmp_path_factory):
    """The report's assets, drawn once by the library (the CLI test draws its own)."""
    path, runs = grid
    out = tmp_path_factory.mktemp("assets")
    return build_assets(from_runs([runs]), out=out, shots=2, grid_file=path)


def _table6(runs: Path) -> str:
    """Table 6 as `vitscale figures` computes it from the run folders."""
    cells, _ = load_runs(runs)
    done = cells[cells["status"] == rf.STATUS_DONE]
    frame, metrics = compute_metrics(done, metric=None, shots=2)
    largest = frame[frame["num_examples"] == frame["num_examples"].max()]  # Table 6's rows
    table = tables.table6(largest, metrics=metrics, reference=paper.table6_frame())
    return tables.to_markdown(table)


def test_report_from_the_finished_grid(grid, logged, assets, tmp_path, capsys):
    path, runs = grid
    argv = ["wandb", "report", str(runs), "-e", "me", "-p", "vitscale", "--dry-run", "--json"]
    argv += ["--grid-file", str(path), "--out", str(tmp_path / "report")]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    spec, manifest = out["report"], out["assets"]
    keys = K.spec_keys(spec)
    _assert_logged_by_every_run(keys, logged)  # the live Fig. 4/5 panels

    # `vitscale figures`' files, at the grid's largest k (it has no 5-shot metric).
    metric = f"fewshot_{FEWSHOT}_2shot"
    stems = {f"fig4_{metric}", "fig5_compute", f"curves_{metric}"}
    assert {Path(p).stem for p in manifest["figures"].values()} == stems
    assert all((tmp_path / "report" / f"{stem}.png").is_file() for stem in stems)
    assert keys.media == set(manifest["figures"]) == {f"figures/{s}" for s in stems}
    # Drawn again (the library, the fixture): the same content, hence the same assets run.
    assert manifest["run_id"] == assets.run_id
    # Table 6 and the verdict are the ones `vitscale figures` and `vitscale summary` give.
    blocks = spec["spec"]["blocks"]
    markdown = [b["content"] for b in blocks if b.get("type") == "markdown-block"]
    (table,) = markdown
    assert table.split("\n\n", 1)[1] == _table6(runs)
    assert table.startswith(f"Accuracy columns: {FINETUNE} accuracy, fine-tuned (%)")
    cells, _ = load_runs(runs)
    assert manifest[VERDICT_KEY] == summary.summarise(cells, shots=2).lines()
    text = json.dumps(blocks)
    assert all(json.dumps(line)[1:-1] in text for line in manifest[VERDICT_KEY])
    head = ["Model", "Pre-training", "Images", "Epochs", "Cells", "exaFLOPs"]
    assert manifest[TABLE_KEY]["columns"][:6] == head and len(manifest[TABLE_KEY]["rows"]) == 2
    assert manifest["grid_file"] == str(path)
    assert f"name: {GRID}" in text  # the grid file's text, in a code block
    assert manifest["version"].startswith(vitscale.__version__)
    assert manifest["cells"] == {"total": 4, "done": 4}


def test_the_views_read_where_the_cells_log_and_the_grid_file_they_ran_from(grid, tmp_path, capsys):
    path, runs = grid
    config = rf.read_json(next(runs.glob(f"*/{rf.CONFIG}")))
    assert config["grid_file"] == str(path.resolve())  # recorded by vitscale grid
    argv = ["wandb", "report", str(runs), "-e", "me", "--dry-run", "--json"]
    assert main([*argv, "--out", str(tmp_path / "report")]) == 0  # no --project, no --grid-file
    out = json.loads(capsys.readouterr().out)
    assert out["assets"]["grid_file"] == str(path.resolve())
    assert main(["wandb", "dashboard", str(runs), "--dry-run"]) == 2  # the grid names no entity
    assert "--entity: give it: the grid's cells set no wandb.entity" in capsys.readouterr().err
    assert main(["wandb", "dashboard", str(path), "-e", "me", "-p", "mine", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "in me/mine:" in captured.out
    assert "warning: --project mine: the grid's cells log to wandb.project vitscale" in captured.err
    grid_file = yaml.safe_load(path.read_text())
    grid_file["base"]["wandb"] |= {"entity": "team", "project": "mine"}
    said = tmp_path / f"{GRID}.yaml"
    said.write_text(yaml.safe_dump(grid_file))
    assert main(["wandb", "dashboard", str(said), "--dry-run"]) == 0  # where the grid says
    assert "in team/mine:" in capsys.readouterr().out
    assert main(["grid", str(said), "--dry-run"]) == 0
    assert f"W&B: group '{GRID}' in team/mine, mode offline" in capsys.readouterr().out


def test_report_of_a_partly_finished_grid(grid, tmp_path, capsys):
    _, runs = grid
    copy = tmp_path / GRID
    shutil.copytree(runs, copy, ignore=shutil.ignore_patterns("checkpoints", "wandb"))
    running = _cells(copy)[0]
    (running / rf.RESULT).unlink()  # a cell still running: config and metrics, no result
    argv = ["wandb", "report", str(copy), "-e", "me", "-p", "vitscale", "--dry-run", "--json"]
    assert main([*argv, "--out", str(tmp_path / "figs")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["assets"]["cells"] == {"total": 4, "done": 3}
    cells, _ = load_runs(copy)
    done = cells[cells["status"] == rf.STATUS_DONE]
    largest = done[done["num_examples"] == done["num_examples"].max()]  # Table 6's rows
    assert len(out["assets"][TABLE_KEY]["rows"]) == len(largest) >= 1
    assert "3 of 4 cells finished; 1 still running" in out["report"]["description"]


def test_report_assets_run_holds_what_the_report_shows(assets, tmp_path):
    """The run the report's figure and table panels read, written offline and read back."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_SILENT", "true")
        run_id = log_assets(
            assets, entity=None, project="vitscale", mode="offline", directory=tmp_path
        )
    (run_file,) = tmp_path.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")
    run = _logged(_inspect(run_file))
    assert run["id"] == run_id and run["group"] == f"{GRID}.report"  # not the grid's group
    (item,) = [r["history"]["item"] for r in run["records"] if r["type"] == "history"]
    for path in assets.figures:  # each figure an image, its PNG in the run's files
        key = assets.figure_key(path)
        assert item[f"{key}._type"] == "image-file"
        assert (run_file.parent / "files" / item[f"{key}.path"]).read_bytes() == path.read_bytes()
    assert item[f"{TABLE_KEY}._type"] == "table-file"
    assert item[f"{TABLE_KEY}.nrows"] == len(assets.table_rows)
    assert VERDICT_KEY in run["summary"]


# --------------------------------------------------------------------------- analysis


def test_figures_from_wandb_runs_equal_figures_from_run_folders(grid, tmp_path):
    """What `vitscale figures --wandb` draws from: W&B's copy of the same numbers."""
    _, runs = grid
    theirs, history, problems = load_wandb_offline(sorted(runs.glob("*/wandb")), history=True)
    assert not problems and len(theirs) == 4 and set(theirs["source"]) == {"wandb"}
    ours, _ = load_runs(runs)
    a, b = ours.set_index("cell_id").sort_index(), theirs.set_index("cell_id").sort_index()
    metrics = [f"finetune/{FINETUNE}/top1", *(f"fewshot/{FEWSHOT}/{k}shot" for k in SHOTS)]
    for column in ("num_examples", "exaflops", "device_hours", *metrics):
        assert list(b[column]) == pytest.approx(list(a[column])), column
    assert list(b["model"]) == list(a["model"]) and list(b["family"]) == list(a["family"])
    steps, _ = load_history(ours)
    key = ["cell_id", "step"]
    steps, history = steps.sort_values(key), history.sort_values(key)
    for column in ("examples_seen", "compute/exaflops", "train/loss", *metrics[1:]):
        assert list(history[column]) == pytest.approx(list(steps[column]), nan_ok=True), column

    options = FigureOptions(out=tmp_path, shots=2, curves=True, formats=("png",))
    written = draw_figures(theirs, options, history=lambda done: history)
    assert {p.name for p in written} >= {"fig5_compute.png", "table6.md"}
    head, table = (tmp_path / "table6.md").read_text().split("\n\n", 1)
    assert table == _table6(runs) and head.startswith("Accuracy columns: ")


# --------------------------------------------------------------------------- sync


def test_sync_finds_every_offline_run_and_skips_synced_ones(grid, tmp_path, capsys, monkeypatch):
    _, runs = grid
    copy = tmp_path / GRID
    shutil.copytree(runs, copy, ignore=shutil.ignore_patterns("checkpoints"))
    monkeypatch.delenv("WANDB_DIR", raising=False)
    assert main(["wandb", "sync", str(copy), "--dry-run"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[-1] == "4 offline runs to upload, 0 synced already"
    assert sorted(Path(p).name.rsplit("-", 1)[-1] for p in listed[:-1]) == sorted(
        p.name for p in _cells(copy)
    )

    # A run wandb marked synced is skipped; one under a shared $WANDB_DIR is found.
    first, second = find_offline_runs(_cells(copy))[:2]
    first.log.with_name(first.log.name + SYNCED_SUFFIX).touch()
    shared = tmp_path / "shared"
    (shared / "wandb").mkdir(parents=True)
    shutil.move(second.path, shared / "wandb" / second.path.name)
    monkeypatch.setenv("WANDB_DIR", str(shared))
    assert main(["wandb", "sync", str(copy), "--dry-run"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[-1] == "3 offline runs to upload, 1 synced already"
    assert str(shared / "wandb" / second.path.name) in listed

    for run in find_offline_runs(_cells(copy)):
        run.log.with_name(run.log.name + SYNCED_SUFFIX).touch()
    assert main(["wandb", "sync", str(copy)]) == 0  # nothing left: no key needed
    assert "all 4 offline runs are synced already" in capsys.readouterr().out


# --------------------------------------------------------------------------- errors


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is


class _Refuses(http.server.BaseHTTPRequestHandler):
    """A server that answers every request 401, as W&B does for a bad key."""

    def _answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"errors": [{"message": "permission denied"}]}')

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def refusing_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Refuses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _commands(path: Path, runs: Path, out: Path) -> list[list[str]]:
    target = ["-e", "me", "-p", "vitscale"]
    return [
        ["wandb", "dashboard", str(path), *target],
        ["wandb", "dashboard", str(runs), *target],
        ["wandb", "report", str(runs), *target, "--out", str(out / "report")],
        ["wandb", "sync", str(runs)],
        ["figures", "--wandb", "me/vitscale", "--group", GRID, "--out", str(out / "figs")],
    ]


@pytest.mark.parametrize("server", ["no key", "closed port", "refuses the key"])
def test_no_key_no_network_bad_key_one_line_exit_2_nothing_written(
    server, grid, tmp_path, monkeypatch, capsys, refusing_server
):
    path, runs = grid
    home = tmp_path / "home"
    home.mkdir()
    _no_credentials(monkeypatch, home)
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):  # wandb's own files: scanned
        monkeypatch.setenv(var, str(home / var.lower()))
    monkeypatch.chdir(tmp_path)
    expected = {
        "no key": "no W&B API key for",
        "closed port": "cannot reach the W&B server at",
        "refuses the key": "rejected the API key",
    }[server]
    if server != "no key":
        monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
        url = (
            refusing_server if server == "refuses the key" else f"http://127.0.0.1:{_closed_port()}"
        )
        monkeypatch.setenv("WANDB_BASE_URL", url)
    # lstat: wandb links each run's debug-core.log to its service's shared log, which it writes on
    before = {p: p.lstat().st_mtime_ns for p in runs.rglob("*")}
    for argv in _commands(path, runs, tmp_path / "out"):
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert not out and err.count("\n") == 1 and err.startswith("error: "), (argv, err)
        assert expected in err, (argv, err)
        if server == "no key":  # an address the user never typed: said to be wandb's default
            assert "(W&B's cloud: wandb's default server, as WANDB_BASE_URL is not set)" in err
        assert FAKE_KEY not in err
    # What would be sent needs no key and no network.
    for argv in _commands(path, runs, tmp_path / "out")[:2] + [["wandb", "sync", str(runs)]]:
        assert main([*argv, "--dry-run"]) == 0, argv
        assert FAKE_KEY not in "".join(capsys.readouterr())
    # Nothing half-created: no view or figure files, the offline runs not marked synced,
    # the run folders untouched, and the key in no file.
    assert not (tmp_path / "out").exists() and not (tmp_path / "wandb").exists()
    assert not any(r.synced for r in find_offline_runs(_cells(runs)))
    assert {p: p.lstat().st_mtime_ns for p in runs.rglob("*")} == before
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert FAKE_KEY.encode() not in p.read_bytes(), p


def test_bad_input_one_line_exit_2(grid, tmp_path, capsys):
    path, runs = grid
    two = tmp_path / "two"
    for name, src in (("a", _cells(runs)[0]), ("b", _cells(runs)[0])):
        (two / name / src.name).mkdir(parents=True)
        config = rf.read_json(src / rf.CONFIG) | {"grid": name}
        rf.write_json_atomic(two / name / src.name / rf.CONFIG, config)
    unfinished = tmp_path / "unfinished" / GRID / "c0"
    unfinished.mkdir(parents=True)
    shutil.copy(_cells(runs)[0] / rf.CONFIG, unfinished / rf.CONFIG)
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text() + "retries: -1\n")
    target = ["-e", "me", "-p", "vitscale", "--dry-run"]
    cases = [
        (["wandb", "dashboard", str(tmp_path / "nope.yaml"), *target], "no such grid file"),
        (["wandb", "dashboard", str(two), *target], "belong to 2 grids"),
        (
            ["wandb", "dashboard", str(path), "-e", "me/x", "-p", "vitscale", "--dry-run"],
            "--entity 'me/x'",
        ),
        (["wandb", "dashboard", str(path), *target, "--name", "\U0001f600"], "--name"),
        (["wandb", "dashboard", str(bad), *target], "retries"),
        (["wandb", "report", str(unfinished.parent), *target], "no finished cells"),
        (
            ["wandb", "report", str(runs), *target, "--grid-file", str(tmp_path / "x.yaml")],
            "--grid-file",
        ),
        (["wandb", "report", str(runs), *target, "--title", "x" * 200], "--title"),
        (["wandb", "sync", str(tmp_path / "nowhere")], "no such run folder"),
        (
            ["figures", "--wandb", "vitscale", "--group", GRID, "--out", str(tmp_path)],
            "ENTITY/PROJECT",
        ),
        (["figures", "--wandb", "me/vitscale", "--out", str(tmp_path)], "--group"),
        (["figures", str(runs), "--group", GRID, "--out", str(tmp_path)], "--wandb"),
    ]
    for argv, expected in cases:
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert not out and err.count("\n") == 1 and expected in err, (argv, err)


def test_redact_hides_keys():
    assert W.redact(f"bad key {FAKE_KEY} here") == "bad key *** here"
    assert W.redact("a" * 40) == "***"


def test_one_saved_view_per_grid_whose_name_survives_the_url():
    from wandb_workspaces.workspaces import internal

    name = remote.view_name("e", "p", "demo")
    assert name == remote.view_name("e", "p", "demo") != remote.view_name("e", "p", "demo2")
    assert name != remote.view_name("e", "p2", "demo")
    # W&B links a view as ?nw=<id>; the library maps the name to it and back.
    query = internal._internal_name_to_url_query_str(name)
    assert internal._url_query_str_to_internal_name(query) == name


def test_a_netrc_key_for_the_configured_server_counts(tmp_path, monkeypatch):
    """`wandb login` stores the key per server (host:port) in the netrc; `wandb.mode: auto`
    and the commands find it there, as wandb does, for whatever server is configured."""
    _no_credentials(monkeypatch, tmp_path)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("WANDB_BASE_URL", url)
    assert not W.has_api_key() and W.wandb_mode("auto") == "offline"
    netrc = tmp_path / ".netrc"
    netrc.write_text(
        f"machine {url.removeprefix('http://')}\n  login user\n  password {FAKE_KEY}\n"
    )
    netrc.chmod(0o600)
    assert W.has_api_key() and W.wandb_mode("auto") == "online"
    with pytest.raises(W.WandbError, match="cannot reach") as error:
        W.open_api()
    assert FAKE_KEY not in str(error.value)
