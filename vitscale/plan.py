"""A cell's plan: its config resolved and checked against everything known before it
runs, by the one call each entry point makes (``vitscale train``, the grid, its worker).

:func:`plan` resolves the config (:mod:`vitscale.config`), then brings the facts the
config does not hold: the pre-training set's size when known without reading data (so
the subset's, so the run's length in steps), the launch, and, asked, the datasets being
there. One :class:`~vitscale.config.ConfigError` lists every problem, once. What is known
only later (a folder's size once read, the processes once started) is checked by the
same functions: :meth:`Plan.with_num_examples`, :meth:`Plan.with_num_processes`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from .config import Config, ConfigError, cell_id, to_steps, validate
from .config.recipes import RECIPES, choose
from .config.rules import launch_problems, length_checks, subset_checks
from .data import check_available, fingerprint, known_classes, known_size
from .kinds import kind_of

Launch = int | Callable[[Config], int | None] | None


@dataclass(frozen=True)
class Plan:
    """What a run needs to know before it starts, every part of it checked."""

    config: Config
    cell_id: str
    num_examples: int | None  # the pre-training subset's size; None while unknown
    total_steps: int | None  # the run's length; None while unknown (epochs of a folder)
    notes: tuple[str, ...]  # allowed, and said: intervals longer than the run
    num_processes: int | None  # the launch checked; None: not known yet
    source: str | None = None  # the file the config came from: messages name it
    from_recipe: dict = dataclasses.field(default_factory=dict)  # values its recipe filled
    data_content: dict = dataclasses.field(default_factory=dict)  # hashed into cell_id
    # what reading an own folder set's file list found: name -> describe_dataset's row
    sets: dict = dataclasses.field(default_factory=dict)

    def num_classes(self, name: str) -> int | None:
        """The classes of dataset ``name`` as the run will find them; None: unknown here."""
        return self.sets[name]["num_classes"] if name in self.sets else known_classes(name)

    @property
    def recipe_note(self) -> str | None:
        """The values the recipe filled, in one line (the grid prints it once)."""
        return recipe_note(self.config, self.from_recipe) if self.from_recipe else None

    def with_num_examples(self, n: int) -> Plan:
        """This plan once the subset is read and holds ``n`` examples: its length in
        steps and the checks that need it (the same as :func:`plan`'s)."""
        total_steps, problems, notes = _length(self.config, num_examples=n)
        if problems:
            raise ConfigError(problems, self.source)
        return dataclasses.replace(self, num_examples=n, total_steps=total_steps, notes=notes)

    def with_num_processes(self, n: int) -> Plan:
        """This plan on a launch of ``n`` processes, known only once it started."""
        if problems := launch_problems(self.config, n):
            raise ConfigError(problems, self.source)
        return dataclasses.replace(self, num_processes=n)


def plan(
    config: dict | Config | None,
    *,
    overrides: list[str] = (),
    source: str | None = None,
    num_processes: Launch = None,
    check_data: bool = False,
    absent_ok: bool = False,
    absent_hint: str = "",
    verify: bool = False,
    extra_checks: Callable[[Config], list[str]] | None = None,
) -> Plan:
    """Resolve and check ``config``; raise ConfigError listing every problem once.

    ``num_processes``: the launch, or a function of the resolved config for launches
    that depend on it (a SLURM cell's processes follow its model's resources); None: not
    known yet. ``check_data``: every dataset (pre-training, few-shot, fine-tuning) is
    there and an own folder set's file list is read (:func:`_read_sets`); ``absent_ok``: a
    set that is not on this machine is a note, not a problem (a grid planned for a cluster
    away from it; ``absent_hint`` is added to each such problem otherwise); ``verify``: every image of a set on disk decodes. ``extra_checks``: the
    caller's own checks of the resolved config (the grid's: a cell's resources on the
    cluster profile), reported with the rest.
    """
    recorded = config.get("data_content") if isinstance(config, dict) else None
    cfg, problems, from_recipe = validate(config, overrides=overrides)
    if problems:  # the rest needs valid values
        raise ConfigError(_name_recipe(problems, cfg, from_recipe), source)
    # each own set walked once, and not at all on a resume (its content is recorded)
    walk = check_data or recorded is None
    prints = {name: fingerprint(name) if walk else None for _, name in _datasets(cfg)}
    sets, problems, absent = _read_sets(cfg, prints, verify=verify) if check_data else ({}, [], {})
    if absent and not absent_ok:
        problems, absent = [f"{m}{absent_hint}" for m in absent.values()] + problems, {}
    read = sets.get(cfg.data.dataset)
    size = read["splits"]["train"] if read else dataset_size(cfg)
    num_examples, subset_problems = subset_checks(cfg, dataset_size=size)
    total_steps, length_problems, notes = _length(cfg, num_examples=num_examples)
    processes = num_processes(cfg) if callable(num_processes) else num_processes
    problems += subset_problems + length_problems
    problems += launch_problems(cfg, processes) if processes else []
    problems += extra_checks(cfg) if extra_checks else []
    if problems:
        problems = _name_recipe(list(dict.fromkeys(problems)), cfg, from_recipe)
        raise ConfigError(problems, source)
    content, unread = (recorded, []) if recorded is not None else _fingerprints(cfg, prints)
    notes += tuple(
        f"{name} cannot be read here: the ids of its cells leave its content out, so they "
        "may not match cells run where it can"
        for name in unread
        if name not in absent
    )
    notes += tuple(
        f"{name} is not on this machine, so not checked here (nor its content in its cells' "
        "ids): running or submitting the grid checks it, on the machine that does"
        for name in absent
    )
    cid = cell_id(cfg, data=content)
    return Plan(
        cfg, cid, num_examples, total_steps, notes, processes, source, from_recipe, content, sets
    )


def _recipe_source(cfg: Config) -> str:
    return f"recipe {cfg.recipe!r}" + (
        "" if cfg.recipe != choose(cfg.data.dataset) else f", chosen for {cfg.data.dataset}"
    )


def recipe_note(cfg: Config, from_recipe: dict) -> str:
    """The values a recipe filled, in one line."""
    return recipe_notes([(cfg, from_recipe)])[0]


def recipe_notes(filled: list[tuple[Config, dict]]) -> list[str]:
    """One line per recipe applied across configs (a grid's cells): a key whose value
    differs between cells (the jft recipe's lr per model) lists its values, a|b."""
    by_source: dict[str, dict[str, dict]] = {}
    for cfg, from_recipe in filled:
        keys = by_source.setdefault(_recipe_source(cfg), {})
        for key, value in from_recipe.items():
            keys.setdefault(key, {})[value] = None
    return [
        f"{source}, sets "
        + ", ".join(f"{k}={'|'.join(map(str, v))}" for k, v in sorted(keys.items()))
        + f" (set any of them, or recipe: {'|'.join(RECIPES)}, to change it)"
        for source, keys in by_source.items()
    ]


def _name_recipe(problems: list[str], cfg: Config, from_recipe: dict) -> list[str]:
    """A problem with a value the user never wrote says where it came from: its recipe."""
    out = []
    for problem in problems:
        key = problem.split(":", 1)[0]
        if key in from_recipe:
            problem += f" (the value of {_recipe_source(cfg)}: set {key} yourself)"
        out.append(problem)
    return out


def dataset_size(cfg: Config) -> int | None:
    """The pre-training split's size when it is known without reading the data."""
    try:
        return known_size(cfg.data.dataset)
    except ValueError:  # an unknown name: reported by the dataset checks in their words
        return None


def _length(
    cfg: Config, *, num_examples: int | None
) -> tuple[int | None, list[str], tuple[str, ...]]:
    """``(total_steps, problems, notes)``: the run's length (None while the set's size is
    unknown and the duration is in epochs) and what it rules out or says."""
    t = cfg.train
    try:
        total_steps = to_steps(
            steps=t.steps,
            epochs=t.epochs,
            examples=t.examples,
            batch_size=t.batch_size,
            num_examples=num_examples,
        )
    except ValueError:  # epochs of a set of unknown size: known once it is read
        return None, [], ()
    problems, notes = length_checks(cfg, total_steps)
    return total_steps, problems, tuple(notes)


def _datasets(cfg: Config) -> list[tuple[str, str]]:
    """``(key, name)`` of every dataset the run reads: pre-training, few-shot, fine-tuning."""
    e = cfg.eval
    return [
        ("data.dataset", cfg.data.dataset),
        *(("eval.fewshot.datasets", name) for name in e.fewshot.datasets),
        *(("eval.finetune.datasets", name) for name in e.finetune.datasets),
    ]


def _fingerprints(cfg: Config, prints: dict[str, str | None]) -> tuple[dict[str, str], list[str]]:
    """``(content, unread)``: the fingerprint of each own dataset the cell reads (part of
    its id; ``prints``: :func:`~vitscale.data.fingerprint` of each), and the own datasets
    that cannot be read here. A run folder's config.json records the content its cell was
    planned with (``data_content``), and a plan of it reuses that: a cell keeps its id on
    resume wherever it runs."""
    content, unread = {}, []
    for _, name in _datasets(cfg):
        if prints[name] is not None:
            content[name] = prints[name]
        elif kind_of(name).folder is not None:
            unread.append(name)
    return content, unread


def _read_sets(
    cfg: Config, prints: dict[str, str | None], *, verify: bool
) -> tuple[dict[str, dict], list[str], dict[str, str]]:
    """``(sets, problems, absent)`` for every dataset the run reads: an own folder set's
    file list read (its splits' sizes and classes, its smallest class against the largest
    shot count); with ``verify`` every image of a set on disk decoded; ``absent``: each set
    not there, with what is missing. Each set is read and decoded once per process while
    its files are unchanged (its fingerprint, ``prints``), whatever the number of cells,
    and each problem of a set is said once, at the first key that reads it."""
    d, fs = cfg.data, cfg.eval.fewshot
    sets: dict[str, dict] = {}
    problems, absent, said = [], {}, set()
    for key, name in _datasets(cfg):
        if name in said:
            continue
        said.add(name)
        if missing := check_available(name, root=d.root, download=d.download):
            absent[name] = f"{key}: {missing[0]}"
            continue
        found: list[str] = []
        if kind_of(name).folder in ("imagefolder", "multilabel"):
            facts = (name, d.holdout, cfg.eval.finetune.val_fraction, prints[name])
            row, found = _once(("read", *facts), _described, *facts[:3])
            if row is not None:
                sets[name] = row
        if verify and not found:
            _, found = _once(("verify", name, d.root, prints[name]), _verify, name, d.root)
        problems += [f"{key}: {p}" for p in found]
    for name in fs.datasets:
        smallest = sets[name]["smallest_class"] if name in sets else None
        if fs.shots and smallest is not None and max(fs.shots) > smallest:
            problems.append(
                f"eval.fewshot.shots: {max(fs.shots)}-shot needs {max(fs.shots)} train "
                f"examples of every class of {name}, but its smallest class has {smallest}; "
                f"the largest possible is {smallest}-shot"
            )
    return sets, problems, absent


# what reading or decoding a set found, by what was asked and the set's fingerprint: each
# set read once per process (a grid plans every cell) while its files are unchanged
_ONCE: dict[tuple, tuple[dict | None, list[str]]] = {}


def _once(key: tuple, work: Callable, *args) -> tuple[dict | None, list[str]]:
    """``(a row or None, problems)`` of ``work(*args)``, done once per ``key``: a row, a
    list of problems, or the ValueError it raised (a folder there that is not a set)."""
    if key not in _ONCE:
        try:
            found = work(*args)
            _ONCE[key] = (found, []) if isinstance(found, dict) else (None, found)
        except ValueError as e:
            _ONCE[key] = (None, [str(e)])
    return _ONCE[key]


def _described(name: str, holdout: float, val_fraction: float | None) -> dict:
    """:func:`~vitscale.data.build.describe_dataset`'s row of an own folder set."""
    from .data.build import describe_dataset  # torch: only for a set on disk

    return describe_dataset(name, holdout=holdout, val_fraction=val_fraction)


def _verify(name: str, root) -> list[str]:
    from .data.build import verify_dataset

    return verify_dataset(name, root=root)
