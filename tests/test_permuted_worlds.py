"""The glyph world with its pixels moved (:mod:`vitscale.data.synthetic.permuted`)
and the ViT's invariance to sigma + tau, the control's reason to exist.

**Why a ViT is invariant to sigma + tau** (8x8 patches moved by one permutation sigma, the
pixels inside every patch by one permutation tau). The ViT's patch embedding is linear on
each patch (a convolution with kernel = stride = 8: paper Eq. 1's ``x_p E``), so moving a
patch's 192 inputs by tau is undone by moving the embedding's input columns by tau: every
token is the same vector, at the place sigma sent its patch. The position embeddings are
learned and initialised i.i.d. (``N(0, 0.02)`` per entry): moving their rows by sigma is
as probable an initialisation as the original, and each token still gets its own. After
that nothing depends on the order of the tokens (LayerNorm and the MLP act per token,
attention is equivariant to their order, the class token is read out), so the loss is the
same, the gradients are the moved gradients, and AdamW (element-wise, with global-norm
clipping) keeps the moved parameters moved, step after step: the run on the sigma + tau
world from the moved initialisation *is* the glyph world's run, to float rounding.

Each condition matters, and the test shows it: a convolutional stem mixes pixels across
patch borders before the patch embedding, so no reordering of weights undoes the move; 2-D
sin-cos position embeddings are a fixed function of the grid position, so there is nothing
to move, and they tell the model which tokens were neighbours.
"""

from __future__ import annotations

import copy
import hashlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from vitscale.catalog import parse
from vitscale.cli import main
from vitscale.config.recipes import choose
from vitscale.data import build_dataset, build_fewshot
from vitscale.data.synthetic.permuted import PATCH, TASKS, patch_permutations, source_pixels
from vitscale.kinds import PATCH_WORLD, PERCENTS, control_worlds, world_name
from vitscale.models import create_model
from vitscale.models.vit import VisionTransformer

SIZE = 32
WORLDS = [world_name(p) for p in PERCENTS] + [PATCH_WORLD]


def moved(world: str, size: int = SIZE) -> np.ndarray:
    """The pixel positions a world moves."""
    return np.nonzero(source_pixels(world, size) != np.arange(size * size))[0]


@pytest.mark.parametrize("world", WORLDS)
def test_a_moved_world_is_the_glyph_world_gathered_upstream_and_transfer_alike(world):
    source = torch.from_numpy(source_pixels(world, SIZE))
    assert sorted(source.tolist()) == list(range(SIZE * SIZE))  # a permutation: nothing lost
    for task, base in ((world, "synthetic"), (f"{world}-glyphs", "synthetic-glyphs")):
        ours = build_dataset(task, "test", image_size=SIZE).__getitems__([0, 5, 7])
        glyphs = build_dataset(base, "test", image_size=SIZE).__getitems__([0, 5, 7])
        flat = rearrange(glyphs.images, "b c h w -> b c (h w)")[:, :, source]
        assert torch.equal(ours.images, flat.reshape(ours.images.shape))
        assert torch.equal(ours.targets, glyphs.targets)
        assert (
            TASKS[task].world == world and TASKS[task].num_classes == TASKS[task].base.num_classes
        )
    assert len(build_dataset(world, "train", image_size=SIZE, subset=384, seed=1)) == 384
    shots = build_fewshot(f"{world}-glyphs", shots=5, seed=1, image_size=SIZE)
    assert np.bincount(shots.targets_of(np.arange(len(shots)))).tolist() == [5] * 20
    assert choose(world) == "synthetic"  # the glyph world's recipe


def test_levels_move_their_fraction_of_pixels_and_nest():
    n = SIZE * SIZE
    previous: set[int] = set()
    for percent in PERCENTS:
        now = set(moved(world_name(percent)).tolist())
        assert abs(len(now) - percent * n / 100) <= 4  # a few moved pixels land home
        assert len(previous - now) <= 4  # a higher level moves what a lower one moves
        previous = now
    assert control_worlds() == {
        "synthetic": (0.0, "synthetic-glyphs"),
        **{world_name(p): (p / 100, f"{world_name(p)}-glyphs") for p in PERCENTS},
        PATCH_WORLD: (None, f"{PATCH_WORLD}-glyphs"),
    }


def test_sigma_tau_moves_whole_patches_with_one_order_inside():
    grid = SIZE // PATCH
    source = source_pixels(PATCH_WORLD, SIZE).reshape(grid, PATCH, grid, PATCH)
    sigma, tau = patch_permutations(SIZE)
    rows, cols = np.divmod(source, SIZE)
    for gy in range(grid):
        for gx in range(grid):
            patch = (rows[gy, :, gx] // PATCH) * grid + cols[gy, :, gx] // PATCH
            assert (patch == sigma[gy * grid + gx]).all()  # one input patch per output patch
            inside = (rows[gy, :, gx] % PATCH) * PATCH + cols[gy, :, gx] % PATCH
            assert inside.ravel().tolist() == tau.tolist()  # the same order in every patch
    assert len(moved(PATCH_WORLD)) > 0.95 * SIZE * SIZE
    with pytest.raises(ValueError, match="not a multiple of its 8-pixel patches"):
        source_pixels(PATCH_WORLD, 36)


# The permutations, pinned: a change here is a change to what the worlds are. Bump
# PERMUTATION_SEED in permuted.py on purpose and update these, never silently.
PERMUTATIONS = "5456ad54f4f61072fae7096b"


def test_permutations_are_pinned():
    h = hashlib.sha256()
    for world in WORLDS:
        for size in (32, 64):
            h.update(source_pixels(world, size).astype(np.int64).tobytes())
    assert h.hexdigest()[:24] == PERMUTATIONS


def test_data_list_and_preview_show_the_moved_worlds(tmp_path, capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    for world in WORLDS:
        assert f"\n{world}\n" in out and f"\n{world}-glyphs\n" in out
    png = tmp_path / "moved.png"
    args = ["data", "preview", PATCH_WORLD, "--out", str(png), "--rows", "2", "--cols", "2"]
    assert main([*args, "--image-size", "32"]) == 0
    assert png.stat().st_size > 0


# ---------------------------------------------------------------------------------- invariance


def sincos_2d(grid: int, width: int) -> torch.Tensor:
    """MoCo v3's / big_vision's fixed 2-D sin-cos position embedding, ``(grid * grid, width)``."""
    y, x = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    omega = 1.0 / 10_000 ** (torch.arange(width // 4) / (width // 4))
    angles = [c.flatten()[:, None].double() * omega[None, :] for c in (x, y)]
    return torch.cat([f(a) for a in angles for f in (torch.sin, torch.cos)], dim=1)


def femto(**stem) -> VisionTransformer:
    """The study's ViT-Femto/8 in float64 (so "the same run" can be held to 1e-10), or,
    given a ``stem``, the same model built with it."""
    torch.manual_seed(0)
    if not stem:
        return create_model(
            "ViT-Femto/8", num_classes=256, image_size=SIZE, pre_logits=False
        ).double()
    s = parse("ViT-Femto/8")
    return VisionTransformer(
        image_size=SIZE, patch_size=s.patch, width=s.width, depth=s.depth, mlp_dim=s.mlp_dim,
        heads=s.heads, num_classes=256, representation=False, **stem,
    ).double()  # fmt: skip


def move(model: VisionTransformer) -> VisionTransformer:
    """The initialisation moved by sigma + tau: the patch embedding's input columns by tau,
    the patch tokens' position embeddings by sigma (the class token's stays)."""
    sigma, tau = (torch.from_numpy(a) for a in patch_permutations(SIZE))
    twin = copy.deepcopy(model)
    with torch.no_grad():
        w = model.patch_embed.weight
        twin.patch_embed.weight.copy_(w.flatten(2)[:, :, tau].reshape(w.shape))
        if model.pos_embed.requires_grad:  # learned: move it; fixed: a function of the grid
            twin.pos_embed[:, 1:] = model.pos_embed[:, 1:, :][:, sigma]
    return twin


@pytest.fixture(autouse=True)
def one_thread():
    """One thread: float64 matrix products this small only lose time to a second one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def losses(model: nn.Module, world: str, steps: int = 4) -> list[float]:
    """A few steps of the study's optimiser (AdamW, lr 4e-3, wd 0.1, clip 1) on ``world``."""
    data = build_dataset(world, "train", image_size=SIZE, subset=4 * 32, seed=0)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=4e-3, weight_decay=0.1)
    out = []
    for step in range(steps):
        x, y = data.__getitems__(list(range(32 * step, 32 * (step + 1))))
        loss = F.cross_entropy(model(x.double()), y)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return out


def apart(a: list[float], b: list[float]) -> float:
    """The largest relative difference of two runs' losses, step by step."""
    return max(abs(x - y) / abs(x) for x, y in zip(a, b, strict=True))


# The same run: float64 rounding (sums taken in another order). Another run: the 4 steps'
# losses differ by 1.6e-3 to 3.6e-3 (relative) when a condition is broken.
SAME, OTHER = 1e-12, 1e-4


def test_a_vit_under_sigma_tau_from_the_moved_init_runs_as_in_the_glyph_world():
    model = femto()
    glyphs = losses(copy.deepcopy(model), "synthetic")
    assert glyphs[0] == pytest.approx(math.log(256))  # zero head: the first loss says nothing
    assert len(set(glyphs)) == len(glyphs)  # every step changed the model
    assert apart(losses(move(model), PATCH_WORLD), glyphs) < SAME
    # the moved initialisation is what makes it the same run
    assert apart(losses(copy.deepcopy(model), PATCH_WORLD), glyphs) > OTHER


def test_a_convolutional_stem_breaks_the_invariance():
    model = femto(stem=nn.Conv2d(3, 3, kernel_size=3, padding=1).double())
    glyphs = losses(copy.deepcopy(model), "synthetic")
    assert apart(losses(move(model), PATCH_WORLD), glyphs) > OTHER


def test_sincos_position_embeddings_break_the_invariance():
    model = femto()
    with torch.no_grad():
        model.pos_embed[:, 1:] = sincos_2d(SIZE // PATCH, model.width)
    model.pos_embed.requires_grad_(False)
    glyphs = losses(copy.deepcopy(model), "synthetic")
    assert apart(losses(move(model), PATCH_WORLD), glyphs) > OTHER
