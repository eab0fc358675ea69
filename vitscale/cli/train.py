"""``vitscale train``: pre-train one cell and evaluate its transfer."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import UserError

EXIT_FAILED = 1
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: checkpointed after SIGUSR1/SIGTERM; run again to resume
EXIT_INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C, as a shell reports it


def add_overrides(p: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable) into ``args.overrides``."""
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help
    )


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "config", help="YAML (or config.json of a run folder) with model/data/train/... sections"
    )
    add_overrides(p, "override a config key, e.g. --set train.steps=100 (repeatable)")
    p.add_argument("--workdir", "-w", help="run folder (default: runs/adhoc/<cell id>)")
    p.add_argument(
        "--dry-run", action="store_true", help="validate and print the resolved config, then stop"
    )


def run(args: argparse.Namespace) -> int:
    import os

    from ..config import ConfigError, load_yaml
    from ..plan import plan

    planned = plan(
        load_yaml(args.config),
        overrides=args.overrides,
        source=args.config,
        num_processes=int(os.environ.get("WORLD_SIZE", 1)),
    )
    cfg = planned.config
    workdir = args.workdir or f"runs/{cfg.grid or 'adhoc'}/{planned.cell_id}"
    if args.dry_run:  # a run says its notes itself, once its length is known
        for note in (*planned.notes, planned.recipe_note):
            if note:
                print(f"note: {note}", file=sys.stderr)
        print(
            json.dumps(cfg.to_dict() | {"cell_id": planned.cell_id, "workdir": workdir}, indent=2)
        )
        return 0
    from ..data import DatasetFormatError, DatasetNotFoundError
    from ..errors import DiskFullError
    from ..train import Preempted, train
    from ..train.checkpoint import CheckpointError
    from ..train.runtime import shutdown

    try:
        result = train(planned, workdir)
    except (ConfigError, DatasetNotFoundError, DatasetFormatError) as e:
        raise UserError(str(e)) from None
    except Preempted as e:
        print(f"{e}; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED if e.signal_name == "SIGINT" else EXIT_PREEMPTED
    except KeyboardInterrupt:  # a second Ctrl-C
        print(
            "interrupted: stopped at once; run the same command again to resume from the last "
            "checkpoint",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except (DiskFullError, CheckpointError) as e:  # the run's fault, not the user's input
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        shutdown()  # the process group (torchrun), if any: last thing a launched process does
    print(f"{result.status}: {workdir} ({result.steps} steps, {result.wall_clock_s:.0f} s)")
    if not result.done:
        print(f"error: {result.error}", file=sys.stderr)
        return EXIT_FAILED
    return 0
