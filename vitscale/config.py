"""The run config: schema with defaults, paper recipes, validation, overrides, cell ids.

A config is a nested dict (YAML on disk) with the sections below. Resolution order, each
layer overriding the one before:

    schema defaults  <-  paper recipe for (dataset, model)  <-  user file  <-  --set k=v

The recipe (:mod:`vitscale.recipes`) fills only what the user left unset (``None``).
The resolved config is validated in full before anything starts: unknown keys (with a
did-you-mean), wrong types, and impossible combinations each give one clear message.
Imports no torch.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import UserError

__all__ = [
    "Config",
    "ConfigError",
    "resolve",
    "load_yaml",
    "apply_overrides",
    "set_key",
    "cell_id",
    "to_steps",
    "length_checks",
    "launch_problems",
]


class ConfigError(UserError, ValueError):
    """One or more problems with a config; ``problems`` lists each message."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = problems
        where = f"{source}: " if source else ""
        super().__init__("\n".join(where + p for p in problems))


@dataclass
class ModelConfig:
    name: str = "ViT-Pico/4"
    pool: str | None = None  # None: the family's default (token for ViT, gap for BiT)
    dropout: float | None = None  # None: recipe (paper Table 3)
    # The pre-training head's hidden tanh layer (paper Sec. 3.1); None: the paper's (ViT: on).
    pre_logits: bool | None = None
    # A published checkpoint (vitscale.models.load_pretrained's formats) to start from; with
    # train.steps: 0 the cell evaluates it as it is. Its pre-training compute (Fig. 5) comes
    # from its recipe: dataset and epochs (None: the documented ones, vitscale.published).
    pretrained: str | None = None
    pretrained_dataset: str | None = None  # "jft300m" | "imagenet21k" | "imagenet"
    pretrained_epochs: float | None = None


@dataclass
class DataConfig:
    dataset: str = "synthetic"
    root: str | None = None  # where real datasets live; unused by synthetic ones
    download: bool = False  # torchvision sets only; nothing is downloaded otherwise
    image_size: int = 32
    subset: int | float | str | None = None  # 30000, 0.1 or "9M"; None: the whole split
    class_balanced: bool = False
    num_workers: int | None = None  # None: on a GPU the process's CPUs less one, else 0
    shuffle_shards: int | None = None  # sharded sets: shards shuffled together; None: 16
    skip_bad_samples: int = 0  # sharded sets: bad examples replaced (and counted) up to this


@dataclass
class TrainConfig:
    # Duration: exactly one of steps, epochs (of the subset) or examples.
    steps: int | None = None
    epochs: float | None = None
    examples: int | str | None = None  # 2121000000 or "2121M"
    batch_size: int = 256  # global: the same whatever the number of processes
    micro_batch_size: int | None = None  # per process; None: batch_size / processes
    loss: str | None = None  # "softmax" | "sigmoid"; None: sigmoid for multi-label sets
    label_smoothing: float = 0.0
    grad_clip: float = 1.0  # global-norm clipping; 0: off
    precision: str = "auto"  # "auto" | "bf16" | "fp32"
    compile: bool | str = False  # torch.compile the training model; a string: its backend
    channels_last: bool | None = None  # None: on for ResNets and hybrids on a GPU
    log_every: int = 10
    checkpoint_every: int | None = 500  # also on SIGUSR1 / SIGTERM
    eval_every: int | None = None  # None: evaluate only at the end


@dataclass
class OptimConfig:
    name: str = "adamw"
    lr: float | None = None  # None: recipe (paper Table 3 / Appendix B)
    weight_decay: float | None = None  # decoupled, multiplied by lr (torch AdamW)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    schedule: str | None = None  # "linear" | "cosine"
    warmup_steps: int | None = None
    end_lr: float = 1e-5


@dataclass
class FewShotConfig:
    datasets: list[str] = field(default_factory=list)
    shots: list[int] = field(default_factory=lambda: [1, 5, 10, 25])
    seeds: int = 3
    l2_reg: float = 1024.0
    test_examples: int | None = None  # cap on test images per dataset; None: the test split


@dataclass
class UpstreamConfig:
    examples: int | None = 2000  # held-out pre-training images for top-1; None/0: off


@dataclass
class FinetuneConfig:
    datasets: list[str] = field(default_factory=list)
    steps: int | None = None  # None: the paper's per dataset (vitscale.data.registry)
    lrs: list[float] | None = None  # None: the paper's grid per dataset
    batch_size: int = 512
    micro_batch_size: int | None = None  # per process; None: the whole per-process batch
    image_size: int | None = None  # None: the pre-training resolution
    val_fraction: float | None = None  # None: the dataset's default held-out slice
    test_examples: int | None = None


@dataclass
class EvalConfig:
    fewshot: FewShotConfig = field(default_factory=FewShotConfig)
    upstream: UpstreamConfig = field(default_factory=UpstreamConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    batch_size: int = 256  # feature extraction


@dataclass
class WandbConfig:
    mode: str = (
        "auto"  # "auto" (online with an API key, else offline) | "online" | "offline" | "disabled"
    )
    project: str = "vitscale"
    entity: str | None = None
    tags: list[str] = field(default_factory=list)


@dataclass
class Config:
    seed: int = 0
    grid: str | None = None  # set by the grid runner
    recipe: str | None = None  # paper recipe (vitscale.recipes); None: chosen by data.dataset
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


CHOICES = {
    "train.loss": ("softmax", "sigmoid"),
    "recipe": ("jft", "imagenet21k", "imagenet", "synthetic", "transfer"),
    "train.precision": ("auto", "bf16", "fp32"),
    "optim.name": ("adamw",),
    "optim.schedule": ("linear", "cosine"),
    "wandb.mode": ("auto", "online", "offline", "disabled"),
    "model.pool": ("token", "gap"),
}

# Keys that change how a run is operated, not what it computes: left out of the cell id
# so that moving a dataset or turning W&B off does not orphan finished cells.
OPERATIONAL_KEYS = (
    "grid",
    "data.root",
    "data.num_workers",
    "data.download",
    "data.skip_bad_samples",
    "train.micro_batch_size",
    "train.compile",
    "train.channels_last",
    "eval.finetune.micro_batch_size",
    "train.log_every",
    "train.checkpoint_every",
    "eval.batch_size",
    "wandb",
)


# Keys the trainer adds to config.json once it knows them; a resolved config read back
# (``vitscale train runs/g/id/config.json``) drops them before validation.
DERIVED_KEYS = (
    "cell_id",
    "data.num_examples",
    "data.num_classes",
    "data.selection",
    "train.total_steps",
)

# Keys added after cells were run: hashed only when set, so that cells which never set
# them keep their ids (and their finished run folders).
HASHED_WHEN_SET = (
    "data.shuffle_shards",
    "model.pre_logits",
    "model.pretrained",
    "model.pretrained_dataset",
    "model.pretrained_epochs",
)


# ----------------------------------------------------------------------------- helpers


def to_steps(
    *,
    steps: int | None,
    epochs: float | None,
    examples: int | float | None,
    batch_size: int,
    num_examples: int | None,
) -> int:
    """The one conversion of a training duration into optimiser steps.

    Given once as ``steps``, ``epochs`` of the pre-training subset, or ``examples`` seen;
    epochs and examples round up to whole global batches.
    """
    given = {
        k: v
        for k, v in dict(steps=steps, epochs=epochs, examples=examples).items()
        if v is not None
    }
    if len(given) != 1:
        raise ValueError(
            "give the training duration exactly once as train.steps, train.epochs or "
            f"train.examples; got {', '.join(given) or 'none'}"
        )
    if steps is not None:
        return int(steps)
    if examples is not None:
        from .data.subsets import parse_count

        examples = parse_count(examples, what="train.examples")
    if epochs is not None:
        if num_examples is None:
            raise ValueError(
                "train.epochs needs a dataset of known size; give train.steps or train.examples"
            )
        examples = epochs * num_examples
    return max(1, -(-int(round(examples)) // batch_size))


class _Loader(yaml.SafeLoader):
    """PyYAML reads YAML 1.1, where ``3e-4`` (no dot) is a string; researchers write
    learning rates that way, so floats follow YAML 1.2 here."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$"
    ),
    list("-+0123456789."),
)


def yaml_load(text: str, *, source: str | None = None):
    """Parse YAML text (configs, grids, profiles, ``--set`` values) with YAML 1.2 floats.
    A syntax error is a :class:`ConfigError` in one line: where in ``source``, and what."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError([f"not valid YAML{where}: {what}"], source) from None


def _deep_merge(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"config file not found: {path}"])
    data = yaml_load(path.read_text(), source=str(path)) or {}
    if not isinstance(data, dict):
        raise ConfigError(
            ["the top level must be a mapping of sections (model, data, train, ...)"], str(path)
        )
    return data


def set_key(config: dict, dotted: str, value: Any) -> None:
    """Set ``config["a"]["b"] = value`` for ``dotted = "a.b"``, creating sections."""
    node = config
    *parents, leaf = dotted.strip().split(".")
    for p in parents:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError([f"{dotted}: {p!r} is not a section"])
    node[leaf] = copy.deepcopy(value)


def _pop_key(config: dict, dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    node = config
    for p in parents:
        node = node.get(p) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(leaf, None)


def apply_overrides(config: dict, overrides: list[str]) -> dict:
    """``["train.steps=100", "optim.lr=3e-4"]`` -> config with those keys set (values as YAML)."""
    config = copy.deepcopy(config)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError([f"--set expects key=value (e.g. train.steps=100), got {item!r}"])
        try:
            value = yaml_load(raw)
        except ConfigError as e:
            raise ConfigError([f"--set {item}: {p}" for p in e.problems]) from None
        set_key(config, key, value)
    return config


def _schema(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_ok(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (inner,) = typing.get_args(hint)
        return isinstance(value, list) and all(_type_ok(v, inner) for v in value)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


_TYPE_WORDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}


def _type_name(hint: Any) -> str:
    """``int | None`` -> "a whole number or null": what the user may write there."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        words = " or ".join(_type_name(a) for a in args)
        return words + (" or null" if len(args) < len(typing.get_args(hint)) else "")
    if origin is list:
        (inner,) = typing.get_args(hint)
        return f"a list of {_type_name(inner).removeprefix('a ').removeprefix('an ')}s"
    if hint in _TYPE_WORDS:
        return _TYPE_WORDS[hint]
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def _build(cls, data: dict, prefix: str, problems: list[str]):
    hints = _schema(cls)
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in hints:
            close = difflib.get_close_matches(key, list(hints), n=1)
            hint = (
                f"; did you mean {prefix}{close[0]}?"
                if close
                else f"; valid keys: {', '.join(hints)}"
            )
            problems.append(f"unknown key {path!r}{hint}")
            continue
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                problems.append(f"{path} must be a section (mapping), got {value!r}")
                continue
            kwargs[key] = _build(hint, value, f"{path}.", problems)
        elif not _type_ok(value, hint):
            problems.append(f"{path}: expected {_type_name(hint)}, got {value!r}")
        else:
            kwargs[key] = float(value) if hint is float and isinstance(value, int) else value
    return cls(**kwargs)


def _get(d: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        d = d[part]
    return d


def _has(d: dict, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return False
        d = d[part]
    return True


def _leaves(d: dict, prefix: str = "") -> typing.Iterator[tuple[str, Any]]:
    for key, value in d.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _non_finite(cfg: Config) -> list[str]:
    """Every NaN or infinity in the config (a learning rate, a weight decay ...): YAML
    reads ``.nan`` and ``.inf`` as numbers, and no key has a use for them."""
    problems = []
    for key, value in _leaves(cfg.to_dict()):
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            problems.append(f"{key}: expected finite numbers, got {value!r}")
    return problems


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
    micro-batches) that does not split evenly over them."""
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
    ft_per_process = max(1, ft.batch_size // num_processes)
    if ft.micro_batch_size and ft_per_process % ft.micro_batch_size:
        problems.append(
            f"eval.finetune.micro_batch_size {ft.micro_batch_size} must divide the per-process "
            f"fine-tuning batch {ft_per_process} (eval.finetune.batch_size {ft.batch_size} "
            f"over {num_processes} processes)"
        )
    return problems


def _check(cfg: Config, problems: list[str]) -> None:
    from .catalog import check_resolution, parse
    from .data.subsets import parse_count, parse_subset

    problems.extend(_non_finite(cfg))
    d = cfg.to_dict()
    for key, valid in CHOICES.items():
        value = _get(d, key)
        if value is not None and value not in valid:
            problems.append(f"{key}: unknown value {value!r}; valid: {', '.join(map(repr, valid))}")
    try:
        spec = parse(cfg.model.name)
        check_resolution(spec, cfg.data.image_size)
        if spec.family == "ResNet" and cfg.model.pool == "token":
            problems.append("model.pool: BiT ResNets pool by global average only; valid: 'gap'")
        if spec.family == "ResNet" and cfg.model.pre_logits:
            problems.append("model.pre_logits: BiT has no pre-logits layer; valid: null, false")
    except ValueError as e:
        problems.append(f"model.name: {e}")
    t = cfg.train
    durations = [k for k in ("steps", "epochs", "examples") if getattr(t, k) is not None]
    mistyped = any(
        p.startswith(("train.steps:", "train.epochs:", "train.examples:")) for p in problems
    )
    if len(durations) != 1 and not mistyped:
        problems.append(
            "train: give the duration exactly once as train.steps, train.epochs or train.examples"
            f" (got {', '.join(durations) or 'none'})"
        )
    if t.examples is not None:
        try:
            parse_count(t.examples, what="train.examples")
        except ValueError as e:
            problems.append(str(e))
    for key in (
        "steps",
        "epochs",
        "batch_size",
        "micro_batch_size",
        "log_every",
        "checkpoint_every",
        "eval_every",
    ):
        value = getattr(t, key)
        published = key == "steps" and value == 0 and cfg.model.pretrained
        if value is not None and value <= 0 and not published:
            problems.append(
                f"train.{key} must be positive, got {value}"
                + (
                    " (0 only with model.pretrained: a published checkpoint)"
                    if key == "steps"
                    else ""
                )
            )
    m = cfg.model
    if m.pretrained:
        from .published import published_compute

        if m.pretrained_dataset is None:
            problems.append(
                "model.pretrained_dataset: give the checkpoint's pre-training dataset "
                "('jft300m', 'imagenet21k' or 'imagenet'): its compute places it on Fig. 5"
            )
        else:
            try:
                published_compute(m.name, m.pretrained_dataset, m.pretrained_epochs)
            except (ValueError, KeyError) as e:
                problems.append(f"model.pretrained_dataset / pretrained_epochs: {e}")
    elif m.pretrained_dataset is not None or m.pretrained_epochs is not None:
        problems.append("model.pretrained_dataset / pretrained_epochs need model.pretrained")
    if t.examples is not None and not problems and parse_count(t.examples) <= 0:
        problems.append(f"train.examples must be positive, got {t.examples}")
    if t.micro_batch_size and t.batch_size % t.micro_batch_size:
        problems.append(
            f"train.micro_batch_size {t.micro_batch_size} must divide train.batch_size {t.batch_size}"
        )
    if t.grad_clip < 0:
        problems.append(
            f"train.grad_clip must be non-negative (0 turns clipping off), got {t.grad_clip}"
        )
    if not 0 <= t.label_smoothing < 1:
        problems.append(f"train.label_smoothing must be in [0, 1), got {t.label_smoothing}")
    if cfg.model.dropout is not None and not 0 <= cfg.model.dropout < 1:
        problems.append(f"model.dropout must be in [0, 1), got {cfg.model.dropout}")
    if cfg.data.num_workers is not None and cfg.data.num_workers < 0:
        problems.append(
            f"data.num_workers must be 0 or more (null: chosen per machine), got {cfg.data.num_workers}"
        )
    if cfg.data.shuffle_shards is not None and cfg.data.shuffle_shards < 1:
        problems.append(f"data.shuffle_shards must be at least 1, got {cfg.data.shuffle_shards}")
    if cfg.data.skip_bad_samples < 0:
        problems.append(
            f"data.skip_bad_samples must be non-negative, got {cfg.data.skip_bad_samples}"
        )
    if cfg.data.class_balanced and str(cfg.data.dataset).startswith("shards:"):
        problems.append(
            "data.class_balanced: a sharded subset is whole shards in a seeded order; "
            "class-balanced subsets need folder or torchvision sources"
        )
    if cfg.data.image_size < 8:
        problems.append(f"data.image_size must be at least 8, got {cfg.data.image_size}")
    try:
        parse_subset(cfg.data.subset)
    except ValueError as e:
        problems.append(f"data.{e}")
    o = cfg.optim
    if len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
        problems.append(f"optim.betas must be two numbers in [0, 1), got {o.betas}")
    for key in ("lr", "weight_decay", "warmup_steps"):
        value = getattr(o, key)
        if value is not None and value < 0:
            problems.append(f"optim.{key} must be non-negative, got {value}")
    fs = cfg.eval.fewshot
    if any(k <= 0 for k in fs.shots):
        problems.append(f"eval.fewshot.shots must be positive, got {fs.shots}")
    if fs.seeds <= 0:
        problems.append(f"eval.fewshot.seeds must be positive, got {fs.seeds}")
    ft = cfg.eval.finetune
    if ft.lrs is not None and not ft.lrs:
        problems.append("eval.finetune.lrs: give at least one learning rate (or leave it unset)")
    if ft.lrs and any(lr <= 0 for lr in ft.lrs):
        problems.append(f"eval.finetune.lrs: learning rates must be positive, got {ft.lrs}")
    if ft.steps is not None and ft.steps <= 0:
        problems.append(f"eval.finetune.steps must be positive, got {ft.steps}")
    for key in ("batch_size", "micro_batch_size"):
        value = getattr(ft, key)
        if value is not None and value <= 0:
            problems.append(f"eval.finetune.{key} must be positive, got {value}")
    if ft.image_size is not None:
        try:
            check_resolution(parse(cfg.model.name), ft.image_size)
        except ValueError as e:
            problems.append(f"eval.finetune.image_size: {e}")


def resolve(
    config: dict | Config | None = None,
    *,
    overrides: list[str] = (),
    source: str | None = None,
    num_processes: int | None = None,
) -> Config:
    """Defaults <- recipe <- ``config`` <- ``overrides``, validated; raises ConfigError.

    ``num_processes`` adds the checks that depend on the launch (the global batch must
    split evenly over the processes).
    """
    from .recipes import recipe

    if isinstance(config, Config):
        config = config.to_dict()
    user = apply_overrides(config or {}, list(overrides))
    for key in DERIVED_KEYS:
        _pop_key(user, key)
    problems: list[str] = []
    partial = _build(Config, user, "", problems)  # structure and types; bad keys dropped
    try:
        defaults = recipe(partial.model.name, partial.data.dataset, partial.recipe)
    except ValueError as e:
        problems.append(str(e))
        defaults = {}
    merged = _deep_merge(Config().to_dict(), _deep_merge(defaults, _strip_none(user)))
    cfg = _build(Config, merged, "", [])  # its problems are the ones reported above
    _check(cfg, problems)
    if num_processes and not problems:
        problems.extend(launch_problems(cfg, num_processes))
    if cfg.train.steps is not None and not problems:  # the length is known without data
        problems.extend(length_checks(cfg, cfg.train.steps)[0])
    if problems:
        raise ConfigError(problems, source)
    return cfg


def _strip_none(d: dict) -> dict:
    """Drop unset (None) leaves so they do not hide the recipe's values."""
    return {k: _strip_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}


def cell_id(config: Config | dict, length: int = 10) -> str:
    """Short stable hash of everything that determines a run's results.

    Key order does not matter (canonical JSON); operational keys (OPERATIONAL_KEYS) are
    left out.
    """
    d = config.to_dict() if isinstance(config, Config) else copy.deepcopy(config)
    for key in (*OPERATIONAL_KEYS, *DERIVED_KEYS):
        _pop_key(d, key)
    for key in HASHED_WHEN_SET:
        try:
            unset = _get(d, key) is None
        except (KeyError, TypeError):
            unset = False
        if unset:
            _pop_key(d, key)
    blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]
