"""Checkpoint key layouts: other codes' parameter names and shapes <-> vitscale's state dict.

One table per (layout, family) says which of their tensors is which of ours and how its
axes differ; conversion in either direction reads the same table, so an import and an
export cannot drift apart. Layouts:

==============  ==================================================================  =======
layout          what writes it                                                      family
==============  ==================================================================  =======
``vitscale``    our own ``state_dict`` (run checkpoints; ``vitscale export``)       all
``timm``        timm's ports: ``vit_*``, ``vit_*_r50_*``, ``resnetv2_*_bit``        all
``hf``          Hugging Face transformers: ``ViT*`` (Hub names and transformers     ViT,
                5's module names) and ``Bit*``                                      ResNet
``vit_jax``     google-research/vision_transformer ``.npz`` (ViT and R50 hybrids)   ViT,
                                                                                    Hybrid
``big_vision``  google-research/big_vision ``.npz`` (``vit.py``, ``bit_paper.py``)  ViT,
                                                                                    ResNet
``big_transfer``  google-research/big_transfer ``.npz`` (the BiT release)           ResNet
==============  ==================================================================  =======

The flax/TF layouts store convolution kernels HWIO, dense kernels (in, out), attention
per head ((D, heads, head_dim) in, (heads, head_dim, D) out); PyTorch stores OIHW and
(out, in) with one fused qkv matrix. big_vision adds its position embedding before
prepending the class token, so the class token has none: its slot here is zero.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch


class LayoutError(ValueError):
    """Weights that no known layout of the model's family explains."""


# ----------------------------------------------------------------------------- transforms

# (to ours, to theirs) for one tensor.
Transform = tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def _attn_in(t: torch.Tensor) -> torch.Tensor:  # kernel (D, H, hd) -> (H*hd, D); bias (H, hd)
    return t.reshape(t.shape[0], -1).T if t.ndim == 3 else t.reshape(-1)


_TRANSFORMS: dict[str, Transform] = {
    "same": (_same, _same),
    "conv": (lambda t: t.permute(3, 2, 0, 1), lambda t: t.permute(2, 3, 1, 0)),  # HWIO <-> OIHW
    "dense": (lambda t: t.T, lambda t: t.T),  # (in, out) <-> (out, in)
    "vec": (lambda t: t.reshape(-1), _same),  # flax GroupNorm params may be (1, 1, 1, C)
    "attn_in": (_attn_in, _same),
    "attn_out": (lambda t: t.reshape(-1, t.shape[-1]).T, _same),  # (H, hd, D) -> (D, H*hd)
    "conv1x1": (lambda t: t.reshape(t.shape[0], -1), lambda t: t[:, :, None, None]),
    "tf_head": (lambda t: t.reshape(t.shape[-2], t.shape[-1]).T, _same),  # (1, 1, C, K)
}

# ----------------------------------------------------------------------------- templates

# Placeholders: an index ("{i}", "{s}", "{u}", "{n}"), optionally 1-based in the other code
# ("{s+1}"), or a parameter name ("{p}"). Ours are always 0-based.
_PLACEHOLDER = re.compile(r"\{(\w)(\+1)?\}")
_VALUES = {
    "p": r"weight|bias",
    "n": r"[123]",
    "m": r"norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2",
}


@dataclass(frozen=True)
class _Template:
    text: str
    regex: re.Pattern
    offsets: dict[str, int]

    @classmethod
    def of(cls, text: str) -> _Template:
        parts, offsets, pos = [], {}, 0
        for m in _PLACEHOLDER.finditer(text):
            parts.append(re.escape(text[pos : m.start()]))
            name = m[1]
            offsets[name] = 1 if m[2] else 0
            parts.append(f"(?P<{name}>{_VALUES.get(name, r'[0-9]+')})")
            pos = m.end()
        parts.append(re.escape(text[pos:]))
        return cls(text, re.compile("".join(parts)), offsets)

    def match(self, key: str) -> dict[str, str] | None:
        m = self.regex.fullmatch(key)
        if m is None:
            return None
        return {
            k: str(int(v) - self.offsets[k]) if v.isdigit() else v for k, v in m.groupdict().items()
        }

    def format(self, values: Mapping[str, str]) -> str:
        def sub(m: re.Match) -> str:
            v = values[m[1]]
            return str(int(v) + 1) if m[2] else v

        return _PLACEHOLDER.sub(sub, self.text)


@dataclass(frozen=True)
class _Rule:
    ours: _Template
    theirs: _Template
    transform: str


def _rules(*rows: tuple[str, str] | tuple[str, str, str]) -> tuple[_Rule, ...]:
    return tuple(
        _Rule(_Template.of(r[0]), _Template.of(r[1]), r[2] if len(r) > 2 else "same") for r in rows
    )


def _flax_ln(
    ours: str, theirs: str, scale: str = "scale", offset: str = "bias"
) -> list[tuple[str, str, str]]:
    """A LayerNorm/GroupNorm; TF names its parameters gamma and beta."""
    return [
        (f"{ours}.weight", f"{theirs}/{scale}", "vec"),
        (f"{ours}.bias", f"{theirs}/{offset}", "vec"),
    ]


def _flax_dense(ours: str, theirs: str) -> list[tuple[str, str, str]]:
    return [
        (f"{ours}.weight", f"{theirs}/kernel", "dense"),
        (f"{ours}.bias", f"{theirs}/bias", "same"),
    ]


def _flax_attention(ours: str, theirs: str) -> list[tuple[str, str, str]]:
    rows = []
    for q, name in (("q", "query"), ("k", "key"), ("v", "value")):
        rows += [
            (f"{ours}.{q}.weight", f"{theirs}/{name}/kernel", "attn_in"),
            (f"{ours}.{q}.bias", f"{theirs}/{name}/bias", "attn_in"),
        ]
    return rows + [
        (f"{ours}.proj.weight", f"{theirs}/out/kernel", "attn_out"),
        (f"{ours}.proj.bias", f"{theirs}/out/bias", "same"),
    ]


def _flax_vit(mha: str, ln2: str, mlp: str) -> list[tuple[str, str, str]]:
    """The flax ViT's names; the sub-module ordinals differ between vision_transformer
    (MultiHeadDotProductAttention_1, LayerNorm_2, MlpBlock_3) and big_vision (_0, _1, _0)."""
    block = "Transformer/encoderblock_{i}"
    return [
        ("patch_embed.weight", "embedding/kernel", "conv"),
        ("patch_embed.bias", "embedding/bias"),
        ("cls_token", "cls"),
        *_flax_ln("blocks.{i}.norm1", f"{block}/LayerNorm_0"),
        *_flax_attention("blocks.{i}.attn", f"{block}/{mha}"),
        *_flax_ln("blocks.{i}.norm2", f"{block}/{ln2}"),
        *_flax_dense("blocks.{i}.mlp.fc1", f"{block}/{mlp}/Dense_0"),
        *_flax_dense("blocks.{i}.mlp.fc2", f"{block}/{mlp}/Dense_1"),
        *_flax_ln("norm", "Transformer/encoder_norm"),
        *_flax_dense("head.dense", "pre_logits"),
        *_flax_dense("head.classifier", "head"),
    ]


_TIMM_VIT = [
    ("patch_embed.{p}", "patch_embed.proj.{p}"),
    ("cls_token", "cls_token"),
    ("pos_embed", "pos_embed"),
    ("blocks.{i}.{m}.{p}", "blocks.{i}.{m}.{p}"),
    ("norm.{p}", "norm.{p}"),
    ("head.classifier.{p}", "head.{p}"),
    ("head.dense.{p}", "pre_logits.fc.{p}"),  # timm < 0.6's in21k ports kept the pre-logits
]
_TIMM_TRUNK = "patch_embed.backbone"
_TIMM_UNIT = f"{_TIMM_TRUNK}.stages.{{s}}.blocks.{{u}}"

_HF_VIT = [
    ("cls_token", "embeddings.cls_token"),
    ("pos_embed", "embeddings.position_embeddings"),
    ("patch_embed.{p}", "embeddings.patch_embeddings.projection.{p}"),
    ("norm.{p}", "layernorm.{p}"),
    ("head.dense.{p}", "pooler.dense.{p}"),
    ("head.classifier.{p}", "classifier.{p}"),
    # the Hub's files (every transformers version writes these names)
    ("blocks.{i}.norm1.{p}", "encoder.layer.{i}.layernorm_before.{p}"),
    ("blocks.{i}.attn.q.{p}", "encoder.layer.{i}.attention.attention.query.{p}"),
    ("blocks.{i}.attn.k.{p}", "encoder.layer.{i}.attention.attention.key.{p}"),
    ("blocks.{i}.attn.v.{p}", "encoder.layer.{i}.attention.attention.value.{p}"),
    ("blocks.{i}.attn.proj.{p}", "encoder.layer.{i}.attention.output.dense.{p}"),
    ("blocks.{i}.norm2.{p}", "encoder.layer.{i}.layernorm_after.{p}"),
    ("blocks.{i}.mlp.fc1.{p}", "encoder.layer.{i}.intermediate.dense.{p}"),
    ("blocks.{i}.mlp.fc2.{p}", "encoder.layer.{i}.output.dense.{p}"),
    # transformers >= 5's module names (a model's state_dict() in memory)
    ("blocks.{i}.norm1.{p}", "layers.{i}.layernorm_before.{p}"),
    ("blocks.{i}.attn.q.{p}", "layers.{i}.attention.q_proj.{p}"),
    ("blocks.{i}.attn.k.{p}", "layers.{i}.attention.k_proj.{p}"),
    ("blocks.{i}.attn.v.{p}", "layers.{i}.attention.v_proj.{p}"),
    ("blocks.{i}.attn.proj.{p}", "layers.{i}.attention.o_proj.{p}"),
    ("blocks.{i}.norm2.{p}", "layers.{i}.layernorm_after.{p}"),
    ("blocks.{i}.mlp.fc1.{p}", "layers.{i}.mlp.fc1.{p}"),
    ("blocks.{i}.mlp.fc2.{p}", "layers.{i}.mlp.fc2.{p}"),
]

_BT_UNIT = "resnet/block{s+1}/unit{u+1}"
_BV_UNIT = "block{s+1}/unit{u+1}"
_JAX_UNIT = "block{s+1}/unit{u+1}"

_TABLES: dict[tuple[str, str], tuple[_Rule, ...]] = {
    ("timm", "ViT"): _rules(*_TIMM_VIT),
    ("timm", "Hybrid"): _rules(
        *_TIMM_VIT,
        ("stem.conv.weight", f"{_TIMM_TRUNK}.stem.conv.weight"),
        ("stem.norm.{p}", f"{_TIMM_TRUNK}.stem.norm.{{p}}"),
        ("stem.stages.{s}.{u}.conv{n}.weight", f"{_TIMM_UNIT}.conv{{n}}.weight"),
        ("stem.stages.{s}.{u}.norm{n}.{p}", f"{_TIMM_UNIT}.norm{{n}}.{{p}}"),
        ("stem.stages.{s}.{u}.proj.0.weight", f"{_TIMM_UNIT}.downsample.conv.weight"),
        ("stem.stages.{s}.{u}.proj.1.{p}", f"{_TIMM_UNIT}.downsample.norm.{{p}}"),
    ),
    ("timm", "ResNet"): _rules(
        ("stem.0.weight", "stem.conv.weight"),
        ("stages.{s}.{u}.norm{n}.{p}", "stages.{s}.blocks.{u}.norm{n}.{p}"),
        ("stages.{s}.{u}.conv{n}.weight", "stages.{s}.blocks.{u}.conv{n}.weight"),
        ("stages.{s}.{u}.downsample.weight", "stages.{s}.blocks.{u}.downsample.conv.weight"),
        ("norm.{p}", "norm.{p}"),
        ("head.classifier.weight", "head.fc.weight", "conv1x1"),  # BiT's head is a 1x1 conv
        ("head.classifier.bias", "head.fc.bias"),
    ),
    ("hf", "ViT"): _rules(*_HF_VIT),
    ("hf", "ResNet"): _rules(
        ("stem.0.weight", "embedder.convolution.weight"),
        ("stages.{s}.{u}.norm{n}.{p}", "encoder.stages.{s}.layers.{u}.norm{n}.{p}"),
        ("stages.{s}.{u}.conv{n}.weight", "encoder.stages.{s}.layers.{u}.conv{n}.weight"),
        (
            "stages.{s}.{u}.downsample.weight",
            "encoder.stages.{s}.layers.{u}.downsample.conv.weight",
        ),
        ("norm.{p}", "norm.{p}"),
        ("head.classifier.{p}", "classifier.1.{p}"),
    ),
    ("vit_jax", "ViT"): _rules(
        *_flax_vit("MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3"),
        ("pos_embed", "Transformer/posembed_input/pos_embedding"),
    ),
    ("vit_jax", "Hybrid"): _rules(
        *_flax_vit("MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3"),
        ("pos_embed", "Transformer/posembed_input/pos_embedding"),
        ("stem.conv.weight", "conv_root/kernel", "conv"),
        *_flax_ln("stem.norm", "gn_root"),
        ("stem.stages.{s}.{u}.conv{n}.weight", f"{_JAX_UNIT}/conv{{n}}/kernel", "conv"),
        *_flax_ln("stem.stages.{s}.{u}.norm{n}", f"{_JAX_UNIT}/gn{{n}}"),
        ("stem.stages.{s}.{u}.proj.0.weight", f"{_JAX_UNIT}/conv_proj/kernel", "conv"),
        *_flax_ln("stem.stages.{s}.{u}.proj.1", f"{_JAX_UNIT}/gn_proj"),
    ),
    ("big_vision", "ViT"): _rules(
        *_flax_vit("MultiHeadDotProductAttention_0", "LayerNorm_1", "MlpBlock_0"),
        # no class-token slot (added before the class token is prepended): see _finish
        ("pos_embed", "pos_embedding"),
        ("pos_embed", "Transformer/pos_embedding"),  # older big_vision files
    ),
    ("big_vision", "ResNet"): _rules(
        ("stem.0.weight", "root_block/conv_root/kernel", "conv"),
        ("stages.{s}.{u}.conv{n}.weight", f"{_BV_UNIT}/conv{{n}}/kernel", "conv"),
        *_flax_ln("stages.{s}.{u}.norm{n}", f"{_BV_UNIT}/gn{{n}}"),
        ("stages.{s}.{u}.downsample.weight", f"{_BV_UNIT}/conv_proj/kernel", "conv"),
        *_flax_ln("norm", "norm-pre-head"),
        *_flax_dense("head.classifier", "head"),
    ),
    ("big_transfer", "ResNet"): _rules(
        ("stem.0.weight", "resnet/root_block/standardized_conv2d/kernel", "conv"),
        *[
            row
            for n, part in ((1, "a"), (2, "b"), (3, "c"))
            for row in (
                (
                    f"stages.{{s}}.{{u}}.conv{n}.weight",
                    f"{_BT_UNIT}/{part}/standardized_conv2d/kernel",
                    "conv",
                ),
                *_flax_ln(
                    f"stages.{{s}}.{{u}}.norm{n}", f"{_BT_UNIT}/{part}/group_norm", "gamma", "beta"
                ),
            )
        ],
        (
            "stages.{s}.{u}.downsample.weight",
            f"{_BT_UNIT}/a/proj/standardized_conv2d/kernel",
            "conv",
        ),
        *_flax_ln("norm", "resnet/group_norm", "gamma", "beta"),
        ("head.classifier.weight", "resnet/head/conv2d/kernel", "tf_head"),
        ("head.classifier.bias", "resnet/head/conv2d/bias"),
    ),
}

# One key that only this layout has, per family: how a file's layout is recognised.
_MARKERS: dict[str, dict[str, tuple[str, ...]]] = {
    "ViT": {
        "vitscale": ("blocks.0.attn.qkv.weight", "patch_embed.weight"),
        "timm": ("patch_embed.proj.weight",),
        "hf": ("embeddings.patch_embeddings.projection.weight",),
        "vit_jax": ("Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel",),
        "big_vision": ("Transformer/encoderblock_0/MultiHeadDotProductAttention_0/query/kernel",),
    },
    "Hybrid": {
        "vitscale": ("stem.conv.weight", "patch_embed.weight"),
        "timm": (f"{_TIMM_TRUNK}.stem.conv.weight",),
        "vit_jax": ("conv_root/kernel",),
    },
    "ResNet": {
        "vitscale": ("stem.0.weight",),
        "timm": ("stem.conv.weight",),
        "hf": ("embedder.convolution.weight",),
        "big_vision": ("root_block/conv_root/kernel",),
        "big_transfer": ("resnet/root_block/standardized_conv2d/kernel",),
    },
}

# Wrappers around the weights proper, dropped before matching.
_PREFIXES = ("module.", "_orig_mod.", "params/", "opt/target/")
_HF_PREFIXES = {"ViT": "vit.", "ResNet": "bit."}


@dataclass
class Converted:
    """Weights in vitscale's names, the layout they came in, and each of our keys' source
    key (for error messages that name what the user's file calls it)."""

    state: dict[str, torch.Tensor]
    layout: str
    origin: dict[str, str]


def _strip(weights: Mapping[str, torch.Tensor], family: str) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in weights.items():
        changed = True
        while changed:
            changed = False
            for prefix in _PREFIXES:
                if key.startswith(prefix):
                    key, changed = key[len(prefix) :], True
        # a few big_transfer files number their convolutions ("standardized_conv2d_3")
        key = re.sub(r"/standardized_conv2d_\d+/", "/standardized_conv2d/", key)
        out[key] = value
    hf = _HF_PREFIXES.get(family)
    if hf and any(k.startswith(hf) for k in out):
        out = {k[len(hf) :] if k.startswith(hf) else k: v for k, v in out.items()}
    return _unscan(out)


def _unscan(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """big_vision with ``scan=True`` stacks the blocks: ``Transformer/encoderblock/...``
    with the block index as the leading axis. Unstack into ``encoderblock_{i}``."""
    stacked = "Transformer/encoderblock/"
    if not any(k.startswith(stacked) for k in weights):
        return weights
    out = {}
    for key, value in weights.items():
        if key.startswith(stacked):
            rest = key[len(stacked) :]
            for i, layer in enumerate(value.unbind(0)):
                out[f"Transformer/encoderblock_{i}/{rest}"] = layer
        else:
            out[key] = value
    return out


def detect(weights: Iterable[str], family: str) -> str | None:
    """The layout whose marker keys the (prefix-stripped) weights contain, else None."""
    keys = set(weights)
    for layout, markers in _MARKERS[family].items():
        if all(m in keys for m in markers):
            return layout
    return None


def _describe(keys: list[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:4])
    return shown + (f", ... ({len(keys)} keys)" if len(keys) > 4 else "")


def to_vitscale(
    weights: Mapping[str, torch.Tensor], family: str, *, what: str = "checkpoint"
) -> Converted:
    """Rename and reshape ``weights`` (any known layout of ``family``) into vitscale's."""
    weights = _strip(weights, family)
    layout = detect(weights, family)
    if layout is None:
        known = ", ".join(_MARKERS[family])
        raise LayoutError(
            f"{what}: not a {family} checkpoint in any known layout ({known}); "
            f"its keys: {_describe(sorted(weights))}"
        )
    if layout == "vitscale":
        return Converted(dict(weights), layout, {k: k for k in weights})
    rules = _TABLES[(layout, family)]
    state: dict[str, torch.Tensor] = {}
    origin: dict[str, str] = {}
    for key, value in weights.items():
        for rule in rules:
            if (values := rule.theirs.match(key)) is not None:
                ours = rule.ours.format(values)
                state[ours] = _TRANSFORMS[rule.transform][0](value)
                origin[ours] = key
                break
        else:
            raise LayoutError(
                f"{what}: key {key!r} (shape {tuple(value.shape)}) is not part of a {family} "
                f"model in the {layout} layout; the paper's models have no such parameter"
                + (" (big_vision's MAP head is not one of them)" if "MAPHead" in key else "")
            )
    _fuse_qkv(state, origin)
    _class_token_position(state, layout)
    return Converted(state, layout, origin)


def _fuse_qkv(state: dict[str, torch.Tensor], origin: dict[str, str]) -> None:
    """Separate query/key/value projections -> our one fused ``qkv`` (rows q, k, v)."""
    parts = re.compile(r"(blocks\.\d+\.attn)\.([qkv])\.(weight|bias)")
    groups: dict[tuple[str, str], dict[str, str]] = {}
    for key in list(state):
        if m := parts.fullmatch(key):
            groups.setdefault((m[1], m[3]), {})[m[2]] = key
    for (prefix, param), keys in groups.items():
        if set(keys) != {"q", "k", "v"}:
            missing = sorted({"q", "k", "v"} - set(keys))
            raise LayoutError(f"attention {prefix} has no {', '.join(missing)} {param}")
        fused = f"{prefix}.qkv.{param}"
        state[fused] = torch.cat([state.pop(keys[q]) for q in "qkv"], dim=0)
        origin[fused] = " + ".join(origin.pop(keys[q]) for q in "qkv")


def _class_token_position(state: dict[str, torch.Tensor], layout: str) -> None:
    """big_vision adds the position embedding to the patches only, then prepends the class
    token: the same as our embedding with a zero class-token slot."""
    pos, cls = state.get("pos_embed"), state.get("cls_token")
    if layout == "big_vision" and pos is not None and cls is not None:
        state["pos_embed"] = torch.cat([torch.zeros_like(pos[:, :1]), pos], dim=1)


def from_vitscale(
    state: Mapping[str, torch.Tensor], family: str, layout: str = "timm"
) -> dict[str, torch.Tensor]:
    """Our state dict in another layout's names and shapes (export; timm only for now)."""
    if (layout, family) not in _TABLES or layout != "timm":
        raise ValueError(f"export to the {layout!r} layout is not supported; valid: 'timm'")
    rules = _TABLES[(layout, family)]
    out = {}
    for key, value in state.items():
        for rule in rules:
            if (values := rule.ours.match(key)) is not None:
                out[rule.theirs.format(values)] = _TRANSFORMS[rule.transform][1](value).contiguous()
                break
        else:
            raise LayoutError(f"{key!r} has no counterpart in timm's {family} layout")
    return out
