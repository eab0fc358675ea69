"""Stochastic depth (``model.stochastic_depth``): the per-block rates against timm's
``drop_path_rate`` rule, a skipped branch is the identity for that example, evaluation
and parameters unchanged, a run with it resumes exactly, and the cell ids of runs without
it stay."""

from __future__ import annotations

import pytest
import timm
import torch
from torchvision.ops import StochasticDepth

from vitscale.config import ConfigError, cell_id, resolve
from vitscale.models import create_model
from vitscale.models.vit import Block
from vitscale.train import Preempted, train

from .helpers.configs import tiny_config
from .helpers.runs import assert_same_run, signal_at, weights

RATE = 0.1


def _rates(model: torch.nn.Module) -> list[float]:
    """Each residual block's rate, in depth order (its branches share one)."""
    return [m.p for m in model.modules() if isinstance(m, StochasticDepth)]


def _timm_rates(model: torch.nn.Module) -> list[float]:
    """timm's rate of each residual block (its ``drop_path*`` modules; identity: 0)."""
    if hasattr(model, "stages"):  # ResNet-v2: every stage's blocks, in order
        blocks = [(b.drop_path,) for stage in model.stages for b in stage.blocks]
    else:  # ViT: one per branch, the same for both
        blocks = [(b.drop_path1, b.drop_path2) for b in model.blocks]
    rates = [[float(getattr(m, "drop_prob", 0.0)) for m in paths] for paths in blocks]
    assert all(len(set(r)) == 1 for r in rates)
    return [r[0] for r in rates]


@pytest.mark.parametrize(
    ("ours", "theirs", "size"),
    [
        ("ViT-Ti/16", "vit_tiny_patch16_224", 32),
        ("ViT-B/16", "vit_base_patch16_224", 32),
        ("BiT-R50x1", "resnetv2_50x1_bit", 64),
    ],
)
def test_each_blocks_rate_is_timms_drop_path_rule(ours: str, theirs: str, size: int) -> None:
    with torch.device("meta"):
        model = create_model(ours, num_classes=10, image_size=size, stochastic_depth=RATE)
        reference = timm.create_model(theirs, num_classes=10, drop_path_rate=RATE)
    expected = _timm_rates(reference)
    rates = _rates(model)
    assert len(rates) == len(expected) and rates[-1] == pytest.approx(RATE)
    assert rates == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_a_hybrid_skips_encoder_blocks_only_and_a_mixer_follows_the_same_rule() -> None:
    with torch.device("meta"):
        hybrid = create_model(
            "R50x1+ViT-B/16", num_classes=10, image_size=32, stochastic_depth=RATE
        )
        mixer = create_model("Mixer-S/16", num_classes=10, image_size=32, stochastic_depth=RATE)
    # the ResNet trunk's units keep every example; the encoder's 12 blocks go 0 -> RATE
    assert _rates(hybrid.stem) == [0.0] * len(_rates(hybrid.stem))
    assert _rates(hybrid.blocks) == pytest.approx([RATE * i / 11 for i in range(12)])
    # timm's Mixer gives every block the same rate; ours keeps the ViT's linear rule
    assert _rates(mixer) == pytest.approx([RATE * i / 7 for i in range(8)])


def test_a_skipped_branch_is_the_identity_for_that_example_only() -> None:
    torch.manual_seed(0)
    block = Block(dim=8, heads=2, mlp_dim=16, dropout=0.0, drop_rate=0.5).train()
    x = torch.randn(400, 5, 8)
    y = block(x)
    # Each example skips each of its two branches with probability 1/2: both, a quarter.
    kept_as_is = (y == x).flatten(1).all(dim=1)
    assert 60 < int(kept_as_is.sum()) < 140
    # In evaluation nothing is skipped and nothing rescaled: the block without the rate.
    plain = Block(dim=8, heads=2, mlp_dim=16, dropout=0.0)
    plain.load_state_dict(block.state_dict())
    assert torch.equal(block.eval()(x), plain.eval()(x))


def test_the_rate_adds_no_parameter_and_changes_no_evaluation() -> None:
    torch.manual_seed(0)
    plain = create_model("ViT-Pico/4", num_classes=10, image_size=32)
    torch.manual_seed(0)
    skipping = create_model("ViT-Pico/4", num_classes=10, image_size=32, stochastic_depth=0.5)
    a, b = plain.state_dict(), skipping.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    images = torch.randn(4, 3, 32, 32)
    assert torch.equal(plain.eval()(images), skipping.eval()(images))


def _quick(**model) -> dict:
    return tiny_config(
        model={"dropout": 0.0, **model},
        train={"steps": 8, "checkpoint_every": None, "eval_every": None},
        eval={"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
    )


def test_a_run_with_it_trains_otherwise_and_resumes_exactly(tmp_path, monkeypatch) -> None:
    train(_quick(), tmp_path / "plain")
    train(_quick(stochastic_depth=0.5), tmp_path / "whole")
    with monkeypatch.context() as patch:
        signal_at(patch, 3)
        with pytest.raises(Preempted):
            train(_quick(stochastic_depth=0.5), tmp_path / "resumed")
    train(_quick(stochastic_depth=0.5), tmp_path / "resumed")
    assert_same_run(tmp_path / "whole", tmp_path / "resumed")
    plain, skipping = weights(tmp_path / "plain"), weights(tmp_path / "whole")
    assert any(not torch.equal(plain[k], skipping[k]) for k in plain)


def test_cell_ids_without_it_stay_and_a_bad_rate_says_the_range() -> None:
    pinned = "1382d6472c"  # tiny_config()'s id, pinned in tests/test_config.py
    assert cell_id(resolve(tiny_config())) == pinned
    assert cell_id(resolve(tiny_config(model={"dropout": 0.1, "stochastic_depth": 0}))) == pinned
    assert cell_id(resolve(tiny_config(model={"dropout": 0.1, "stochastic_depth": 0.1}))) != pinned
    with pytest.raises(ConfigError, match=r"model\.stochastic_depth"):
        resolve(tiny_config(model={"stochastic_depth": 1.0}))
