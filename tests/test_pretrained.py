"""Published checkpoints: exact parity with the official architectures, every weight layout.

Oracles: timm's ports of the official models (random weights, no download) and timm's own
readers of the official ``.npz`` layouts; Hugging Face transformers' models and files;
scipy's ``ndimage.zoom`` (what the official code resizes position embeddings with).

Where timm's port departs from the official code (google-research/vision_transformer,
big_transfer), the reference model is patched to the official numerics before comparing,
and each patch cites its source line:

- ViT MLP: flax ``nn.gelu`` = tanh approximation (timm: exact erf) -> ``act_layer="gelu_tanh"``;
- BiT weight standardisation: ``sqrt(var + 1e-10)`` (bit_jax/bit_pytorch/bit_tf2; timm 1e-8);
- hybrid trunk: ``(w - mean) / (std + 1e-5)`` (models_resnet.weight_standardize; timm
  ``sqrt(var + 1e-8)``) and GroupNorm epsilon 1e-6 (flax.linen default; timm 1e-5).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vitscale.catalog import parse, same_padding
from vitscale.models import create_model, load_pretrained, resize_pos_embed
from vitscale.models.checkpoint_keys import from_vitscale
from vitscale.models.pretrained import PretrainedError, read_weights
from vitscale.models.resnet import SameStdConv2d

from .helpers.models import fill_, jax_vit, official, rel, vit_kwargs

timm = pytest.importorskip("timm")

TOL = 1e-5  # relative, fp32 (the bar)


def _timm(arch, family: str, **kwargs) -> torch.nn.Module:
    """A timm model with random weights (built on the meta device, filled once)."""
    if family != "ResNet":
        kwargs.setdefault("act_layer", "gelu_tanh")
    with torch.device("meta"):
        model = arch(**kwargs) if callable(arch) else timm.create_model(arch, **kwargs)
    return official(fill_(model.to_empty(device="cpu")), family).eval()


def _tiny_bit(**kwargs):
    """timm's BiT ResNetV2 (resnetv2_*_bit's settings) at vitscale's demo size R11x0.5."""
    from timm.layers.std_conv import StdConv2d
    from timm.models.resnetv2 import ResNetV2

    return ResNetV2(
        layers=[1, 1, 1],
        width_factor=0.5,
        stem_type="fixed",
        conv_layer=partial(StdConv2d, eps=1e-8),
        **kwargs,
    )


# ----------------------------------------------------------------------------- parity

slow = pytest.mark.slow
# (ours, timm architecture, timm kwargs, resolution): each model once, at two patches
# (ViT) or a 2x2 final feature map (hybrids, BiT-R50x1) per side; the big BiTs at 32 px,
# where their last stage is 1x1 but every layer still runs.
PORTS = [
    ("ViT-Ti/16", "vit_tiny_patch16_224", {}, 32),
    ("ViT-Ti/32", "vit_tiny_patch16_224", {"patch_size": 32}, 64),  # timm names no Ti/32
    ("ViT-S/16", "vit_small_patch16_224", {}, 32),
    ("ViT-S/32", "vit_small_patch32_224", {}, 64),
    ("ViT-B/16", "vit_base_patch16_224", {}, 32),
    ("ViT-B/32", "vit_base_patch32_224", {}, 64),
    pytest.param("ViT-L/16", "vit_large_patch16_224", {}, 32, marks=slow),
    pytest.param("ViT-L/32", "vit_large_patch32_224", {}, 64, marks=slow),
    ("BiT-R50x1", "resnetv2_50x1_bit", {}, 64),
    pytest.param("BiT-R101x3", "resnetv2_101x3_bit", {}, 32, marks=slow),
    pytest.param("BiT-R152x2", "resnetv2_152x2_bit", {}, 32, marks=slow),
    ("R50x1+ViT-B/16", "vit_base_r50_s16_224", {}, 32),
    pytest.param("R50x1+ViT-L/32", "vit_large_r50_s32_224", {}, 64, marks=slow),
]


@pytest.fixture
def no_onednn(monkeypatch):
    """oneDNN reorders every (freshly standardised) kernel on every call, which dominates a
    ResNet at these tiny feature maps; both models then run PyTorch's own convolution."""
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)


@pytest.mark.parametrize("name, arch, kwargs, res", PORTS)
def test_logits_equal_timm_port(name, arch, kwargs, res, no_onednn):
    """timm's port (random weights, official numerics) loaded into ours: same logits."""
    family = parse(name).family
    if family != "ResNet":
        kwargs = kwargs | {"img_size": res}
    ref = _timm(arch, family, num_classes=10, **kwargs)
    ours = load_pretrained(name, ref.state_dict()).eval()
    x = torch.randn(2, 3, res, res, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, got = ref(x), ours(x)
    assert rel(expected, got) <= TOL


def test_same_padding_matches_tensorflow_rule():
    """flax/TF "SAME" as timm implements it for its ports (timm.layers.padding)."""
    from timm.layers.padding import get_same_padding

    for size in range(1, 20):
        for kernel, stride in [(7, 2), (3, 2), (3, 1), (1, 2), (1, 1)]:
            before, after = same_padding(size, kernel, stride)
            assert before + after == get_same_padding(size, kernel, stride, 1)
            assert after - before in (0, 1)  # the odd pixel goes after
            assert (size + before + after - kernel) // stride + 1 == -(-size // stride)


def test_same_padding_moves_taps_but_not_the_paper_count():
    """The hybrid's "SAME" convolutions see other pixels than a symmetric padding would,
    yet as many of them: the padding-free multiply-add count of vitscale.flops (which
    assumes symmetric padding) stays exact for the hybrid trunk."""
    for size in range(2, 40):
        for kernel, stride in [(7, 2), (3, 2), (3, 1)]:
            before, after = same_padding(size, kernel, stride)
            out = (size + before + after - kernel) // stride + 1
            same = sum(
                0 <= o * stride - before + t < size for o in range(out) for t in range(kernel)
            )
            pad = kernel // 2
            sym = sum(0 <= o * stride - pad + t < size for o in range(out) for t in range(kernel))
            assert same == sym


def test_hybrid_weight_standardisation_is_the_official_formula():
    conv = SameStdConv2d(4, 6, 3, stride=2)
    with torch.no_grad():
        conv.weight.mul_(5.0).add_(1.0)
    w = conv.weight.detach().numpy().astype(np.float64)
    mean = w.mean(axis=(1, 2, 3), keepdims=True)
    std = w.std(axis=(1, 2, 3), keepdims=True)  # population std, as jnp.std
    expected_w = torch.from_numpy((w - mean) / (std + 1e-5)).float()
    x = torch.randn(2, 4, 8, 8)
    expected = F.conv2d(F.pad(x, (0, 1, 0, 1)), expected_w, stride=2)  # SAME on 8 px: (0, 1)
    torch.testing.assert_close(conv(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("old, new, prefix", [(7, 12, 1), (4, 6, 0), (14, 24, 1), (5, 2, 1)])
def test_resize_pos_embed_is_the_official_zoom(old, new, prefix):
    """vision_transformer checkpoint.interpolate_posembed: scipy.ndimage.zoom(order=1) over
    the grid, class-token embedding kept."""
    from scipy import ndimage

    pos = torch.randn(1, prefix + old * old, 5, dtype=torch.float64)
    grid = pos[0, prefix:].reshape(old, old, 5).numpy()
    zoomed = ndimage.zoom(grid, (new / old, new / old, 1), order=1).reshape(1, new * new, 5)
    expected = torch.cat([pos[:, :prefix], torch.from_numpy(zoomed)], dim=1)
    got = resize_pos_embed(pos, new_grid=(new, new), num_prefix_tokens=prefix)
    torch.testing.assert_close(got, expected)


# ----------------------------------------------------------------------------- formats


def _big_transfer(sd):
    """A timm BiT's weights in big_transfer's TF layout (what timm's ResNetV2
    ``load_pretrained`` reads)."""
    t = lambda x: np.ascontiguousarray(x.detach().numpy())  # noqa: E731
    hwio = lambda x: t(x.permute(2, 3, 1, 0))  # noqa: E731
    out = {
        "resnet/root_block/standardized_conv2d/kernel": hwio(sd["stem.conv.weight"]),
        "resnet/group_norm/gamma": t(sd["norm.weight"]),
        "resnet/group_norm/beta": t(sd["norm.bias"]),
        "resnet/head/conv2d/kernel": hwio(sd["head.fc.weight"]),
        "resnet/head/conv2d/bias": t(sd["head.fc.bias"]),
    }
    for key, value in sd.items():
        if key.startswith("stages."):  # stages.S.blocks.U.<module>[.conv].<param>
            parts = key.split(".")
            unit = f"resnet/block{int(parts[1]) + 1}/unit{int(parts[3]) + 1:02d}/"
            mod, param = parts[4], parts[-1]
            if mod == "downsample":
                out[unit + "a/proj/standardized_conv2d/kernel"] = hwio(value)
                continue
            part = "abc"[int(mod[-1]) - 1]
            if mod.startswith("conv"):
                out[unit + f"{part}/standardized_conv2d/kernel"] = hwio(value)
            else:
                out[unit + f"{part}/group_norm/" + ("gamma" if param == "weight" else "beta")] = t(
                    value
                )
    return out


def _big_vision_bit(bt: dict) -> dict:
    """big_transfer's file as big_vision's ``bit_paper.maybe_convert_big_transfer_format``
    renames it (GroupNorm params as (1, 1, 1, C), the head's kernel without its 1x1)."""
    out = {
        "root_block/conv_root/kernel": bt["resnet/root_block/standardized_conv2d/kernel"],
        "norm-pre-head/scale": bt["resnet/group_norm/gamma"][None, None, None],
        "norm-pre-head/bias": bt["resnet/group_norm/beta"][None, None, None],
        "head/kernel": bt["resnet/head/conv2d/kernel"][0, 0],
        "head/bias": bt["resnet/head/conv2d/bias"],
    }
    for key, value in bt.items():
        parts = key.split("/")
        if len(parts) < 4 or not parts[1].startswith("block"):
            continue
        block, unit, part = parts[1:4]
        n = "abc".index(part) + 1
        if parts[4] == "proj":
            out[f"{block}/{unit}/conv_proj/kernel"] = value
        elif parts[4] == "standardized_conv2d":
            out[f"{block}/{unit}/conv{n}/kernel"] = value
        else:
            name = "scale" if parts[-1] == "gamma" else "bias"
            out[f"{block}/{unit}/gn{n}/{name}"] = value[None, None, None]
    return out


def _check_timm_reads(arch, family, path, reference, **kwargs):
    """timm's own reader of the official layout recovers every tensor we wrote."""
    reader = _timm(arch, family, **kwargs)
    reader.load_pretrained(str(path), **({"prefix": "resnet/"} if family == "ResNet" else {}))
    read = reader.state_dict()
    for key, value in reference.state_dict().items():
        assert torch.equal(read[key], value), key


X32 = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize(
    "layout, pool, scan",
    [
        ("vit_jax", "token", False),
        ("vit_jax", "gap", False),
        ("big_vision", "token", False),
        ("big_vision", "gap", True),  # big_vision's scanned (stacked) blocks
    ],
)
def test_official_vit_npz(tmp_path, layout, pool, scan):
    big_vision = layout == "big_vision"
    kw = vit_kwargs("ViT-Pico/8", 32) | dict(num_classes=5)
    if pool == "gap":
        kw |= dict(class_token=False, global_pool="avg", fc_norm=False)
    elif big_vision:
        kw |= dict(
            no_embed_class=True
        )  # big_vision adds the position embedding before the class token
    ref = _timm(timm.models.vision_transformer.VisionTransformer, "ViT", **kw)
    path = tmp_path / "vit.npz"
    np.savez(path, **jax_vit(ref.state_dict(), heads=2, big_vision=big_vision, scan=scan))
    _check_timm_reads(timm.models.vision_transformer.VisionTransformer, "ViT", path, ref, **kw)
    ours = load_pretrained("ViT-Pico/8", path).eval()
    assert ours.pool == pool and ours.head.classifier.out_features == 5
    with torch.no_grad():
        assert rel(ref(X32), ours(X32)) <= TOL


def test_official_hybrid_npz(tmp_path):
    kw = dict(num_classes=4, img_size=32, embed_dim=384, num_heads=6)
    ref = _timm("vit_base_r50_s16_224", "Hybrid", **kw)
    path = tmp_path / "R50+ViT-S_16.npz"
    np.savez(path, **jax_vit(ref.state_dict(), heads=6))
    _check_timm_reads("vit_base_r50_s16_224", "Hybrid", path, ref, **kw)
    ours = load_pretrained("R50x1+ViT-S/16", path).eval()
    with torch.no_grad():
        assert rel(ref(X32), ours(X32)) <= TOL


def test_official_bit_npz_both_layouts(tmp_path):
    ref = _timm(_tiny_bit, "ResNet", num_classes=6)
    bt = _big_transfer(ref.state_dict())
    np.savez(tmp_path / "big_transfer.npz", **bt)
    _check_timm_reads(_tiny_bit, "ResNet", tmp_path / "big_transfer.npz", ref, num_classes=6)
    np.savez(
        tmp_path / "big_vision.npz", **{"params/" + k: v for k, v in _big_vision_bit(bt).items()}
    )
    with torch.no_grad():
        expected = ref(X32)
        for file in ("big_transfer.npz", "big_vision.npz"):
            ours = load_pretrained("BiT-R11x0.5", tmp_path / file).eval()
            assert rel(expected, ours(X32)) <= TOL, file


@pytest.mark.parametrize("suffix", [".pth", ".safetensors", ".bin"])
def test_timm_files(tmp_path, suffix):
    """timm state dicts as files: a plain .pth, a safetensors file, a training checkpoint
    that wraps the weights (``{"state_dict": ..., "epoch": ...}``)."""
    from safetensors.torch import save_file

    ref = _timm(
        timm.models.vision_transformer.VisionTransformer,
        "ViT",
        **vit_kwargs("ViT-Pico/8", 32),
        num_classes=3,
    )
    sd = ref.state_dict()
    path = tmp_path / f"weights{suffix}"
    if suffix == ".safetensors":
        save_file(sd, path)
    elif suffix == ".bin":
        torch.save({"state_dict": sd, "epoch": 3, "arch": "vit_tiny_patch16_224"}, path)
    else:
        torch.save(sd, path)
    model = create_model("ViT-Pico/8", num_classes=3, image_size=32, pretrained=path)
    with torch.no_grad():
        assert rel(ref(X32), model.eval()(X32)) <= TOL


def test_hugging_face_vit_folder(tmp_path):
    """transformers' own model, configured with the official numerics (tanh GELU,
    LayerNorm 1e-6), saved by ``save_pretrained`` (the Hub's file layout), with its
    tanh pooler as our pre-logits layer."""
    transformers = pytest.importorskip("transformers")

    config = transformers.ViTConfig(
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=256,
        image_size=32,
        patch_size=8,
        hidden_act="gelu_pytorch_tanh",
        layer_norm_eps=1e-6,
    )
    torch.manual_seed(0)
    hf = transformers.ViTModel(config, add_pooling_layer=True).eval()
    fill_(hf)
    hf.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    ours = create_model("ViT-Pico/8", num_classes=3, image_size=32, pretrained=tmp_path).eval()
    assert ours.head.dense is not None  # the pooler is the paper's pre-logits
    with torch.no_grad():
        expected = hf(pixel_values=X32).pooler_output
        assert rel(expected, ours.pre_logits(X32)) <= TOL
    # the same model's in-memory state dict (transformers 5's module names)
    again = create_model("ViT-Pico/8", num_classes=3, image_size=32, pretrained=hf.state_dict())
    with torch.no_grad():
        assert rel(expected, again.eval().pre_logits(X32)) <= TOL


def test_hugging_face_bit_folder(tmp_path):
    transformers = pytest.importorskip("transformers")

    config = transformers.BitConfig(
        layer_type="preactivation",
        depths=[1, 1, 1],
        hidden_sizes=[128, 256, 512],
        embedding_size=32,
        num_labels=4,
    )
    hf = fill_(transformers.BitForImageClassification(config)).eval()
    for m in hf.modules():  # HF's port departs as timm's: weight-std epsilon 1e-8
        if hasattr(m, "eps") and isinstance(m, torch.nn.Conv2d):
            m.eps = 1e-10
    hf.save_pretrained(tmp_path)
    ours = load_pretrained("BiT-R11x0.5", tmp_path).eval()
    with torch.no_grad():
        assert rel(hf(pixel_values=X32).logits, ours(X32)) <= TOL


# ----------------------------------------------------------------------------- heads


@pytest.fixture(scope="module")
def pico(tmp_path_factory):
    """A ViT-Pico/8 checkpoint (timm layout, 10 classes) at 32 px."""
    ref = _timm(
        timm.models.vision_transformer.VisionTransformer,
        "ViT",
        **vit_kwargs("ViT-Pico/8", 32),
        num_classes=10,
    )
    path = tmp_path_factory.mktemp("pico") / "pico.pth"
    torch.save(ref.state_dict(), path)
    return ref, path


def test_head_kept_dropped_or_renewed(pico):
    ref, path = pico
    kept = load_pretrained("ViT-Pico/8", path)
    torch.testing.assert_close(kept.head.classifier.weight, ref.head.weight)
    dropped = load_pretrained("ViT-Pico/8", path, head="drop", num_classes=3)
    assert dropped.head.dense is None and dropped.head.classifier.out_features == 3
    assert not dropped.head.classifier.weight.any() and not dropped.head.classifier.bias.any()
    renewed = create_model("ViT-Pico/8", num_classes=7, image_size=32, pretrained=path)
    assert torch.all(renewed.head.classifier.bias == -10.0)  # the paper's fresh pre-training head
    same = create_model("ViT-Pico/8", num_classes=10, image_size=32, pretrained=path)
    torch.testing.assert_close(same.head.classifier.bias, ref.head.bias)
    torch.testing.assert_close(dropped.blocks[0].attn.qkv.weight, ref.blocks[0].attn.qkv.weight)
    # a state dict in memory is copied, not shared: training ours leaves the source alone
    mine = load_pretrained("ViT-Pico/8", ref.state_dict())
    with torch.no_grad():
        mine.blocks[0].attn.qkv.weight.add_(1.0)
    assert not torch.equal(mine.blocks[0].attn.qkv.weight, ref.blocks[0].attn.qkv.weight)


def test_position_embedding_resized_for_another_resolution(pico):
    ref, path = pico
    model = load_pretrained("ViT-Pico/8", path, head="drop", num_classes=2, image_size=64)
    expected = resize_pos_embed(ref.pos_embed.detach(), new_grid=(8, 8), num_prefix_tokens=1)
    torch.testing.assert_close(model.pos_embed.detach(), expected)
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 2)


@pytest.mark.parametrize(
    "name, kwargs, match",
    [
        (
            "ViT-Pico/4",
            {},
            r"'patch_embed.proj.weight' \(our 'patch_embed.weight'\) has shape \(64, 3, 8, 8\) in the checkpoint, \(64, 3, 4, 4\) in the model",
        ),
        ("ViT-Nano/8", {}, r"'cls_token' has shape \(1, 1, 64\) in the checkpoint, \(1, 1, 128\)"),
        (
            "ViT-Pico/8",
            {"num_classes": 4},
            r"'head.weight' \(our 'head.classifier.weight'\) has shape \(10, 64\) in the checkpoint, \(4, 64\)",
        ),
        ("ViT-Pico/8", {"pool": "gap"}, "pool='gap', but the checkpoint has a class token"),
        ("ViT-Pico/8", {"head": "drop"}, "give num_classes"),
        ("ViT-Pico/8", {"head": "new"}, "valid: 'keep', 'drop'"),
        ("BiT-R50x1", {}, "not a ResNet checkpoint in any known layout"),
        ("R50x1+ViT-S/16", {}, "not a Hybrid checkpoint"),
    ],
)
def test_mismatch_names_the_first_key_and_both_shapes(pico, name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_pretrained(name, pico[1], **kwargs)


def test_missing_key_is_named(pico):
    sd = torch.load(pico[1], weights_only=True)
    truncated = {k: v for k, v in sd.items() if not k.startswith("blocks.3.")}
    with pytest.raises(PretrainedError, match=r"it has no 'blocks.3.norm1.weight' \(shape \(64,\)"):
        load_pretrained("ViT-Pico/8", truncated)


# ----------------------------------------------------------------------------- safety


class _Payload:
    def __reduce__(self):
        return (print, ("this ran",))


def test_pickles_that_need_code_are_refused(tmp_path, capsys):
    path = tmp_path / "evil.pth"
    torch.save({"weights": torch.zeros(2), "payload": _Payload()}, path)
    with pytest.raises(PretrainedError, match=r"refused to read .*weights_only=True"):
        read_weights(path)
    assert "this ran" not in capsys.readouterr().out


def test_npz_object_arrays_are_refused(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, embedding=np.array([{"a": 1}], dtype=object))
    with pytest.raises(PretrainedError, match="allow_pickle=False"):
        read_weights(path)


@pytest.mark.parametrize(
    "name, match",
    [
        ("missing.pth", "not found"),
        ("weights.h5", "valid: .safetensors, .npz"),
        ("empty", "holds none of"),
    ],
)
def test_bad_sources(tmp_path, name, match):
    path = tmp_path / name
    if name.endswith(".h5"):
        path.write_bytes(b"\x89HDF")
    elif name == "empty":
        path.mkdir()
    with pytest.raises((PretrainedError, FileNotFoundError), match=match):
        read_weights(path)


def test_export_layout_round_trips_through_timm_names():
    """Our state dict -> timm's names -> ours is the identity (every registry family)."""
    from vitscale.models.checkpoint_keys import to_vitscale

    for name in ("ViT-Pico/8", "BiT-R11x0.5", "R50x1+ViT-S/16"):
        with torch.device("meta"):
            model = create_model(name, num_classes=3, image_size=32, head="finetune")
        sd = {k: torch.randn(v.shape) for k, v in model.state_dict().items()}
        back = to_vitscale(from_vitscale(sd, parse(name).family), parse(name).family).state
        assert back.keys() == sd.keys()
        for k in sd:
            assert torch.equal(back[k], sd[k]), k
