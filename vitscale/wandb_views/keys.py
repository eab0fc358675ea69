"""The W&B names of what the trainer logs, in one place, and the keys a built view names.

A cell's W&B run (:class:`vitscale.tracking.Tracker`) holds:

- history: the ``metrics.jsonl`` rows under the same names (``examples_seen``,
  ``compute/exaflops``, ``train/loss``, ``fewshot/<dataset>/<k>shot`` ...);
- config: the resolved ``config.json`` (``model.name``, ``data.subset``,
  ``data.num_examples`` ...);
- summary: ``result.json`` flattened by :func:`summary_from_result` (``best/<metric>``,
  ``final/<metric>``, ``finetune/<dataset>/top1``, ``pretrain_exaflops``,
  ``device_hours``, ``restarts`` ...), and from the start of the run the model's
  :func:`identity` (``family``, ``size``, ``patch``) for the run table.

:func:`spec_keys` reads back every history, summary and config key a workspace or report
spec (the JSON that is sent to W&B) refers to, so tests check them against what a real
run logged (``wandb leet inspect --json``) and a renamed metric breaks a test, not a
dashboard.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import runfolder as rf

__all__ = [
    "BEST",
    "FINAL",
    "EXAFLOPS",
    "DEVICE_HOURS",
    "RESTARTS",
    "STATUS",
    "IDENTITY",
    "best",
    "summary_from_result",
    "identity",
    "run_name",
    "SpecKeys",
    "spec_keys",
]

BEST = "best/"  # best value during training (Fig. 4's early stopping)
FINAL = "final/"  # last logged value
EXAFLOPS = "pretrain_exaflops"  # total pre-training compute, paper convention (Fig. 5's x)
DEVICE_HOURS = "device_hours"
RESTARTS = "restarts"
STATUS = "status"
IDENTITY = ("family", "size", "patch")  # summary keys set when the run starts


def best(metric: str) -> str:
    """Summary key of a metric's best value: ``best/fewshot/<dataset>/<k>shot``."""
    return BEST + metric


def summary_from_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """result.json as the flat W&B summary: ``best``/``final`` entries under ``best/`` and
    ``final/``, fine-tuning accuracies as ``finetune/<dataset>/top1`` (the metric name
    everywhere else), other dicts (``time_s``) as ``<key>/<entry>``."""
    flat: dict[str, Any] = {}
    for key, value in result.items():
        if key == "finetune" and isinstance(value, Mapping):
            flat.update({rf.finetune_key(ds): v for ds, v in value.items()})
        elif isinstance(value, Mapping):
            flat.update({f"{key}/{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def identity(model: str) -> dict[str, Any]:
    """``family``, ``size`` and ``patch`` of a model name, as the analysis frames have them
    (:func:`vitscale.results.model_columns`); ``patch`` only where the model has one."""
    from ..results import model_columns

    family, size, patch = model_columns(model)
    return {k: v for k, v in zip(IDENTITY, (family, size, patch), strict=True) if v is not None}


def run_name(config: Mapping[str, Any], cell_id: str) -> str:
    """A cell's W&B display name, what chart legends show: model, subset, seed when it is
    not 0, and the cell id (the run id) so it stays unique: ``ViT-B/16 30M 1a2b3c4d5e``."""
    parts = [str(config["model"]["name"])]
    subset = (config.get("data") or {}).get("subset")
    if subset is not None:
        parts.append(str(subset))
    if config.get("seed"):
        parts.append(f"seed {config['seed']}")
    return " ".join([*parts, cell_id])


# --------------------------------------------------------------------------- reading specs


@dataclass
class SpecKeys:
    """Keys a spec refers to, by where W&B looks them up."""

    history: set[str] = field(default_factory=set)
    summary: set[str] = field(default_factory=set)
    config: set[str] = field(default_factory=set)  # dotted paths: "data.num_examples"
    run: set[str] = field(default_factory=set)  # run attributes: "state", "group", ...
    media: set[str] = field(default_factory=set)  # history keys of logged images


# W&B's own x axes for line plots: not logged keys.
_BUILTIN_X = {"_step", "Step", "_runtime", "_timestamp", "Relative Time (Wall)", "Wall Time"}


def _walk(obj: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(obj, Mapping):
        yield obj
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)


def _add(keys: SpecKeys, ref: str, *, column: bool = False) -> None:
    """A ``section:name`` reference, as panels (``config:data.value.num_examples``) or the
    run table (``config:model.name.value``) spell them."""
    section, _, name = ref.partition(":")
    if section == "config":
        parts = name.split(".")
        if column and parts[-1] == "value":
            parts = parts[:-1]
        elif not column and len(parts) > 1 and parts[1] == "value":
            parts = [parts[0], *parts[2:]]
        keys.config.add(".".join(parts))
    elif section == "summary":
        keys.summary.add(name)
    elif section == "run":
        keys.run.add(name)


def spec_keys(spec: Mapping[str, Any]) -> SpecKeys:
    """Every key a workspace view or report spec (its JSON) asks W&B for."""
    keys = SpecKeys()
    for node in _walk(spec):
        view = node.get("viewType")
        config = node.get("config") if isinstance(node.get("config"), Mapping) else {}
        if view == "Run History Line Plot":
            x = config.get("xAxis")
            if x and x not in _BUILTIN_X:
                keys.history.add(x)
            keys.history.update(config.get("metrics") or ())
        elif view == "Media Browser":
            keys.media.update(config.get("mediaKeys") or ())
        elif view == "Scatter Plot":
            for axis in ("xAxis", "yAxis", "zAxis"):
                if ref := config.get(axis):
                    _add(keys, ref)
        if isinstance(node.get("runFeed"), Mapping):
            for ref in node["runFeed"].get("columnOrder") or ():
                _add(keys, ref, column=True)
        key = node.get("key")
        if isinstance(key, Mapping) and "section" in key and "op" in node:  # a filter
            _add(keys, f"{key['section']}:{key['name']}")
    return keys
