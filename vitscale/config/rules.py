"""The rules a config's types cannot say, each once, in one line naming the key, the
value and what is allowed. :func:`check` needs the config alone; the others need a fact
:mod:`vitscale.plan` brings: the set's size, the run's length, the launch.
"""

from __future__ import annotations

from ..catalog import check_resolution, head_problems, parse
from ..kinds import kind_of
from ..published import published_compute
from .counts import cooldown_start, parse_count, parse_subset, subset_size
from .schema import Config

_DURATIONS = ("train.steps", "train.epochs", "train.examples")


def check(cfg: Config, *, rejected: set[str] = frozenset()) -> list[str]:
    """Every problem ``cfg`` shows on its own. ``rejected``: the keys the schema dropped
    (a mistyped duration is reported as such, not also as missing)."""
    return [
        *_model(cfg),
        *_published(cfg),
        *_durations(cfg, mistyped=bool(rejected.intersection(_DURATIONS))),
        *_combinations(cfg),
        *_schedule(cfg, rejected),
    ]


def _model(cfg: Config) -> list[str]:
    """The model exists, its patches tile both resolutions, and BiT keeps to BiT's head."""
    try:
        spec = parse(cfg.model.name)
    except ValueError as e:
        return [f"model.name: {e}"]
    problems = []
    for key, size in (
        ("model.name", cfg.data.image_size),
        ("eval.finetune.image_size", cfg.eval.finetune.image_size),
    ):
        try:
            if size is not None:
                check_resolution(spec, size)
        except ValueError as e:
            problems.append(f"{key}: {e}")
    heads = head_problems(spec, pool=cfg.model.pool, pre_logits=cfg.model.pre_logits)
    return problems + [f"model.{problem}" for problem in heads]


def _published(cfg: Config) -> list[str]:
    """A published checkpoint names the recipe that made it: its compute places it on Fig. 5."""
    m = cfg.model
    if not m.pretrained:
        if m.pretrained_dataset is not None or m.pretrained_epochs is not None:
            return ["model.pretrained_dataset / pretrained_epochs need model.pretrained"]
        return []
    if m.pretrained_dataset is None:
        return [
            "model.pretrained_dataset: give the checkpoint's pre-training dataset "
            "('jft300m', 'imagenet21k' or 'imagenet'): its compute places it on Fig. 5"
        ]
    try:
        published_compute(m.name, m.pretrained_dataset, m.pretrained_epochs)
    except (ValueError, KeyError) as e:
        return [f"model.pretrained_dataset / pretrained_epochs: {e}"]
    return []


def _durations(cfg: Config, *, mistyped: bool) -> list[str]:
    """Exactly one duration, and a positive one (0 steps: a published checkpoint as it is)."""
    t, problems = cfg.train, []
    given = [k for k in ("steps", "epochs", "examples") if getattr(t, k) is not None]
    if len(given) != 1 and not mistyped:
        problems.append(
            "train: give the duration exactly once as train.steps, train.epochs or train.examples"
            f" (got {', '.join(given) or 'none'})"
        )
    if t.steps is not None and t.steps <= 0 and not (t.steps == 0 and cfg.model.pretrained):
        problems.append(
            f"train.steps must be positive, got {t.steps} "
            "(0 only with model.pretrained: a published checkpoint)"
        )
    if t.examples is not None:
        try:
            if parse_count(t.examples, what="train.examples") <= 0:
                problems.append(f"train.examples must be positive, got {t.examples}")
        except ValueError as e:
            problems.append(str(e))
    return problems


def _combinations(cfg: Config) -> list[str]:
    """Keys that are fine alone but not together, and the subset's spelling."""
    t, d, problems = cfg.train, cfg.data, []
    if t.micro_batch_size and t.batch_size % t.micro_batch_size:
        problems.append(
            f"train.micro_batch_size {t.micro_batch_size} must divide train.batch_size {t.batch_size}"
        )
    if d.class_balanced and not kind_of(d.dataset).class_balanced:
        problems.append(
            "data.class_balanced: a sharded subset is whole shards in a seeded order; "
            "class-balanced subsets need folder or torchvision sources"
        )
    try:
        parse_subset(d.subset)
    except ValueError as e:
        problems.append(f"data.{e}")
    return problems


_BRANCHABLE = ("wsd", "rsqrt")


def _schedule(cfg: Config, rejected: set[str]) -> list[str]:
    """A cooldown and a timescale belong to the schedules that have them (docs/schedules.md):
    wsd needs its cooldown, rsqrt its timescale (big_vision's: 10000), unless the one given
    was rejected (and said) already."""
    o, problems = cfg.optim, []
    if o.schedule not in _BRANCHABLE:
        for key in ("cooldown", "cooldown_shape", "timescale"):
            if getattr(o, key) is not None:
                problems.append(
                    f"optim.{key}: only the 'wsd' and 'rsqrt' schedules have one, "
                    f"and optim.schedule is {o.schedule!r}"
                )
        return problems
    if o.schedule == "wsd" and o.cooldown is None and "optim.cooldown" not in rejected:
        problems.append(
            "optim.cooldown: a wsd schedule needs its cooldown: steps (2000) or a fraction of "
            "the run (0.2, Hägele et al. 2024)"
        )
    if o.cooldown is not None and (
        o.cooldown <= 0 if isinstance(o.cooldown, int) else not 0 < o.cooldown < 1
    ):
        problems.append(
            f"optim.cooldown must be a whole number of steps >= 1 or a fraction in (0, 1), "
            f"got {o.cooldown}"
        )
    if o.cooldown_shape is not None and o.cooldown is None:
        problems.append("optim.cooldown_shape: set optim.cooldown too (there is no cooldown)")
    if o.schedule == "rsqrt" and o.timescale is None and "optim.timescale" not in rejected:
        problems.append(
            "optim.timescale: an rsqrt schedule needs its timescale in steps (big_vision: 10000)"
        )
    return problems


def subset_checks(cfg: Config, *, dataset_size: int | None) -> tuple[int | None, list[str]]:
    """``(num_examples, problems)``: the pre-training subset's size (None while it is not
    known: a fraction of a set of unknown size) and whether the set holds it."""
    d = cfg.data
    if dataset_size is None:
        spec = parse_subset(d.subset)
        return (spec if isinstance(spec, int) else None), []
    try:
        return subset_size(dataset_size, d.subset), []
    except ValueError:
        return None, [
            f"data.subset: {d.subset!r} asks for more examples than {d.dataset} holds "
            f"({dataset_size:,}); allowed: a count up to {dataset_size:,} or a fraction "
            "in (0, 1]"
        ]


def length_checks(cfg: Config, total_steps: int) -> tuple[list[str], list[str]]:
    """``(problems, notes)`` that need the run's length in steps: a warm-up that never
    ends is a problem; intervals longer than the run are allowed, and said."""
    problems: list[str] = []
    notes: list[str] = []
    if total_steps <= 0:  # a published checkpoint evaluated as it is: nothing trains
        return problems, notes
    warmup = cfg.optim.warmup_steps
    if warmup is not None and warmup >= total_steps:
        problems.append(
            f"optim.warmup_steps: {warmup:,} is not shorter than the run ({total_steps:,} "
            f"steps), so the learning rate would never reach its peak; allowed: 0 to "
            f"{total_steps - 1:,}"
        )
    start = cooldown_start(cfg.optim, total_steps)
    if cfg.optim.cooldown is not None and not (warmup or 0) <= start < total_steps:
        problems.append(
            f"optim.cooldown: {cfg.optim.cooldown} is {total_steps - start:,} of the run's "
            f"{total_steps:,} steps, which leaves no room after the warm-up ({warmup or 0:,} "
            f"steps); allowed: 1 to {total_steps - (warmup or 0):,} steps"
        )
    t = cfg.train
    for key, consequence in (
        ("eval_every", "it evaluates at the end only"),
        ("checkpoint_every", "it checkpoints at the end (and on a stop signal) only"),
        ("log_every", "it logs the last step only"),
    ):
        value = getattr(t, key)
        if value is not None and value > total_steps:
            notes.append(
                f"train.{key}: {value:,} is longer than the run ({total_steps:,} steps): "
                f"{consequence}"
            )
    return problems, notes


def launch_problems(cfg: Config, num_processes: int) -> list[str]:
    """What a launch on ``num_processes`` processes cannot run: a global batch (or its
    micro-batches) that does not split evenly over them, pre-training's or fine-tuning's."""
    problems = []
    t = cfg.train
    micro = t.micro_batch_size or t.batch_size // num_processes
    if t.batch_size % num_processes or not micro or (t.batch_size // num_processes) % micro:
        problems.append(
            f"train.batch_size: {t.batch_size} does not split evenly over {num_processes} "
            "processes"
            + (f" and micro-batches of {micro}" if t.micro_batch_size else "")
            + f"; allowed: a multiple of {num_processes * (t.micro_batch_size or 1)}"
        )
    ft = cfg.eval.finetune
    if ft.datasets and ft.batch_size % num_processes:  # else each process silently rounds
        problems.append(
            f"eval.finetune.batch_size: {ft.batch_size} does not split evenly over "
            f"{num_processes} processes; allowed: a multiple of {num_processes}"
        )
    ft_per_process = max(1, ft.batch_size // num_processes)
    if ft.micro_batch_size and ft_per_process % ft.micro_batch_size:
        problems.append(
            f"eval.finetune.micro_batch_size {ft.micro_batch_size} must divide the per-process "
            f"fine-tuning batch {ft_per_process} (eval.finetune.batch_size {ft.batch_size} "
            f"over {num_processes} processes)"
        )
    return problems
