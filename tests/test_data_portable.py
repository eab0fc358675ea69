"""The embedded worlds' pixels are the same bits on every x86-64 CPU.

A dataset whose pixels depend on the CPU is a different dataset on each node of a
cluster, and pins made on one machine fail on the next. Rendering therefore uses only
operations whose result IEEE 754 specifies exactly, each rounded once. Three guards beside
the pins: the two operations written by hand against an oracle, every torch function a
render calls checked against the list of exactly specified ones, and the same pixels at
every CPU capability torch can run on this machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from vitscale.data.embedded import EMBEDDED
from vitscale.data.scenes import render as scenes
from vitscale.data.scenes.world import TASKS as SCENE_TASKS
from vitscale.data.synthetic import render as synthetic

# Pixels of each world's WORLD_SEED (vocabulary.py, scenes/world.py), pinned: a change here
# means a change to what the dataset *is*: bump that WORLD_SEED on purpose and update these,
# never silently. A failure on another machine alone means rendering is not bit-exact
# across CPUs, which the tests below name the cause of.
PIXELS = {
    "synthetic": "cb6e824833e2665df141e660",
    "synthetic-glyphs": "c40620226e659438032b3888",
    "synthetic-pairs": "e23ae73930164292a6ecf2b0",
    "synthetic-textures": "d09c112f2063efed8bd007ea",
    "scenes": "e6fcdc42432645cbe186774f",
    "scenes-arrangements": "461b3f966328973ce8eeca2f",
    "scenes-count": "98c225cf8db8aae9e7ae9b41",
    "scenes-parts": "c8790750cab5b75f507a11ac",
    "scenes-same": "9144894a3de8be32a71f30a1",
}


def _draw(name: str, size: int, *, fused: bool = True) -> torch.Tensor:
    indices = np.arange(0, 800, 100)
    if name in SCENE_TASKS:
        return scenes.render(SCENE_TASKS[name], "test", indices, size).images
    return synthetic.render(EMBEDDED[name], "test", indices, size, fused=fused).images


def world_digest(name: str, *, sizes=(32, 61), fused: bool = True) -> str:
    """A world's test images 0, 100, ..., 700 at ``sizes``, hashed."""
    h = hashlib.sha256()
    for size in sizes:
        h.update(_draw(name, size, fused=fused).numpy().tobytes())
    return h.hexdigest()[:24]


def world_digests(*, fused: bool = True) -> dict[str, str]:
    """Every embedded world's, at 32 and 64 px (a patch-moved world needs multiples of 8)."""
    return {name: world_digest(name, sizes=(32, 64), fused=fused) for name in sorted(EMBEDDED)}


@pytest.mark.parametrize("name", sorted(PIXELS))
def test_world_pixels_are_pinned(name):
    assert world_digest(name) == PIXELS[name]


def test_the_square_root_is_correctly_rounded():
    """Every float32 in [1, 4), two binades: every mantissa at both exponent parities,
    so every positive normal input. The oracle: float64's sqrt (correctly rounded) rounded
    to float32, which is correctly rounded too (53 >= 2 * 24 + 2 bits)."""
    x = np.arange(np.float32(1).view(np.int32), np.float32(4).view(np.int32), dtype=np.int32)
    x = x.view(np.float32)
    oracle = np.sqrt(x.astype(np.float64)).astype(np.float32)
    ours = synthetic._sqrt(torch.from_numpy(x.copy())).numpy()
    wrong = np.flatnonzero(ours != oracle)
    assert wrong.size == 0, f"{wrong.size} inputs not correctly rounded, e.g. {x[wrong[:3]]}"


@pytest.mark.parametrize("size", [32, 61, 224])
def test_the_scenes_field_is_torchs_bicubic_upsampling(size):
    grid = np.random.default_rng(size).random((4, 5, 5))
    taps, weights = scenes._bicubic(5, size)
    ours = grid
    for axis in (2, 1):
        moved = np.moveaxis(ours, axis, -1)
        ours = np.moveaxis((moved[..., taps] * weights).sum(-1), -1, axis)
    theirs = F.interpolate(
        torch.from_numpy(grid)[:, None], size=(size, size), mode="bicubic", align_corners=False
    )
    np.testing.assert_allclose(ours, theirs[:, 0].numpy(), rtol=0, atol=1e-12)


# Torch functions whose result is the same bits on every CPU: each output element is one
# correctly rounded IEEE operation (or exact: comparisons, min/max, abs, sign, floor, moves).
_EXACT = {
    # arithmetic, each element one IEEE operation, or exact
    *("add", "add_", "sub", "sub_", "mul", "mul_", "div", "__rdiv__", "__rsub__", "neg_"),
    *("abs", "abs_", "sign", "floor", "clamp_", "maximum", "minimum", "max", "gt", "where"),
    # making, moving and indexing tensors
    *("arange", "empty", "zeros", "zeros_like", "reshape", "view", "permute", "expand"),
    *("flatten", "contiguous", "unbind", "unsqueeze", "__getitem__", "__setitem__"),
    *("gather", "scatter_", "index_select", "index_copy_", "nonzero", "pad", "to", "long"),
    *("numpy", "any", "__len__", "__bool__", "__int__", "dim", "device", "__get__"),
    # the scenes' sprites: nearest-neighbour copies of 0/1 bitmaps, then the mean of 64 of
    # them, which is exact in any order of summation
    *("interpolate(nearest)", "avg_pool2d"),
}
# What was measured to differ between CPUs, and why: named in the failure.
_NOT_PORTABLE = {
    "sqrt": "torch's CPU sqrt calls MKL's vector math (vsSqrt): accurate to 1 ulp, not "
    "correctly rounded, its kernel chosen by CPU model (an AMD EPYC and an Intel Xeon give "
    "other last bits); use vitscale.data.synthetic.render._sqrt",
    "interpolate(bicubic)": "its sums are contracted into fused multiply-adds at the avx2 "
    "and AVX512 capabilities, not at default; use an explicit numpy form "
    "(vitscale.data.scenes.render._bicubic)",
    "addcmul": "one rounding (fused) at the avx2 and AVX512 capabilities, two at default; "
    "write a * b + c",
}
_NOT_PORTABLE["sqrt_"] = _NOT_PORTABLE["sqrt"]
_UNKNOWN = "not known to be exact on every CPU: compare it at every capability, then list it"


class _Calls(TorchFunctionMode):
    """The torch functions called inside it, by name, with the interpolation modes."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name == "interpolate":
            name = f"interpolate({kwargs.get('mode', 'nearest')})"
        self.names.add(name)
        return func(*args, **kwargs)


@pytest.mark.parametrize("name", sorted(EMBEDDED))
def test_rendering_calls_only_exactly_specified_operations(name):
    with _Calls() as calls:
        _draw(name, 32, fused=False)
    unknown = sorted(calls.names - _EXACT)
    why = [f"{op}: {_NOT_PORTABLE.get(op, _UNKNOWN)}" for op in unknown]
    assert not why, f"{name} renders through operations whose bits depend on the CPU: {why}"


def test_same_pixels_at_every_cpu_capability():
    """The machine's own capability with the fused kernel, and every lower one torch can
    select (``ATEN_CPU_CAPABILITY``) on the torch path: the same bits. (MKL chooses its
    kernels by CPU model whatever this says: the operation list above guards that.)"""
    ours = world_digests()
    native = torch.backends.cpu.get_cpu_capability()
    lower = {"AVX512": ["avx2", "default"], "AVX2": ["default"]}.get(native, [])
    if not lower:
        pytest.skip(f"capability {native}: no lower one to compare with")
    code = "import json; from tests.test_data_portable import world_digests as d; "
    code += "print(json.dumps(d(fused=False)))"
    for capability in lower:
        env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "VITSCALE_FUSED_RENDER": "0"}
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env, cwd=Path(__file__).parents[1], capture_output=True, text=True, check=True,
        )  # fmt: skip
        theirs = json.loads(out.stdout.splitlines()[-1])
        differ = sorted(k for k in ours if ours[k] != theirs[k])
        assert not differ, f"at capability {capability} (here {native}) other pixels: {differ}"


# Shards written from an embedded world (PNG, lossless), read back by the shards loader:
# its pixels, pinned as the world's are.
SHARD_PIXELS = {
    "synthetic-glyphs": "92282df1e975584203a34b66",
    "scenes-count": "0df92aee5854c1e9dcdefe4a",
}


@pytest.mark.parametrize("world", sorted(SHARD_PIXELS))
def test_shards_of_an_embedded_world_are_pinned(tmp_path, world):
    from vitscale.data import build_dataset
    from vitscale.data.shards.write import shard_dataset

    shard_dataset(world, tmp_path, shard_size=16, max_examples=16, image_size=32, progress=False)
    ds = build_dataset(f"shards:{tmp_path}", "test", image_size=32)
    images = torch.stack([ds[i][0] for i in range(len(ds))])
    assert len(images) == 16
    assert hashlib.sha256(images.numpy().tobytes()).hexdigest()[:24] == SHARD_PIXELS[world]
