"""Transfer evaluation: the closed-form few-shot solver against numpy, and fine-tuning."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitscale import record as rf
from vitscale.evals.fewshot import BIAS_FEATURE, STD_EPS, ridge_fewshot_accuracy
from vitscale.train import train

from .helpers.configs import tiny_config


def _numpy_ridge_predictions(train_x, train_y, test_x, num_classes, l2):
    """docs/protocol.md's recipe written independently: z-score with the k-shot statistics,
    a constant feature of 100, ridge to {-1, 1}^K targets via lstsq on the augmented
    system, argmax."""
    mean, std = train_x.mean(0), train_x.std(0) + STD_EPS
    a = np.hstack([(train_x - mean) / std, np.full((len(train_x), 1), BIAS_FEATURE)])
    b = np.hstack([(test_x - mean) / std, np.full((len(test_x), 1), BIAS_FEATURE)])
    targets = -np.ones((len(train_x), num_classes))
    targets[np.arange(len(train_x)), train_y] = 1.0
    d = a.shape[1]
    augmented = np.vstack([a, np.sqrt(l2) * np.eye(d)])  # min |Aw - Y|^2 + l |w|^2
    rhs = np.vstack([targets, np.zeros((d, num_classes))])
    w = np.linalg.lstsq(augmented, rhs, rcond=None)[0]
    return b @ w


@pytest.mark.parametrize(("n", "d"), [(50, 8), (20, 64)])  # primal and dual forms
def test_ridge_matches_an_independent_numpy_solution(n, d):
    rng = np.random.default_rng(n + d)
    k = 5
    train_x, test_x = rng.normal(size=(n, d)), rng.normal(size=(200, d))
    train_y, test_y = rng.integers(0, k, n), rng.integers(0, k, 200)
    scores = _numpy_ridge_predictions(train_x, train_y, test_x, k, 1024.0)
    expected = (scores.argmax(1) == test_y).mean()
    ours = ridge_fewshot_accuracy(
        torch.tensor(train_x),
        torch.tensor(train_y),
        torch.tensor(test_x),
        torch.tensor(test_y),
        num_classes=k,
    )
    assert ours == pytest.approx(expected, abs=1e-6)
    # The scores themselves agree too: check through a one-example test set per class.
    for c in range(k):
        single = ridge_fewshot_accuracy(
            torch.tensor(train_x),
            torch.tensor(train_y),
            torch.tensor(test_x[:1]),
            torch.tensor([c]),
            num_classes=k,
        )
        assert single == float(scores[0].argmax() == c)


def test_ridge_is_near_chance_on_random_labels_and_perfect_on_separable_ones():
    gen = torch.Generator().manual_seed(0)
    k, d = 10, 32
    x = torch.randn(5000, d, generator=gen)
    y = torch.randint(0, k, (5000,), generator=gen)
    chance = ridge_fewshot_accuracy(x[:250], y[:250], x[250:], y[250:], num_classes=k)
    assert abs(chance - 1 / k) < 0.03
    centres = 10 * torch.randn(k, d, generator=gen)
    sep = centres[y] + torch.randn(5000, d, generator=gen)
    assert ridge_fewshot_accuracy(sep[:250], y[:250], sep[250:], y[250:], num_classes=k) > 0.99


def test_ridge_rejects_mismatched_shapes():
    x = torch.randn(10, 4)
    with pytest.raises(ValueError, match="equal D"):
        ridge_fewshot_accuracy(x, torch.zeros(10), torch.randn(3, 5), torch.zeros(3), num_classes=2)
    with pytest.raises(ValueError, match="same number of rows"):
        ridge_fewshot_accuracy(x, torch.zeros(9), x, torch.zeros(10), num_classes=2)


def test_finetune_picks_a_learning_rate_and_scores_the_test_split(tmp_path):
    """A short fine-tune at twice the pre-training resolution (position embeddings
    resized), learning rate chosen on the held-out slice, scored on test."""
    cfg = tiny_config(
        train={"steps": 4, "eval_every": None},
        eval={
            "fewshot": {"datasets": []},
            "finetune": {
                "datasets": ["synthetic-textures"],
                "steps": 3,
                "batch_size": 16,
                "lrs": [0.001, 0.01],
                "image_size": 64,
                "test_examples": 64,
            },
        },
    )
    result = train(cfg, tmp_path)
    assert result.status == rf.STATUS_DONE
    accuracy = result.finetune["synthetic-textures"]
    assert 0.0 <= accuracy <= 1.0 and accuracy * 64 == pytest.approx(round(accuracy * 64))
    key = rf.finetune_key("synthetic-textures")
    assert result.final[key] == accuracy == result.best[key]


def test_fewshot_features_use_the_evaluation_view_of_real_datasets(tmp_path):
    """Paper Sec. 4.1: few-shot images are resized and centre-cropped, never augmented, so
    two evaluations of one model see the same features."""
    from PIL import Image

    from vitscale.config import resolve
    from vitscale.evals.transfer import TransferEvaluator
    from vitscale.models import create_model
    from vitscale.train.runtime import make_accelerator

    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("test", 6)):
        for i in range(n):
            path = tmp_path / split / f"c{i % 3}" / f"{i}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 255, (48, 40, 3), dtype=np.uint8)).save(path)
    cfg = resolve(
        tiny_config(
            eval={
                "fewshot": {"datasets": [f"imagefolder:{tmp_path}"], "shots": [2], "seeds": 1},
                "upstream": {"examples": 0},
            }
        )
    )
    accelerator, _ = make_accelerator(precision="fp32")
    evaluator = TransferEvaluator(
        cfg, accelerator=accelerator, upstream_num_classes=256, batch_size=cfg.eval.batch_size
    )
    (fs,) = evaluator.fewshot
    model = create_model("ViT-Pico/4", num_classes=256, image_size=32).eval()
    from vitscale.evals.features import run_model

    train, pool = fs.pool_images.dataset, fs.pool_images.indices
    first, _ = run_model(model.pre_logits, train, pool, batch_size=8, accelerator=accelerator)
    again, _ = run_model(model.pre_logits, train, pool, batch_size=8, accelerator=accelerator)
    assert torch.equal(first, again)


class _CountingImages(torch.utils.data.Dataset):
    """Eight 3x4x4 images; counts how often an image is decoded."""

    def __init__(self) -> None:
        self.decoded = 0

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i):
        self.decoded += 1
        return torch.full((3, 4, 4), float(i)), torch.tensor(i % 2)


@pytest.mark.parametrize("world", [1, 2])
def test_eval_images_are_decoded_once_while_they_fit_the_budget(world):
    from types import SimpleNamespace

    from vitscale.evals.features import Budget, EvalImages

    def images_of(dataset, budget, rank=0):
        acc = SimpleNamespace(num_processes=world, process_index=rank, device=torch.device("cpu"))
        return EvalImages(dataset, range(7), batch_size=3, accelerator=acc, budget=budget)

    per_image = 3 * 4 * 4 * 4 + 8  # float32 pixels + an int64 target
    shard = -(-7 // world)  # this rank's examples, padded
    roomy, data = Budget(10**6), _CountingImages()
    kept = images_of(data, roomy)
    first = [b.images.clone() for b in kept]
    second = [b.images for b in kept]
    assert data.decoded == shard  # the second pass replays the first
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert torch.cat(second)[:, 0, 0, 0].tolist() == list(range(7))[::world]  # rank 0's share
    assert roomy.left == 10**6 - shard * per_image

    tight, data = Budget(2 * per_image), _CountingImages()
    uncached = images_of(data, tight)
    for _ in range(2):
        assert sum(len(b.images) for b in uncached) == shard
    assert data.decoded == 2 * shard  # too large: decoded every time, bytes given back
    assert tight.left == 2 * per_image
