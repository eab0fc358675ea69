"""Config resolution (defaults <- recipe <- file <- --set), validation, durations, cell ids,
and the optimiser schedules."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from vitscale.cli import main
from vitscale.config import ConfigError, cell_id, resolve, to_steps
from vitscale.train.optim import build_adamw, lr_factor, param_groups

from .helpers.configs import tiny_config


def _problems(config, **kwargs) -> list[str]:
    with pytest.raises(ConfigError) as e:
        resolve(config, **kwargs)
    return e.value.problems


def test_paper_recipes_fill_only_what_is_unset():
    jft = resolve(
        {
            "model": {"name": "ViT-L/16"},
            "data": {"dataset": "multilabel:/d", "image_size": 224},
            "train": {"epochs": 7},
        }
    )
    assert (jft.optim.lr, jft.optim.weight_decay, jft.train.batch_size) == (4e-4, 0.1, 4096)
    assert (jft.train.loss, jft.optim.schedule, jft.optim.warmup_steps) == (
        "sigmoid",
        "linear",
        10_000,
    )
    assert jft.model.dropout == 0.0
    imagenet = resolve(
        {
            "model": {"name": "ViT-B/16"},
            "data": {"dataset": "imagenet", "image_size": 224},
            "train": {"epochs": 300},
            "optim": {"lr": 1e-3},
        }
    )
    assert imagenet.optim.lr == 1e-3  # the user's value wins
    assert (imagenet.optim.weight_decay, imagenet.optim.schedule, imagenet.model.dropout) == (
        0.3,
        "cosine",
        0.1,
    )
    assert (
        resolve(
            {
                "model": {"name": "BiT-R152x2"},
                "data": {"dataset": "multilabel:/d", "image_size": 224},
                "train": {"epochs": 7},
            }
        ).optim.lr
        == 6e-4
    )


def test_one_message_per_problem_with_did_you_mean():
    problems = _problems(
        tiny_config(
            train={"stpes": 10, "batch_size": "big"},
            optim={"schedule": "step"},
            model={"name": "ViT-B/15"},
        )
    )
    text = "\n".join(problems)
    assert "unknown key 'train.stpes'; did you mean train.steps?" in text
    assert "train.batch_size: expected a whole number, got 'big'" in text
    assert "optim.schedule: unknown value 'step'; valid: 'linear', 'cosine'" in text
    assert "patch size 15 does not divide resolution 32" in text
    assert len(problems) == 4


def test_impossible_combinations():
    assert any("exactly once" in p for p in _problems(tiny_config(train={"epochs": 2})))
    assert any(
        "split evenly over 3 processes" in p for p in _problems(tiny_config(), num_processes=3)
    )
    assert any("data.subset" in p for p in _problems(tiny_config(data={"subset": "nine"})))
    assert any(
        "micro_batch_size 5 must divide" in p
        for p in _problems(tiny_config(train={"micro_batch_size": 5}))
    )


def test_overrides_parse_values_as_yaml():
    cfg = resolve(
        tiny_config(), overrides=["train.steps=30", "optim.lr=3e-4", "eval.fewshot.shots=[1, 5]"]
    )
    assert (cfg.train.steps, cfg.optim.lr, cfg.eval.fewshot.shots) == (30, 3e-4, [1, 5])
    with pytest.raises(ConfigError, match="key=value"):
        resolve(tiny_config(), overrides=["train.steps"])


def test_durations_convert_in_one_place():
    assert to_steps(steps=7, epochs=None, examples=None, batch_size=16, num_examples=None) == 7
    assert to_steps(steps=None, epochs=2, examples=None, batch_size=16, num_examples=100) == 13
    assert to_steps(steps=None, epochs=None, examples=160, batch_size=16, num_examples=None) == 10
    with pytest.raises(ValueError, match="exactly once"):
        to_steps(steps=1, epochs=1, examples=None, batch_size=16, num_examples=100)


def _shuffled(d):
    return {k: _shuffled(v) if isinstance(v, dict) else v for k, v in reversed(list(d.items()))}


@given(steps=st.integers(3, 10_000), lr=st.floats(1e-6, 1.0), seed=st.integers(0, 100))  # > warm-up
def test_cell_ids_are_stable_under_key_order_and_unique_per_config(steps, lr, seed):
    config = tiny_config(train={"steps": steps}, optim={"lr": lr}, seed=seed)
    a = cell_id(resolve(config))
    assert a == cell_id(resolve(_shuffled(config)))
    assert (
        cell_id(resolve(tiny_config(train={"steps": steps + 1}, optim={"lr": lr}, seed=seed))) != a
    )
    # Operational keys do not change what a run computes, nor its id.
    assert (
        cell_id(
            resolve(
                tiny_config(
                    train={"steps": steps, "log_every": 3},
                    optim={"lr": lr},
                    seed=seed,
                    wandb={"mode": "offline"},
                )
            )
        )
        == a
    )


def test_schedules():
    kw = dict(total_steps=100, warmup_steps=10, base_lr=1e-3, end_lr=1e-5)
    assert lr_factor(0, schedule="linear", **kw) == pytest.approx(0.1)
    assert lr_factor(9, schedule="linear", **kw) == pytest.approx(1.0)
    assert lr_factor(100, schedule="linear", **kw) == pytest.approx(1e-2)  # ends at end_lr
    assert lr_factor(55, schedule="linear", **kw) == pytest.approx(1e-2 + 0.99 * 0.5)
    assert lr_factor(55, schedule="cosine", **kw) == pytest.approx(1e-2 + 0.99 * 0.5)
    assert lr_factor(32, schedule="cosine", **kw) > lr_factor(32, schedule="linear", **kw)
    with pytest.raises(ValueError, match="valid: 'linear', 'cosine'"):
        lr_factor(0, schedule="step", **kw)


def test_weight_decay_is_decoupled_and_skips_biases_norms_and_embeddings():
    from vitscale.models import create_model

    model = create_model("ViT-Pico/4", num_classes=10, image_size=32)
    decay, other = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(
        names[id(p)].endswith("weight") and "norm" not in names[id(p)] for p in decay["params"]
    )
    assert {"cls_token", "pos_embed"} <= {names[id(p)] for p in other["params"]}
    assert len(decay["params"]) + len(other["params"]) == len(list(model.parameters()))
    assert isinstance(
        build_adamw(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.999)), torch.optim.AdamW
    )


def test_train_dry_run_prints_the_resolved_config(tmp_path, capsys):
    path = tmp_path / "cell.yaml"
    path.write_text(json.dumps(tiny_config()))  # JSON is YAML
    assert main(["train", str(path), "--set", "train.steps=3", "--dry-run"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["train"]["steps"] == 3 and out["workdir"] == f"runs/adhoc/{out['cell_id']}"
    assert main(["train", str(path), "--set", "train.stpes=3"]) == 2
    assert "did you mean train.steps?" in capsys.readouterr().err
