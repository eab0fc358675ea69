"""Published checkpoints read into our layout, and loaded into a model built for them
(:func:`vitscale.models.load_pretrained` and ``create_model(pretrained=)`` build it).

Reads the files ``model.pretrained`` takes (docs/config.md); :mod:`vitscale.models.checkpoint_keys`
maps each layout onto our names.

Safety: nothing from a file is ever executed. PyTorch pickles load with
``torch.load(weights_only=True)`` (tensors and plain containers only), ``.npz`` with
``allow_pickle=False``; a file that needs more is refused with the reason.

Every trunk tensor must be present with its exact shape (else one error naming the first
mismatching key, in the file's own name and ours, with both shapes); the only reshaping
done is the position embedding's, bilinear over the patch grid for another resolution
as the official code does (:func:`~vitscale.models.vit.resize_pos_embed`).
"""

from __future__ import annotations

import logging
import math
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..catalog import parse
from .checkpoint_keys import LayoutError, to_vitscale

log = logging.getLogger(__name__)

TORCH_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt", ".tar")
SUFFIXES = (".safetensors", ".npz", *TORCH_SUFFIXES)
# What a timm / Hugging Face model folder holds, in the order timm prefers them.
FOLDER_FILES = ("model.safetensors", "pytorch_model.bin", "model.pth", "model.npz")
# Containers around a state dict: timm's train checkpoints, Lightning, our run checkpoints.
_WRAPPERS = ("state_dict", "model", "model_state_dict", "module", "params", "state_dict_ema")


class PretrainedError(ValueError):
    """A checkpoint that cannot be read safely or does not fit the named model."""


# ----------------------------------------------------------------------------- reading


def _resolve(source: str | os.PathLike) -> Path:
    path = Path(source).expanduser()
    if path.is_dir():
        for name in FOLDER_FILES:
            if (path / name).is_file():
                return path / name
        raise PretrainedError(
            f"{path}: a folder, but it holds none of {', '.join(FOLDER_FILES)} "
            "(give the weights file itself)"
        )
    if not path.is_file():
        raise FileNotFoundError(f"pretrained weights not found: {path}")
    if not path.name.endswith(SUFFIXES):
        raise PretrainedError(
            f"{path}: unknown weights format {path.suffix!r}; valid: {', '.join(SUFFIXES)}"
        )
    return path


def _npz_array(array: np.ndarray) -> torch.Tensor:
    if array.dtype.kind == "V" and array.dtype.itemsize == 2:  # bfloat16 as raw 2-byte voids
        return torch.from_numpy(array.view(np.uint16).astype(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(array))


def _read_npz(path: Path) -> dict[str, torch.Tensor]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: _npz_array(npz[key]) for key in npz.files}
    except ValueError as e:  # "Object arrays cannot be loaded when allow_pickle=False"
        raise PretrainedError(
            f"refused to read {path}: it holds pickled Python objects ({e}); vitscale reads "
            ".npz files with allow_pickle=False so that no code from a file ever runs"
        ) from None


def _read_torch(path: Path) -> object:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's message is long; its "WeightsUnpickler error" line names the culprit
        reason = next(
            (
                line.split("error:", 1)[1].split(". Please")[0].strip()
                for line in str(e).splitlines()
                if "WeightsUnpickler error" in line
            ),
            type(e).__name__,
        )
        raise PretrainedError(
            f"refused to read {path}: it holds more than tensors and plain containers "
            f"({reason}). vitscale loads weights with torch.load(weights_only=True) only, so "
            "that no code from a file ever runs. If you trust the file, save its tensors "
            "alone (torch.save(state_dict, 'weights.pth')) or as safetensors."
        ) from None


def _tensors(obj: object, path: Path) -> dict[str, torch.Tensor]:
    """The state dict inside what ``torch.load`` returned (unwrapping known containers)."""
    if isinstance(obj, dict):
        for key in _WRAPPERS:
            if isinstance(obj.get(key), dict):
                return _tensors(obj[key], path)
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        if tensors:
            return tensors
    raise PretrainedError(
        f"{path}: no state dict found (expected a mapping of names to tensors, possibly "
        f"under one of {', '.join(map(repr, _WRAPPERS))})"
    )


def read_weights(source: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Every tensor of a weights file (or model folder), by name, as stored."""
    path = _resolve(source)
    if path.name.endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(path, device="cpu")
    if path.name.endswith(".npz"):
        return _read_npz(path)
    return _tensors(_read_torch(path), path)


# ----------------------------------------------------------------------------- checkpoint


@dataclass
class Checkpoint:
    """A checkpoint in vitscale's names (float32), with what it says about the model."""

    name: str
    source: str
    layout: str
    state: dict[str, torch.Tensor]
    origin: dict[str, str]  # our key -> the file's key

    @property
    def family(self) -> str:
        return parse(self.name).family

    @property
    def pool(self) -> str | None:
        return pool_of(self.name, self.state)

    @property
    def has_pre_logits(self) -> bool:
        return "head.dense.weight" in self.state

    @property
    def num_classes(self) -> int | None:
        w = self.state.get("head.classifier.weight")
        return None if w is None else int(w.shape[0])

    @property
    def image_size(self) -> int | None:
        """The resolution its position embedding was trained at (ViT, hybrid)."""
        pos = self.state.get("pos_embed")
        if pos is None:
            return None
        grid = math.isqrt(pos.shape[1] - (self.pool == "token"))
        _, pixels_per_token = parse(self.name).columns()
        return grid * pixels_per_token

    def key(self, ours: str) -> str:
        """How the file names one of our keys (for messages)."""
        theirs = self.origin.get(ours, ours)
        return repr(theirs) if theirs == ours else f"{theirs!r} (our {ours!r})"


Source = str | os.PathLike | Mapping[str, torch.Tensor]


def pool_of(name: str, state: Mapping[str, torch.Tensor]) -> str | None:
    """A checkpoint's pool: "token" with a class token, "gap" without; None for a family
    that pools one way only (BiT, Mixer)."""
    if "token" not in parse(name).pools:
        return None
    return "token" if "cls_token" in state else "gap"


def read_checkpoint(name: str, source: Source) -> Checkpoint:
    """Read ``source`` (a file, a model folder, or a state dict already in memory, e.g.
    a timm model's) and convert it to vitscale's names for the model ``name``."""
    spec = parse(name)
    if isinstance(source, Mapping):  # copied: the model must not share the caller's tensors
        weights, source = {k: v.clone() for k, v in source.items()}, "state dict"
    else:
        weights = read_weights(source)
    try:
        converted = to_vitscale(weights, spec.family, what=str(source))
    except LayoutError as e:
        raise PretrainedError(str(e)) from None
    state = {
        k: (v.float() if v.is_floating_point() else v).contiguous()
        for k, v in converted.state.items()
    }
    return Checkpoint(spec.name, str(source), converted.layout, state, converted.origin)


# ----------------------------------------------------------------------------- loading


def pool_for(ckpt: Checkpoint, pool: str | None) -> str | None:
    if ckpt.pool is not None and pool is not None and pool != ckpt.pool:
        has = "has a class token" if ckpt.pool == "token" else "has no class token"
        raise PretrainedError(
            f"{ckpt.source}: pool={pool!r}, but the checkpoint {has}: give pool={ckpt.pool!r} "
            f"(model.pool: {ckpt.pool} in a config)"
        )
    return ckpt.pool if ckpt.pool is not None else pool


def shape_error(ckpt: Checkpoint, key: str, theirs, ours) -> PretrainedError:
    return PretrainedError(
        f"{ckpt.source} ({ckpt.layout} layout) does not fit {ckpt.name}: "
        f"{ckpt.key(key)} has shape {tuple(theirs)} in the checkpoint, {tuple(ours)} in the model"
    )


def _resizable(key: str, theirs: torch.Size, ours: torch.Size) -> bool:
    """A position embedding from another resolution: same width, a square grid."""
    return key == "pos_embed" and theirs[-1] == ours[-1] and len(theirs) == len(ours) == 3


def load_into(model: nn.Module, ckpt: Checkpoint, *, keep_classifier: bool) -> nn.Module:
    """Assign ``ckpt``'s tensors to ``model`` (built on the meta device, so nothing is
    initialised twice); every parameter must come from the checkpoint except the
    classifier when ``keep_classifier`` is False, which gets the paper's fresh init."""
    expected = model.state_dict()
    fresh = set() if keep_classifier else {k for k in expected if k.startswith("head.classifier.")}
    state = {}
    for key, target in expected.items():
        if key in fresh:
            continue
        if key not in ckpt.state:
            raise PretrainedError(
                f"{ckpt.source} ({ckpt.layout} layout) does not fit {ckpt.name}: it has no "
                f"{key!r} (shape {tuple(target.shape)} in the model)"
                + (
                    "; load it with head='drop' to start a new classifier"
                    if key.startswith("head.")
                    else ""
                )
            )
        value = ckpt.state[key]
        if value.shape != target.shape and not _resizable(key, value.shape, target.shape):
            raise shape_error(ckpt, key, value.shape, target.shape)
        state[key] = value
    dropped = [k for k in ckpt.state if k not in state and k not in fresh]
    unexpected = [k for k in dropped if not k.startswith("head.")]
    if unexpected:
        k = unexpected[0]
        raise PretrainedError(
            f"{ckpt.source} ({ckpt.layout} layout) does not fit {ckpt.name}: {ckpt.key(k)} "
            f"(shape {tuple(ckpt.state[k].shape)}) has no place in the model"
        )
    if dropped or fresh:
        log.info("%s: new head for %s (dropped %s)", ckpt.source, ckpt.name, dropped or "none")
    model.load_state_dict(state, strict=False, assign=True)
    if fresh:
        head = model.head
        head.classifier.to_empty(device="cpu")
        head.reset_classifier()
    meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    assert not meta, f"left uninitialised: {meta}"  # a bug here, not the user's
    return model
