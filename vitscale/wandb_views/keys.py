"""The keys a built view names, checked against what a cell's W&B run holds (docs/design.md,
"The run folder"; from the start of the run also the model's identity,
:data:`vitscale.record.wandb.IDENTITY`).

:func:`spec_keys` reads back every history, summary and config key a workspace or report
spec (the JSON that is sent to W&B) refers to, so tests check them against what a real
run logged (``wandb leet inspect --json``) and a renamed metric breaks a test, not a
dashboard.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..record import BEST

# Summary keys the views show: RunResult's field names.
EXAFLOPS = "pretrain_exaflops"  # total pre-training compute, paper convention (Fig. 5's x)
DEVICE_HOURS = "device_hours"
RESTARTS = "restarts"
STATUS = "status"


def best(metric: str) -> str:
    """Summary key of a metric's best value: ``best/fewshot/<dataset>/<k>shot``."""
    return BEST + metric


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
