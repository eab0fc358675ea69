"""The model zoo: every registry name builds, trains and matches its spec."""

from __future__ import annotations

import pytest
import torch

from vitscale.catalog import list_models, parse
from vitscale.families.vit import VIT_SIZES, ViTSpec
from vitscale.flops import count
from vitscale.models import create_model, resize_pos_embed
from vitscale.models.vit import Attention, reference_attention

from .helpers.models import REAL_PARAM_LIMIT, small_resolution

ALL = list_models()
SMALL = [n for n in ALL if count(n).params <= REAL_PARAM_LIMIT]
LARGE = [n for n in ALL if n not in SMALL]
ATTENTION = [n for n in SMALL if parse(n).family in ("ViT", "Hybrid")]


def _feature_width(name: str) -> int:
    spec = parse(name)
    if spec.family == "ResNet":
        return spec.out_channels
    return (spec.vit if spec.family == "Hybrid" else spec).width


@pytest.mark.parametrize("name", SMALL)
def test_forward_backward_real(name):
    res = small_resolution(name)
    model = create_model(name, num_classes=7, image_size=res)
    x = torch.randn(2, 3, res, res)
    logits = model(x)
    assert logits.shape == (2, 7)
    assert torch.isfinite(logits).all()
    assert model.pre_logits(x).shape == (2, _feature_width(name))
    # zero-initialised parameters (head kernel, the hybrid's last GN scale per unit) block
    # gradients by design at step 0; perturb them so the test checks the graph itself
    with torch.no_grad():
        for p in model.parameters():
            if not p.any():
                p.normal_(std=0.1)
    model(x).logsumexp(-1).sum().backward()
    missing = [
        n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()
    ]
    assert not missing, f"no finite gradient for {missing[:5]}"
    # A Mixer's token-mixing output bias adds one constant to every channel of a token,
    # which every LayerNorm after it removes: its gradient is zero but for rounding.
    silent = [
        n
        for n, p in model.named_parameters()
        if p.grad.abs().sum() == 0 and not n.endswith("mlp_tokens.fc2.bias")
    ]
    assert not silent, f"zero gradient for {silent[:5]}"


@pytest.mark.parametrize("name", LARGE)
def test_forward_backward_meta(name):
    res = small_resolution(name)
    with torch.device("meta"):
        model = create_model(name, num_classes=7, image_size=res)
        x = torch.randn(2, 3, res, res)
    logits = model(x)
    assert logits.shape == (2, 7)
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", ATTENTION)
def test_sdpa_equals_reference_attention(name):
    res = small_resolution(name)
    model = create_model(name, num_classes=5, image_size=res, head="finetune").eval()
    torch.nn.init.normal_(model.head.classifier.weight)
    x = torch.randn(2, 3, res, res)
    with torch.no_grad():
        fused = model(x)
        for m in model.modules():
            if isinstance(m, Attention):
                m.attend = reference_attention
        plain = model(x)
    torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-5)


def test_reference_attention_matches_sdpa_directly():
    q, k, v = torch.randn(3, 2, 4, 9, 16).unbind(0)
    torch.testing.assert_close(
        torch.nn.functional.scaled_dot_product_attention(q, k, v), reference_attention(q, k, v)
    )


@pytest.mark.parametrize("name", ["ViT-Pico/4", "BiT-R11x0.5", "R50x1+ViT-S/32"])
def test_paper_heads_and_init(name):
    res = small_resolution(name)
    pre = create_model(name, num_classes=11, image_size=res, head="pretrain")
    fine = create_model(name, num_classes=11, image_size=res, head="finetune")
    assert torch.all(pre.head.classifier.weight == 0)
    assert torch.all(pre.head.classifier.bias == -10.0)
    assert torch.all(fine.head.classifier.weight == 0) and torch.all(fine.head.classifier.bias == 0)
    x = torch.randn(3, 3, res, res)
    assert torch.all(fine(x) == 0)  # zero-initialised fine-tuning head
    if parse(name).family != "ResNet":
        assert pre.head.dense is not None and fine.head.dense is None
        feats = pre.pre_logits(x)
        assert feats.abs().max() <= 1.0  # tanh pre-logits
        assert torch.all(pre.cls_token == 0)
        assert 0.015 < pre.pos_embed.std() < 0.025


def test_vit_init_matches_official_scheme():
    model = create_model("ViT-Ti/16", num_classes=3, image_size=64)
    block = model.blocks[0]
    d = model.width
    bound = (6 / (2 * d)) ** 0.5
    q = block.attn.qkv.weight[:d]
    assert q.abs().max() <= bound and q.abs().max() > 0.9 * bound
    assert block.mlp.fc1.bias.std() < 1e-5 and block.mlp.fc1.bias.abs().sum() > 0


@pytest.mark.parametrize("pool", ["token", "gap"])
def test_gap_pool_drops_class_token(pool):
    model = create_model("ViT-Pico/8", num_classes=3, image_size=32, pool=pool)
    assert (model.cls_token is None) == (pool == "gap")
    assert model.pos_embed.shape[1] == 16 + (pool == "token")
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 3)


def test_resize_pos_embed_identity_and_class_token():
    pos = torch.randn(1, 1 + 16, 8)
    assert torch.equal(resize_pos_embed(pos, new_grid=(4, 4), num_prefix_tokens=1), pos)
    bigger = resize_pos_embed(pos, new_grid=(6, 6), num_prefix_tokens=1)
    assert bigger.shape == (1, 1 + 36, 8)
    assert torch.equal(bigger[:, 0], pos[:, 0])
    # bilinear interpolation keeps a constant field constant and a linear ramp linear
    const = torch.full((1, 16, 3), 2.5)
    torch.testing.assert_close(
        resize_pos_embed(const, new_grid=(8, 8), num_prefix_tokens=0), torch.full((1, 64, 3), 2.5)
    )
    ramp = torch.arange(4.0).repeat(4).reshape(1, 16, 1)  # value = column index
    out = resize_pos_embed(ramp, new_grid=(4, 8), num_prefix_tokens=0).reshape(4, 8)
    assert torch.all(out[:, 1:] >= out[:, :-1]) and torch.allclose(out[0], out[3])


@pytest.mark.parametrize("name", ["ViT-Pico/4", "R50x1+ViT-S/16"])
def test_load_state_dict_across_resolutions(name):
    small = small_resolution(name)
    src = create_model(name, num_classes=4, image_size=small, head="finetune")
    dst = create_model(name, num_classes=4, image_size=2 * small, head="finetune")
    dst.load_state_dict(src.state_dict())
    assert dst.pos_embed.shape[1] == 1 + (dst.grid**2)
    torch.testing.assert_close(dst.pos_embed[:, 0], src.pos_embed[:, 0])
    expected = resize_pos_embed(
        src.pos_embed.detach(), new_grid=(dst.grid, dst.grid), num_prefix_tokens=1
    )
    torch.testing.assert_close(dst.pos_embed.detach(), expected)
    assert torch.isfinite(dst(torch.randn(1, 3, 2 * small, 2 * small))).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(name="ViT-Q/16"), "valid sizes: Femto, Pico, Nano, Ti, S, b, B, L, H"),
        (dict(name="ViT-B/15"), "patch sizes that do: 1, 2, 4, 7, 8, 14, 16"),
        (dict(name="BiT-R34x1"), "valid depths: 11, 20, 50, 101, 152, 200"),
        (dict(name="BiT-R50x5"), "valid widths: x0.5, x1, x2, x3, x4"),
        (dict(name="R50x1+ViT-B/8"), "valid: 16, 32"),
        (dict(name="EfficientNet-B0"), "valid forms"),
        (dict(name="ViT-B/16", head="linear"), "valid: 'pretrain', 'finetune'"),
        (dict(name="ViT-B/16", pool="max"), "valid: 'token', 'gap'"),
        (dict(name="BiT-R50x1", pool="token"), "pool by global average only; valid: 'gap'"),
        (dict(name="BiT-R50x1", pre_logits=True), "no pre-logits layer; valid: null, false"),
    ],
)
def test_clear_errors(kwargs, match):
    kwargs = {"num_classes": 3, "image_size": 224} | kwargs
    with pytest.raises(ValueError, match=match.replace("+", r"\+")), torch.device("meta"):
        create_model(kwargs.pop("name"), **kwargs)


def test_width_not_divisible_by_heads():
    with pytest.raises(ValueError, match="not divisible by 3 heads"):
        Attention(dim=64, heads=3)


@pytest.mark.parametrize("name", ALL)
def test_names_roundtrip(name):
    spec = parse(name)
    assert spec.name == name
    assert parse(spec.name) == spec


@pytest.mark.parametrize(
    "alias, canonical",
    [("ResNet50x1", "BiT-R50x1"), ("ResNet152x2", "BiT-R152x2"), ("BiT-R11x0.50", "BiT-R11x0.5")],
)
def test_paper_spelling_alias(alias, canonical):
    assert parse(alias) == parse(canonical)


def test_vit_b_halved_is_b_with_half_dimensions():
    half, full = VIT_SIZES["b"], VIT_SIZES["B"]
    assert (half.width, half.mlp_dim) == (full.width // 2, full.mlp_dim // 2)
    assert half.depth == full.depth and half.heads == full.heads
    assert isinstance(parse("ViT-b/32"), ViTSpec)


def test_weight_standardisation_is_per_output_channel():
    """BiT's StdConv2d: the kernel is standardised to zero mean and unit variance per output
    channel before the convolution (Qiao et al. 2019), whatever its raw scale."""
    from vitscale.models.resnet import StdConv2d

    conv = StdConv2d(8, 16, 3, padding=1)
    with torch.no_grad():
        conv.weight.mul_(7.0).add_(3.0)
    w = conv.weight.detach()
    mean = w.mean(dim=(1, 2, 3), keepdim=True)
    std = w.var(dim=(1, 2, 3), keepdim=True, correction=0).add(conv.eps).sqrt()
    x = torch.randn(2, 8, 9, 9)
    expected = torch.nn.functional.conv2d(x, (w - mean) / std, padding=1)
    torch.testing.assert_close(conv(x), expected, rtol=1e-4, atol=1e-4)


class _BothConvFamilies(torch.nn.Module):
    """BiT (its stem and one pre-activation unit, GN-ReLU, pooling, head) and the hybrid's
    trunk (the official post-activation stem and one unit, "SAME" padding, the 1x1 patch
    embedding on its output): every convolution and norm of BiT-R*x* and R50x*+ViT-* (the
    hybrid's transformer is the ViT's), in one graph that inductor compiles in a minute on
    2 cores."""

    def __init__(self) -> None:
        import dataclasses

        from vitscale.models.resnet import ResNetTrunk, ResNetV2

        super().__init__()
        bit = parse("BiT-R11x0.5")
        self.bit = ResNetV2(spec=dataclasses.replace(bit, layers=(1,)), num_classes=10)
        trunk = dataclasses.replace(parse("R50x1+ViT-Femto/16").resnet, layers=(1,))
        self.trunk = ResNetTrunk(trunk)
        self.embed = torch.nn.Conv2d(trunk.out_channels, 10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.bit(x), self.embed(self.trunk(x)).mean(dim=(2, 3))])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_channels_last_matches_eager_nchw(backend):
    """``train.compile`` with ``train.channels_last`` (the GPU default for ResNets and
    hybrids) computes what the eager NCHW model does, forward and backward, for BiT and the
    hybrid. The weight standardisation's flattening must stay a view of a channels-last
    kernel: a copy there made the compiled backward fail ("view size is not compatible
    ...") under aot_eager. In float64, so that no ReLU input lies within float32's rounding
    of zero (one that did flipped a gradient element between the two memory layouts)."""
    from .helpers.models import fill_

    def build():
        return fill_(_BothConvFamilies(), seed=0).double()

    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    labels = torch.tensor([0, 3, 5, 9, 1, 3, 5, 9])  # BiT's batch, then the trunk's

    def loss_and_grads(model, inputs, forward):
        loss = torch.nn.functional.cross_entropy(forward(inputs), labels)
        loss.backward()
        return loss.detach(), {k: p.grad for k, p in model.named_parameters()}

    eager = build()
    want, want_grads = loss_and_grads(eager, x, eager)
    nhwc = build().to(memory_format=torch.channels_last)
    assert any(p.ndim == 4 and not p.is_contiguous() for p in nhwc.parameters())
    torch._dynamo.reset()
    compiled = torch.compile(nhwc, backend=backend, fullgraph=True)
    # inductor without vector code (the same graph, half the compile time on 2 cores)
    with torch._inductor.config.patch({"cpp.simdlen": 1}):
        got, got_grads = loss_and_grads(
            nhwc, x.contiguous(memory_format=torch.channels_last), compiled
        )
    torch.testing.assert_close(got, want, rtol=1e-10, atol=0)
    for name, grad in want_grads.items():
        torch.testing.assert_close(
            got_grads[name], grad, rtol=1e-8, atol=1e-12, msg=lambda m, name=name: f"{name}: {m}"
        )
