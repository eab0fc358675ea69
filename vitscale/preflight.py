"""The checks of a resolved config that need more than the config: the pre-training
set's size (a subset it cannot hold; a duration in epochs, hence the run's length in
steps, hence a warm-up that never ends or intervals that never come) and the processes
that share the batch.

``vitscale train`` and ``vitscale grid`` (``--dry-run`` included) run them before
anything starts, with the dataset sizes known without reading data (the synthetic
family, the registry's official sizes, a sharded set's index); the trainer runs them
again once it has built the dataset. Problems stop the run, one line each naming the key,
the value and what is allowed; notes are allowed and said.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import Config, launch_problems, length_checks, to_steps

__all__ = ["Preflight", "preflight"]


@dataclass
class Preflight:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    num_examples: int | None = None  # the subset's size, when the dataset's is known
    total_steps: int | None = None  # the run's length, when it is known


def preflight(
    cfg: Config, *, dataset_size: int | None = None, num_processes: int | None = None
) -> Preflight:
    """Check ``cfg`` against a pre-training set of ``dataset_size`` examples (None:
    unknown until it is read) and a launch on ``num_processes`` processes (None: not
    known yet)."""
    from .data.subsets import subset_size

    out = Preflight()
    d, t = cfg.data, cfg.train
    if dataset_size is not None:
        try:
            out.num_examples = subset_size(dataset_size, d.subset)
        except ValueError:
            out.problems.append(
                f"data.subset: {d.subset!r} asks for more examples than {d.dataset} holds "
                f"({dataset_size:,}); allowed: a count up to {dataset_size:,} or a fraction "
                "in (0, 1]"
            )
    try:
        out.total_steps = to_steps(
            steps=t.steps,
            epochs=t.epochs,
            examples=t.examples,
            batch_size=t.batch_size,
            num_examples=out.num_examples,
        )
    except ValueError:  # epochs of a set of unknown size: known once it is read
        out.total_steps = None
    if out.total_steps is not None:
        problems, notes = length_checks(cfg, out.total_steps)
        out.problems += problems
        out.notes += notes
    if num_processes and num_processes > 1:
        out.problems += launch_problems(cfg, num_processes)
    return out


def dataset_size(cfg: Config) -> int | None:
    """The pre-training split's size when it is known without reading the data."""
    from .data import known_size

    try:
        return known_size(cfg.data.dataset, root=cfg.data.root)
    except ValueError:  # an unknown name: reported by the dataset checks in their words
        return None
