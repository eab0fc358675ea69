"""The config's sections: every key once, with its type, default, range, part in the cell
id and one-line doc (the full text: docs/config.md, checked against this by a test).

pydantic checks the types and ranges (strict: a whole number is no ``true``, a number may
be a whole number; no NaN or infinity anywhere); :func:`check_types` says what it found in
our words (:mod:`.explain`), one line per key, naming the key, the value and what is allowed.
Checks across keys are in :mod:`.rules`.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WrapValidator

from ..errors import UserError
from .explain import validate
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
Positive = Annotated[int, Field(gt=0)]
Fraction = Annotated[Number, Field(ge=0, lt=1)]

# A key's part in the cell id (vitscale.config.identity reads it): keys that change how a
# run is operated, not what it computes, are left out, so that moving a dataset or turning
# W&B off does not orphan finished cells; keys added after cells were run are hashed only
# when set, or only when they differ from a default that computes what those cells did.
OPERATIONAL = {"cell_id": "operational"}
WHEN_SET = {"cell_id": "when set"}
UNLESS_DEFAULT = {"cell_id": "unless default"}


def _key(
    default: Any = None, *, doc: str | None = None, cell_id: dict | None = None, **kw: Any
) -> Any:
    """A key's declaration: its default, one-line doc, part in the cell id and range."""
    factory = {"default_factory": default} if callable(default) else {"default": default}
    return Field(**factory, description=doc, json_schema_extra=cell_id, **kw)


class Section(BaseModel):
    """Keys of known types and no others; mutable (the grid writes chosen micro-batches)."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain data in schema order: config.json, the dry-run's print, the cell id."""
        return {k: v.to_dict() if isinstance(v, Section) else copy.deepcopy(v) for k, v in self}


class ModelConfig(Section):
    name: str = "ViT-Pico/4"
    pool: Literal["token", "gap"] | None = None
    dropout: Fraction | None = _key(doc="encoder dropout; null: the recipe's (paper Table 3)")
    stochastic_depth: Fraction = _key(
        0.0, cell_id=UNLESS_DEFAULT, doc="the last residual block's skip rate, linear from 0"
    )
    pre_logits: bool | None = _key(cell_id=WHEN_SET)
    pretrained: str | None = _key(cell_id=WHEN_SET)
    pretrained_dataset: str | None = _key(cell_id=WHEN_SET, doc="jft300m, imagenet21k or imagenet")
    pretrained_epochs: Number | None = _key(cell_id=WHEN_SET)


class DataConfig(Section):
    dataset: str = "synthetic"
    root: str | None = _key(cell_id=OPERATIONAL, doc="where real datasets live")
    download: bool = _key(False, cell_id=OPERATIONAL, doc="torchvision sets only")
    image_size: int = _key(32, ge=8)
    subset: int | float | str | None = _key(doc="30000, 0.1 or '9M'; null: the whole split")
    class_balanced: bool = False
    num_workers: int | None = _key(
        cell_id=OPERATIONAL, ge=0, doc="null: on a GPU the process's CPUs less one, else 0"
    )
    shuffle_shards: Positive | None = _key(cell_id=WHEN_SET, doc="sharded sets; null: 16")
    skip_bad_samples: int = _key(
        0, cell_id=OPERATIONAL, ge=0, doc="sharded sets: distinct bad examples replaced"
    )
    holdout: Annotated[Number, Field(gt=0, lt=1)] = _key(
        0.2, cell_id=UNLESS_DEFAULT, doc="folder sets without test/ or val/: held out of train/"
    )
    decode: Literal["auto", "workers", "device"] = _key(
        "auto", cell_id=OPERATIONAL, doc="sharded sets: on the loader's workers or the device"
    )


class TrainConfig(Section):
    steps: int | None = None  # positive, or 0 with model.pretrained: .rules
    epochs: Number | None = _key(gt=0)
    examples: int | str | None = _key(doc="2121000000 or '2121M'")
    batch_size: Positive = _key(256, doc="global: the same whatever the number of processes")
    micro_batch_size: Positive | None = _key(cell_id=OPERATIONAL, doc="per process")
    loss: Literal["softmax", "sigmoid"] | None = _key(doc="null: sigmoid for multi-label sets")
    label_smoothing: Fraction = 0.0
    grad_clip: float = _key(1.0, ge=0, doc="global-norm clipping; 0: off")
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    compile: bool | str = _key(False, cell_id=OPERATIONAL, doc="true, or a backend's name")
    channels_last: bool | None = _key(cell_id=OPERATIONAL)
    log_every: Positive = _key(10, cell_id=OPERATIONAL)
    checkpoint_every: Positive | None = _key(500, cell_id=OPERATIONAL, doc="also on a signal")
    eval_every: Positive | None = _key(doc="null: evaluate only at the end")


class OptimConfig(Section):
    name: Literal["adamw"] = "adamw"
    lr: Number | None = _key(ge=0, doc="null: the recipe's (paper Table 3 / Appendix B)")
    weight_decay: Number | None = _key(ge=0, doc="decoupled, multiplied by lr (torch AdamW)")
    betas: list[Fraction] = _key(lambda: [0.9, 0.999], min_length=2, max_length=2)
    # wsd (warm-up, stable, cooldown; Hägele et al. 2024) and rsqrt (big_vision; Zhai et al.
    # 2022) do not depend on the run's length before their cooldown: docs/schedules.md
    schedule: Literal["linear", "cosine", "wsd", "rsqrt"] | None = None
    warmup_steps: int | None = _key(ge=0)
    end_lr: float = 1e-5
    cooldown: Number | None = _key(cell_id=WHEN_SET, doc="steps, or a fraction of the run")
    cooldown_shape: Literal["linear", "1-sqrt"] | None = _key(cell_id=WHEN_SET)
    timescale: Positive | None = _key(cell_id=WHEN_SET, doc="rsqrt: steps")


class FewShotConfig(Section):
    datasets: list[str] = _key(list)
    shots: list[Positive] = _key(lambda: [1, 5, 10, 25])
    seeds: Positive = 3
    l2_reg: float = 1024.0
    test_examples: int | None = _key(doc="test images per dataset; null: the test split")
    # Every model's features read through one fixed random projection to this many
    # dimensions (vitscale.evals.fewshot.project), so that models of different widths are
    # probed at the same width; None: the features as they are.
    width: Positive | None = _key(cell_id=WHEN_SET)


class UpstreamConfig(Section):
    examples: int | None = _key(2000, doc="held-out pre-training images for top-1; 0: off")


class FinetuneConfig(Section):
    datasets: list[str] = _key(list)
    steps: Positive | None = _key(doc="null: the paper's per dataset (vitscale.data.registry)")
    lrs: list[Annotated[Number, Field(gt=0)]] | None = _key(
        min_length=1, doc="null: the paper's grid per dataset"
    )
    batch_size: Positive = 512
    micro_batch_size: Positive | None = _key(cell_id=OPERATIONAL, doc="per process")
    image_size: int | None = _key(doc="null: the pre-training resolution")
    val_fraction: Number | None = _key(doc="null: the dataset's default held-out slice")
    test_examples: int | None = None


class EvalConfig(Section):
    fewshot: FewShotConfig = _key(FewShotConfig)
    upstream: UpstreamConfig = _key(UpstreamConfig)
    finetune: FinetuneConfig = _key(FinetuneConfig)
    batch_size: int = _key(256, cell_id=OPERATIONAL, doc="feature extraction")


class WandbConfig(Section):
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"
    project: str = "vitscale"
    entity: str | None = None
    tags: list[str] = _key(list)


class BranchConfig(Section):
    """Set by the grid (vitscale.grid.branches; docs/schedules.md): cells that differ only
    in their duration, with a wsd or rsqrt schedule, share one run up to each one's cooldown
    start. Operational: a branched cell computes what it would alone."""

    trunk: str | None = _key(doc="the sibling run folder (cell id) whose checkpoint it starts from")
    step: int | None = _key(doc="that checkpoint's step: this cell's cooldown start")
    keep: list[int] = _key(list, doc="this run's steps kept for its branches")


class Config(Section):
    seed: int = 0
    grid: str | None = _key(cell_id=OPERATIONAL, doc="set by the grid runner")
    grid_file: str | None = _key(cell_id=OPERATIONAL, doc="set by the grid runner: its file")
    recipe: Literal[RECIPES] | None = None
    model: ModelConfig = _key(ModelConfig)
    data: DataConfig = _key(DataConfig)
    train: TrainConfig = _key(TrainConfig)
    optim: OptimConfig = _key(OptimConfig)
    eval: EvalConfig = _key(EvalConfig)
    wandb: WandbConfig = _key(WandbConfig, cell_id=OPERATIONAL)
    branch: BranchConfig = _key(BranchConfig, cell_id=OPERATIONAL)


def marked(cell_id: dict, section: type[Section] = Config, prefix: str = "") -> tuple[str, ...]:
    """The dotted keys (or whole sections) whose declaration gives this part in the cell id."""
    found: list[str] = []
    for name, field in section.model_fields.items():
        if field.json_schema_extra == cell_id:
            found.append(prefix + name)
        elif isinstance(field.annotation, type) and issubclass(field.annotation, Section):
            found += marked(cell_id, field.annotation, f"{prefix}{name}.")
    return tuple(found)


def check_types(data: dict) -> tuple[dict, list[str], set[str]]:
    """``(kept, problems, rejected)``: ``data`` without the keys the schema rejects, one
    message per rejected key (:mod:`.explain`), and their dotted names."""
    kept, rejected = validate(Config, data)
    return kept, [r.message for r in rejected], {".".join(r.path) for r in rejected}
