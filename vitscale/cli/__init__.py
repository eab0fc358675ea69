"""The ``vitscale`` command line: one table of subcommands, each a thin adapter (its own
module) from options to a library call. Heavy imports (torch, wandb, matplotlib) happen
inside the handler that needs them, so ``vitscale --help`` and ``vitscale flops`` start
fast.

Exit codes: 0 done; 1 a run failed (its result.json says why); 2 a problem with the
input (:class:`vitscale.errors.UserError`: one message, no traceback); 75 checkpointed
after a preemption signal (run again to resume); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from ..errors import UserError
from . import data, export, figures, flops, grid, train, wandb

__all__ = ["main", "build_parser", "COMMANDS"]

EXIT_USER_ERROR = 2

Handler = Callable[[argparse.Namespace], int]
# name -> (help, add the options, run)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Handler]] = {
    "flops": (
        "params, multiply-adds and pre-training exaFLOPs (paper convention)",
        flops.configure,
        flops.run,
    ),
    "train": (
        "pre-train one cell and evaluate its transfer (run folder contract)",
        train.configure,
        train.run,
    ),
    "grid": (
        "expand a grid file into cells and run or submit the ones not done",
        grid.configure_grid,
        grid.run_grid,
    ),
    "status": (
        "done / running / pending / failed per cell, last step, best few-shot",
        grid.configure_status,
        grid.run_status,
    ),
    "data": (
        "list or preview datasets; convert one into tar shards (shard) or index shards (index)",
        data.configure,
        data.run,
    ),
    "export": (
        "a cell's weights as a timm model folder: timm.create_model('local-dir:OUT', pretrained=True)",
        export.configure,
        export.run,
    ),
    "figures": (
        "draw Figs. 3/4/5 and Table 6 from runs (or --paper from the paper's tables, "
        "--reference from published learning curves)",
        figures.configure_figures,
        figures.run_figures,
    ),
    "fit": (
        "fit the saturating power law error = a (C + d)^-b + c to the frontier",
        figures.configure_fit,
        figures.run_fit,
    ),
    "predict": (
        "the error extrapolated to given x (compute, data or examples seen), with an interval",
        figures.configure_predict,
        figures.run_predict,
    ),
    "backtest": (
        "score extrapolation on the curves' held-out ends (RMSE of log error, coverage)",
        figures.configure_backtest,
        figures.run_backtest,
    ),
    "summary": (
        "the measured answer: ResNet vs ViT transfer by pre-training size, and vs compute",
        figures.configure_summary,
        figures.run_summary,
    ),
    "wandb": (
        "W&B views of a grid: the live workspace, a report, uploading offline runs",
        wandb.configure,
        wandb.run,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vitscale",
        description="Scaling studies of vision models (ViT paper, Dosovitskiy et al. 2021).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_text, configure, _) in COMMANDS.items():
        configure(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _, _, handler = COMMANDS[args.command]
    try:
        return handler(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:  # Ctrl-C where a command has nothing to save
        print("interrupted", file=sys.stderr)
        return train.EXIT_INTERRUPTED
    except BrokenPipeError:  # `vitscale status | head`: the reader had what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 0
