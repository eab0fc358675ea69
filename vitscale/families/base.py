"""What every model family answers, and the two walks its layers are counted with.

A family is one spec class (a frozen dataclass, one module under :mod:`vitscale.families`)
that says everything about its models without torch: its name grammar and size table, the
resolutions it tiles, its head rules, its parameters and multiply-adds (:class:`Tally`, the
paper's convention, :mod:`vitscale.flops`), the bytes autograd saves for it
(:class:`Saved`, :mod:`vitscale.memory`), its recipe defaults, timm's name for it, and where
its ``nn.Module`` is (``builder``). Everything else asks the spec; nothing outside a
family's module tests which family a model is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

JFT_LR = 1e-3  # models the paper did not train on JFT (docs/protocol.md)
GN_GROUPS = 32
POOLS = {"token": "the class token", "gap": "global average"}  # model.pool


def choices(values) -> str:
    return ", ".join(str(v) for v in values)


@dataclass(frozen=True)
class Build:
    """What ``create_model`` is given besides the name: the resolution and the head."""

    size: int  # image side, px
    num_classes: int
    head: str  # "pretrain" or "finetune"
    pool: str
    pre_logits: bool
    dropout: float = 0.0
    stochastic_depth: float = 0.0  # the last residual block's rate: drop_rates


def drop_rates(rate: float, blocks: int) -> list[float]:
    """Each of ``blocks`` residual blocks' probability of being skipped for an example in
    training (stochastic depth, Huang et al. 2016): 0 at the first, linear in depth to
    ``rate`` at the last, as timm's ``drop_path_rate`` for ViT and ResNet-v2 (the AugReg
    runs of Steiner et al. 2021 set 0.1)."""
    return [rate * i / max(blocks - 1, 1) for i in range(blocks)]


class Family:
    """The questions the registry asks a spec; the defaults are the common answers.

    Every family also answers: ``parse(name)`` (classmethod: its spec, or None for a name
    not in its grammar), ``listed()`` (classmethod: the names tests are parametrised over
    and the figures use), ``columns()`` (``(size, patch)`` as result tables show them;
    patch: pixels per token side), ``check_resolution(image_size)`` (``ValueError`` when it
    cannot tile it), ``smallest_resolution(at_least)``, ``count(t, at)`` (walk the layers
    ``create_model`` builds into a :class:`Tally`) and ``saved(s, at, b)`` (walk the tensors
    autograd keeps for ``model(images)`` into :class:`Saved`).
    """

    name: str

    family: ClassVar[str]  # Table 6's family column, the figures' colour
    grammar: ClassVar[str]  # the names it parses, for the message on an unknown name
    builder: ClassVar[str]  # "module:function" that builds its nn.Module (vitscale.models)
    convolutional: ClassVar[bool] = False  # a convolution trunk (channels-last pays on a GPU)
    pools: ClassVar[tuple[str, ...]] = ("gap",)  # the first is the default
    pre_logits_layer: ClassVar[bool] = False  # the pre-training head's tanh layer exists
    tolerance: ClassVar[float] = 0.02  # agreement with paper Table 6's compute

    def at(
        self,
        size: int,
        *,
        num_classes: int,
        head: str,
        pool: str | None = None,
        pre_logits: bool | None = None,
        dropout: float = 0.0,
        stochastic_depth: float = 0.0,
    ) -> Build:
        """The build ``create_model`` makes of these arguments: ``None`` picks the
        family's default (its first pool; the pre-logits layer where it has one)."""
        pre_logits = pre_logits is not False and self.pre_logits_layer
        pool = pool or self.pools[0]
        return Build(size, num_classes, head, pool, pre_logits, dropout, stochastic_depth)

    def head_problems(self, *, pool: str | None, pre_logits: bool | None) -> list[str]:
        """Head settings the architecture has no part for, each as ``"key: why"``."""
        problems = []
        if pool is not None and pool not in self.pools:
            how = " or ".join(POOLS[p] for p in self.pools)
            problems.append(
                f"pool: {self.family} models pool by {how} only; "
                f"valid: {choices(map(repr, self.pools))}"
            )
        if pre_logits and not self.pre_logits_layer:
            problems.append(
                f"pre_logits: {self.family} has no pre-logits layer; valid: null, false"
            )
        return problems

    def jft_lr(self) -> float:
        """Base learning rate on JFT-300M (paper Appendix B.1, Table 3)."""
        return JFT_LR

    def timm(self, *, image_size: int, pool: str | None) -> tuple[str, dict]:
        """``(timm architecture, model_args)`` that build this model in timm."""
        raise ValueError(f"timm has no architecture that builds {self.name}")


def size_of(table: dict, family: str, size: str, patch: int, name: str):
    """``table[size]`` for a name ``family-size/patch``; ``ValueError`` naming the valid
    sizes, or for a patch below 1."""
    if size not in table:
        raise ValueError(
            f"unknown {family} size {size!r} in {name!r}; valid sizes: {choices(table)}"
        )
    if patch < 1:
        raise ValueError(f"patch size must be a positive integer, got {patch} in {name!r}")
    return table[size]


class Patches:
    """A model that cuts the image into ``patch`` x ``patch`` tokens (ViT, Mixer)."""

    name: str
    size: str
    patch: int

    def columns(self) -> tuple[str, int | None]:
        return self.size, self.patch

    def check_resolution(self, image_size: int) -> None:
        if image_size % self.patch:
            divisors = [p for p in range(1, image_size + 1) if image_size % p == 0]
            raise ValueError(
                f"{self.name}: patch size {self.patch} does not divide resolution {image_size}; "
                f"patch sizes that do: {choices(divisors)}"
            )

    def smallest_resolution(self, at_least: int) -> int:
        return self.patch * max(1, -(-at_least // self.patch))


# --------------------------------------------------------------------------- geometry

# TensorFlow's "SAME" padding. The official hybrid trunk (google-research/
# vision_transformer, ``models_vit.py`` and ``models_resnet.py``) is written in flax, whose
# convolutions and pools default to ``padding="SAME"``: the output has ``ceil(size /
# stride)`` positions and the padding this needs is split with the odd pixel at the *end*.
# For a stride-2 layer on an even input that is (k - 2) // 2 before and one more after,
# e.g. (2, 3) for the 7x7 root convolution and (0, 1) for a 3x3: not PyTorch's symmetric
# ``padding=k // 2``.


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """``(before, after)`` padding of one axis of ``size`` for TF/flax "SAME"."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def conv_out(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


# --------------------------------------------------------------------------- compute


def _valid_taps(size: int, k: int, stride: int, pad: int, out: int) -> int:
    """Kernel taps, summed over output positions along one axis, that land on the input."""
    return sum(min(k, size + pad - o * stride) - max(0, pad - o * stride) for o in range(out))


class Tally:
    """Parameters and forward multiply-adds while walking a model layer by layer: ``macs``
    every kernel tap (what ``FlopCounterMode`` measures), ``paper_macs`` without the taps
    that land on zero padding (the paper's count; see :mod:`vitscale.flops`)."""

    def __init__(self) -> None:
        self.params = self.macs = self.paper_macs = 0

    def conv(
        self,
        cin: int,
        cout: int,
        k: int,
        *,
        size: int,
        stride: int = 1,
        pad: int = 0,
        bias: bool = False,
    ) -> int:
        out = conv_out(size, k, stride, pad)
        self.params += k * k * cin * cout + (cout if bias else 0)
        self.macs += out * out * k * k * cin * cout
        self.paper_macs += _valid_taps(size, k, stride, pad, out) ** 2 * cin * cout
        return out

    def dense(self, fin: int, fout: int, *, tokens: int = 1) -> None:
        self.params += fin * fout + fout
        self.add_macs(tokens * fin * fout)

    def add_macs(self, n: int) -> None:
        self.macs += n
        self.paper_macs += n

    def norm(self, channels: int) -> None:  # LayerNorm / GroupNorm: scale and bias
        self.params += 2 * channels

    def head(self, width: int, num_classes: int, head: str, *, pre_logits: bool) -> None:
        if head == "pretrain" and pre_logits:
            self.dense(width, width)
        self.dense(width, num_classes)


# --------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class Dtypes:
    """Bytes per element autocast gives what a layer saves."""

    compute: int  # what a matmul or convolution saves of its input (autocast's cast copy)
    norm: int  # GroupNorm's saved input and its output
    mask: int | None  # a dropout mask element; None: the dropped tensor's dtype


class Saved:
    """Saved tensors: bytes per example, bytes once per forward (weight copies), the largest."""

    def __init__(self) -> None:
        self.per_example = 0
        self.constant = 0
        self.largest = 0

    def act(self, elements: int, nbytes: int) -> None:
        size = elements * nbytes
        self.per_example += size
        self.largest = max(self.largest, size)

    def gn_stats(self) -> None:  # GroupNorm's mean and rstd per (example, group), fp32
        self.act(2 * GN_GROUPS, 4)

    def ln(self, tokens: int, width: int, nbytes: int = 4) -> None:  # input, mean and rstd
        self.act(tokens * width, nbytes)
        self.act(2 * tokens, 4)

    def weight_copy(self, elements: int, nbytes: int) -> None:
        self.constant += elements * nbytes

    def classifier(self, width: int, num_classes: int, b: Dtypes) -> None:
        """The classifier's input (or its cast) and its weight's cast."""
        self.act(width, b.compute)
        if b.compute != 4:
            self.weight_copy(width * num_classes, b.compute)
