"""Models for the parity tests: sizes the CPU runs for real, random weights at sensible
scales, and the official numerics patched into timm's ports (tests/test_pretrained.py
cites each patch)."""

from __future__ import annotations

import types

import numpy as np
import torch
import torch.nn.functional as F

from vitscale.catalog import parse, smallest_resolution

# Real (CPU) forward/backward for models up to this size; larger ones are checked on the
# meta device (shapes, gradients reaching every parameter) to keep the suite fast.
REAL_PARAM_LIMIT = 30_000_000


small_resolution = smallest_resolution  # the smallest resolution each model tiles, >= 32 px


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / a.abs().max()).item()


def fill_(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random weights at sensible scales, fast (one uniform_ per tensor: a 400M-parameter
    BiT fills in about a second): kernels with variance 1 / fan-in, norm scales near 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim > 1 and not name.endswith(("pos_embed", "cls_token")):
                bound = 3**0.5 * p[0].numel() ** -0.5
                p.uniform_(-bound, bound, generator=g)
            elif name.endswith("weight"):
                p.uniform_(0.8, 1.2, generator=g)
            else:
                p.uniform_(-0.1, 0.1, generator=g)
    return model


def _official_ws(self, x):
    """vision_transformer models_resnet.weight_standardize: (w - mean) / (std + 1e-5)."""
    from timm.layers.padding import pad_same

    if self.same_pad:
        x = pad_same(x, self.kernel_size, self.stride, self.dilation)
    w = self.weight
    var, mean = torch.var_mean(w, dim=(1, 2, 3), keepdim=True, correction=0)
    w = (w - mean) / (var.sqrt() + 1e-5)
    return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


def official(model: torch.nn.Module, family: str) -> torch.nn.Module:
    """Patch a timm port to the official numerics where it departs (module docstring)."""
    from timm.layers.std_conv import StdConv2d, StdConv2dSame

    for m in model.modules():
        if family == "ResNet" and isinstance(m, StdConv2d):
            m.eps = 1e-10
        if family == "Hybrid" and isinstance(m, torch.nn.GroupNorm):
            m.eps = 1e-6
        if family == "Hybrid" and isinstance(m, StdConv2dSame):
            m.forward = types.MethodType(_official_ws, m)
    return model


def jax_vit(sd, heads: int, *, big_vision: bool = False, scan: bool = False, prefix=""):
    """A timm ViT's weights in the official flax layout (the names and axes that timm's
    own reader of official files, ``_load_weights``, expects)."""
    t = lambda x: x.detach().numpy()  # noqa: E731
    mha, ln2, mlp = ("0", "1", "0") if big_vision else ("1", "2", "3")
    out = {
        "embedding/kernel": t(sd["patch_embed.proj.weight"].permute(2, 3, 1, 0)),
        "embedding/bias": t(sd["patch_embed.proj.bias"]),
        "Transformer/encoder_norm/scale": t(sd["norm.weight"]),
        "Transformer/encoder_norm/bias": t(sd["norm.bias"]),
        "head/kernel": t(sd["head.weight"].T),
        "head/bias": t(sd["head.bias"]),
    }
    if "cls_token" in sd:
        out["cls"] = t(sd["cls_token"])
    pos = "pos_embedding" if big_vision else "Transformer/posembed_input/pos_embedding"
    out[pos] = t(sd["pos_embed"])
    blocks = []
    i = 0
    while f"blocks.{i}.norm1.weight" in sd:
        b = lambda k, i=i: sd[f"blocks.{i}.{k}"]  # noqa: E731
        d = b("norm1.weight").shape[0]
        block = {
            "LayerNorm_0/scale": b("norm1.weight"),
            "LayerNorm_0/bias": b("norm1.bias"),
            f"LayerNorm_{ln2}/scale": b("norm2.weight"),
            f"LayerNorm_{ln2}/bias": b("norm2.bias"),
            f"MultiHeadDotProductAttention_{mha}/out/kernel": b("attn.proj.weight").T.reshape(
                heads, d // heads, d
            ),
            f"MultiHeadDotProductAttention_{mha}/out/bias": b("attn.proj.bias"),
            f"MlpBlock_{mlp}/Dense_0/kernel": b("mlp.fc1.weight").T,
            f"MlpBlock_{mlp}/Dense_0/bias": b("mlp.fc1.bias"),
            f"MlpBlock_{mlp}/Dense_1/kernel": b("mlp.fc2.weight").T,
            f"MlpBlock_{mlp}/Dense_1/bias": b("mlp.fc2.bias"),
        }
        for j, n in enumerate(("query", "key", "value")):
            w = b("attn.qkv.weight").chunk(3)[j]
            block[f"MultiHeadDotProductAttention_{mha}/{n}/kernel"] = w.T.reshape(
                d, heads, d // heads
            )
            block[f"MultiHeadDotProductAttention_{mha}/{n}/bias"] = (
                b("attn.qkv.bias").chunk(3)[j].reshape(heads, -1)
            )
        blocks.append({k: t(v) for k, v in block.items()})
        i += 1
    if scan:  # big_vision's nn.scan: one stacked array per parameter
        for k in blocks[0]:
            out[f"Transformer/encoderblock/{k}"] = np.stack([blk[k] for blk in blocks])
    else:
        for i, blk in enumerate(blocks):
            out |= {f"Transformer/encoderblock_{i}/{k}": v for k, v in blk.items()}
    trunk = "patch_embed.backbone."
    if trunk + "stem.conv.weight" in sd:
        hwio = lambda x: t(x.permute(2, 3, 1, 0))  # noqa: E731
        out["conv_root/kernel"] = hwio(sd[trunk + "stem.conv.weight"])
        out["gn_root/scale"] = t(sd[trunk + "stem.norm.weight"])
        out["gn_root/bias"] = t(sd[trunk + "stem.norm.bias"])
        for key, value in sd.items():
            if key.startswith(trunk + "stages."):
                s, _, u, *rest = key[len(trunk + "stages.") :].split(".")
                unit = f"block{int(s) + 1}/unit{int(u) + 1}/"
                mod, param = ".".join(rest[:-1]), rest[-1]
                name = {"downsample.conv": "conv_proj", "downsample.norm": "gn_proj"}.get(
                    mod, mod.replace("norm", "gn")
                )
                if param == "weight" and value.ndim == 4:
                    out[unit + name + "/kernel"] = hwio(value)
                else:
                    out[unit + name + ("/scale" if param == "weight" else "/bias")] = t(value)
    return {prefix + k: np.ascontiguousarray(v) for k, v in out.items()}


def vit_kwargs(name: str, res: int) -> dict:
    spec = parse(name)
    return dict(
        img_size=res,
        patch_size=spec.patch,
        embed_dim=spec.width,
        depth=spec.depth,
        num_heads=spec.heads,
        mlp_ratio=spec.mlp_dim / spec.width,
    )
