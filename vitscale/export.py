"""``vitscale export RUN_DIR`` (docs/full-scale.md, "Published checkpoints"): a cell's weights as the
model folder timm's ``local-dir:`` source reads: timm's ``config.json`` (architecture,
``model_args`` that rebuild our exact shape, input size and [-1, 1] normalisation, plus a
``vitscale`` section: model name, resolution, pool, cell id, step) and the weights in
timm's names, which :func:`vitscale.models.load_pretrained` reads back as well.

What timm cannot express is said, not hidden: a ViT pre-training head's tanh pre-logits
layer has no timm counterpart, so such a head is left out (``num_classes: 0``, timm then
returns the pooled features); timm's ports compute ViTs exactly (``act_layer="gelu_tanh"``)
but keep their own weight-standardisation and GroupNorm epsilons for BiT and hybrids
(relative differences of ~1e-5 to 1e-3 in the logits, see :mod:`vitscale.models.resnet`).
The folder is written aside and renamed into place, so an interrupted export leaves no
partial folder behind.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import record as rf
from .catalog import parse

FORMATS = {"timm": "pytorch_model.bin", "safetensors": "model.safetensors"}
NORMALISE = {
    "mean": [0.5, 0.5, 0.5],
    "std": [0.5, 0.5, 0.5],
}  # pixels in [-1, 1] (docs/protocol.md)


class ExportError(ValueError):
    """A run folder that cannot be exported (no checkpoint, a model timm cannot build)."""


@dataclass(frozen=True)
class Export:
    path: Path
    weights: Path
    architecture: str
    num_classes: int
    note: str  # what was left out, or ""


def timm_config(name: str, *, image_size: int, pool: str | None) -> tuple[str, dict]:
    """``(timm architecture, model_args)`` that build ``name`` in timm."""
    try:
        return parse(name).timm(image_size=image_size, pool=pool)
    except ValueError as e:
        raise ExportError(str(e)) from None


def _latest_state(run_dir: Path) -> tuple[dict, int]:
    import torch

    from .train.checkpoint import latest

    ckpt = latest(run_dir / rf.CHECKPOINTS)
    if ckpt is None:
        raise ExportError(
            f"{run_dir}: no complete checkpoint under {rf.CHECKPOINTS}/ (a published cell "
            "has none: its weights are the file its model.pretrained names)"
        )
    state = torch.load(ckpt / "state.pt", map_location="cpu", weights_only=True)
    return state["model"], int(state["progress"]["step"])


def _write(folder: Path, weights: dict, *, fmt: str, name: str) -> None:
    import torch

    path = folder / FORMATS[fmt]
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(weights, path, metadata={"format": "pt", "vitscale_model": name})
    else:
        torch.save(weights, path)


def export_run(
    run_dir: str | os.PathLike,
    *,
    fmt: str = "safetensors",
    out: str | os.PathLike | None = None,
    force: bool = False,
) -> Export:
    """Write ``run_dir``'s latest checkpoint as a timm model folder (see module doc)."""
    from .models.checkpoint_keys import from_vitscale
    from .models.pretrained import pool_of

    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(map(repr, FORMATS))}")
    run_dir = Path(run_dir)
    if not (run_dir / rf.CONFIG).is_file():
        raise ExportError(f"{run_dir}: not a run folder (no {rf.CONFIG})")
    config = rf.read_json(run_dir / rf.CONFIG)
    name = config["model"]["name"]
    image_size = int(config["data"]["image_size"])
    family = parse(name).family
    state, step = _latest_state(run_dir)
    pool = pool_of(name, state)

    note = ""
    head = {k for k in state if k.startswith("head.")}
    if "head.dense.weight" in state:
        note = (
            "head left out: timm has no layer for the tanh pre-logits of the pre-training "
            "head (num_classes 0: timm returns the pooled features)"
        )
        state = {k: v for k, v in state.items() if k not in head}
    num_classes = (
        int(state["head.classifier.weight"].shape[0]) if "head.classifier.weight" in state else 0
    )
    architecture, model_args = timm_config(name, image_size=image_size, pool=pool)
    weights = from_vitscale(state, family)

    target = Path(out) if out is not None else run_dir / f"export-{fmt}"
    if target.exists() and not force:
        raise ExportError(f"{target} exists; give --force to replace it, or another --out")
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # a previous export killed midway
    try:
        tmp.mkdir(parents=True)
        _write(tmp, weights, fmt=fmt, name=name)
        cfg = {
            "architecture": architecture,
            "num_classes": num_classes,
            "global_pool": model_args.get("global_pool", "avg"),
            "model_args": model_args,
            "pretrained_cfg": {
                "input_size": [3, image_size, image_size],
                "interpolation": "bilinear",
                "crop_pct": 1.0,
                "crop_mode": "center",
                "num_classes": num_classes,
                **NORMALISE,
            },
            "vitscale": {
                "model": name,
                "image_size": image_size,
                "pool": pool,
                "cell_id": config.get("cell_id"),
                "step": step,
                "note": note,
            },
        }
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:  # Ctrl-C, a full disk: no partial folder is left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Export(target, target / FORMATS[fmt], architecture, num_classes, note)
