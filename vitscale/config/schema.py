"""The config's sections: every key, its type and its default (what each means:
docs/config.md).

pydantic checks the types (strict: a whole number is no ``true``, a number may be a whole
number); :func:`check_types` says what it found in our words, one line per key, naming
the dotted key, the value and what is allowed. Values a key may not hold whatever the
others say (``optim.schedule: step``) are checked here too; checks across keys are in
:mod:`.rules`.
"""

from __future__ import annotations

import copy
import difflib
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WrapValidator

from ..errors import UserError
from .recipes import RECIPES


class ConfigError(UserError, ValueError):
    """One or more problems with a config; ``problems`` lists each message."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = problems
        where = f"{source}: " if source else ""
        super().__init__("\n".join(where + p for p in problems))


def _as_written(value: Any, handler: Any) -> Any:
    """A whole number stays whole where a number or null is allowed: the cell id hashes
    the value as written (``epochs: 7`` and ``epochs: 7.0`` are different cells, and
    finished run folders keep their ids). Plain ``float`` keys convert, as they always did."""
    return value if type(value) is int else handler(value)


Number = Annotated[float, WrapValidator(_as_written)]


class Section(BaseModel):
    """Keys of known types and no others; mutable (the grid writes chosen micro-batches)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    def to_dict(self) -> dict[str, Any]:
        """Plain data in schema order: config.json, the dry-run's print, the cell id."""
        return {k: v.to_dict() if isinstance(v, Section) else copy.deepcopy(v) for k, v in self}


class ModelConfig(Section):
    name: str = "ViT-Pico/4"
    pool: Literal["token", "gap"] | None = None
    dropout: Number | None = None  # None: recipe (paper Table 3)
    pre_logits: bool | None = None
    pretrained: str | None = None
    pretrained_dataset: str | None = None  # "jft300m" | "imagenet21k" | "imagenet"
    pretrained_epochs: Number | None = None


class DataConfig(Section):
    dataset: str = "synthetic"
    root: str | None = None  # where real datasets live; unused by synthetic ones
    download: bool = False  # torchvision sets only; nothing is downloaded otherwise
    image_size: int = 32
    subset: int | float | str | None = None  # 30000, 0.1 or "9M"; None: the whole split
    class_balanced: bool = False
    num_workers: int | None = None  # None: on a GPU the process's CPUs less one, else 0
    shuffle_shards: int | None = None  # sharded sets: shards shuffled together; None: 16
    skip_bad_samples: int = 0  # sharded sets: distinct bad examples replaced (and counted)
    # folder sets without test/ or val/: the part of train/ held out as the test split
    holdout: Number = 0.2
    # sharded sets: decode and augment on the loader's workers or on the training device
    # (nvJPEG on a GPU); auto: on the device where it is a GPU
    decode: Literal["auto", "workers", "device"] = "auto"


class TrainConfig(Section):
    steps: int | None = None
    epochs: Number | None = None
    examples: int | str | None = None  # 2121000000 or "2121M"
    batch_size: int = 256  # global: the same whatever the number of processes
    micro_batch_size: int | None = None  # per process; None: batch_size / processes
    loss: Literal["softmax", "sigmoid"] | None = None  # None: sigmoid for multi-label sets
    label_smoothing: float = 0.0
    grad_clip: float = 1.0  # global-norm clipping; 0: off
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    compile: bool | str = False  # torch.compile the training model; a string: its backend
    channels_last: bool | None = None  # None: on for ResNets and hybrids on a GPU
    log_every: int = 10
    checkpoint_every: int | None = 500  # also on SIGUSR1 / SIGTERM
    eval_every: int | None = None  # None: evaluate only at the end


class OptimConfig(Section):
    name: Literal["adamw"] = "adamw"
    lr: Number | None = None  # None: recipe (paper Table 3 / Appendix B)
    weight_decay: Number | None = None  # decoupled, multiplied by lr (torch AdamW)
    betas: list[Number] = Field(default_factory=lambda: [0.9, 0.999])
    schedule: Literal["linear", "cosine"] | None = None
    warmup_steps: int | None = None
    end_lr: float = 1e-5


class FewShotConfig(Section):
    datasets: list[str] = Field(default_factory=list)
    shots: list[int] = Field(default_factory=lambda: [1, 5, 10, 25])
    seeds: int = 3
    l2_reg: float = 1024.0
    test_examples: int | None = None  # cap on test images per dataset; None: the test split
    # Read every model's features through one fixed random projection to this many
    # dimensions (vitscale.evals.fewshot.project), so that models of different widths are
    # probed at the same width; None: the features as they are.
    width: int | None = Field(default=None, ge=1)


class UpstreamConfig(Section):
    examples: int | None = 2000  # held-out pre-training images for top-1; None/0: off


class FinetuneConfig(Section):
    datasets: list[str] = Field(default_factory=list)
    steps: int | None = None  # None: the paper's per dataset (vitscale.data.registry)
    lrs: list[Number] | None = None  # None: the paper's grid per dataset
    batch_size: int = 512
    micro_batch_size: int | None = None  # per process; None: the whole per-process batch
    image_size: int | None = None  # None: the pre-training resolution
    val_fraction: Number | None = None  # None: the dataset's default held-out slice
    test_examples: int | None = None


class EvalConfig(Section):
    fewshot: FewShotConfig = Field(default_factory=FewShotConfig)
    upstream: UpstreamConfig = Field(default_factory=UpstreamConfig)
    finetune: FinetuneConfig = Field(default_factory=FinetuneConfig)
    batch_size: int = 256  # feature extraction


class WandbConfig(Section):
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"
    project: str = "vitscale"
    entity: str | None = None
    tags: list[str] = Field(default_factory=list)


class Config(Section):
    seed: int = 0
    grid: str | None = None  # set by the grid runner
    recipe: Literal[RECIPES] | None = None
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    wandb: WandbConfig = Field(default_factory=WandbConfig)


# ----------------------------------------------------------------- pydantic, in our words


def check_types(data: dict) -> tuple[dict, list[str], set[str]]:
    """``(kept, problems, rejected)``: ``data`` without the keys the schema rejects, one
    message per rejected key, and their dotted names. Rejected keys are dropped rather
    than fatal so that the rules still check the rest: every problem is reported at once.
    """
    try:
        Config.model_validate(data)
        return data, [], set()
    except ValidationError as e:  # one message per key, however many union members failed
        found = dict(_say(error, data) for error in e.errors())
    kept = copy.deepcopy(data)
    for path in found:
        parent = _value(kept, path[:-1])
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    return kept, list(found.values()), {".".join(path) for path in found}


def _say(error: dict, data: dict) -> tuple[tuple[str, ...], str]:
    """The key a pydantic error is about (its ``loc`` down to the first non-section), and
    the message the user reads: the dotted key, the value, what is allowed there."""
    section, path, hint = Config, (), None
    for part in error["loc"]:
        path, hint = (*path, part), typing.get_type_hints(section).get(part)
        if not (isinstance(hint, type) and issubclass(hint, Section)):
            break
        section = hint
    dotted, value = ".".join(path), _value(data, path)
    if error["type"] == "extra_forbidden":
        keys = list(section.model_fields)
        if close := difflib.get_close_matches(path[-1], keys, n=1):
            return path, f"unknown key {dotted!r}; did you mean {'.'.join((*path[:-1], close[0]))}?"
        return path, f"unknown key {dotted!r}; valid keys: {', '.join(keys)}"
    if section is hint:  # the key names a whole section
        return path, f"{dotted} must be a section (mapping), got {value!r}"
    if (choices := _choices(hint)) and isinstance(value, str):
        return path, f"{dotted}: unknown value {value!r}; valid: {', '.join(map(repr, choices))}"
    return path, f"{dotted}: expected {_type_name(hint)}, got {value!r}"


def _choices(hint: Any) -> tuple[str, ...]:
    """The values a ``Literal`` key (or ``Literal | None``) allows; () for other keys."""
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    return next((_choices(h) for h in typing.get_args(hint) if _choices(h)), ())


_TYPE_WORDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}


def _type_name(hint: Any) -> str:
    """``int | None`` -> "a whole number or null": what the user may write there."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is Literal:
        return "a string"
    if typing.get_origin(hint) is list:
        return f"a list of {_type_name(args[0]).removeprefix('a ')}s"
    if not args:
        return _TYPE_WORDS[hint]
    words = " or ".join(_type_name(a) for a in args if a is not type(None))
    return words + (" or null" if type(None) in args else "")


def _value(data: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        data = data.get(part) if isinstance(data, dict) else None
    return data
