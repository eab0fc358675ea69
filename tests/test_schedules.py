"""Schedules whose steps before their cooldown do not depend on the run's length (wsd,
rsqrt; docs/schedules.md): the learning rate against a closed form written in numpy, the
shared prefix, and the config's one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitscale.config import ConfigError, cooldown_start, resolve
from vitscale.train.optim import build_schedule

from .helpers.configs import tiny_config


def _oracle(total, *, warmup, schedule, cooldown, shape="linear", timescale=None, floor=0.01):
    """The learning-rate multiplier of every step, from the papers' formulas."""
    t = np.arange(total, dtype=np.float64)
    warm = (t + 1) / warmup
    stable = (
        np.ones_like(t)
        if schedule == "wsd"
        else 1 / np.sqrt(1 + np.maximum(t - warmup, 0) / timescale)
    )
    p = np.clip((t - (total - cooldown)) / cooldown, 0, 1)
    decay = 1 - (np.sqrt(p) if shape == "1-sqrt" else p)
    after = np.where(t < total - cooldown, stable, floor + (stable - floor) * decay)
    return np.where(t < warmup, warm, after)


def _rates(total, optim, end_lr=1e-5):
    """The learning rate torch's optimiser steps with at each step, as the trainer builds it."""
    from vitscale.config import cooldown_steps

    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1e-3)
    schedule = build_schedule(
        opt,
        total_steps=total,
        warmup_steps=optim["warmup_steps"],
        schedule=optim["schedule"],
        end_lr=end_lr,
        cooldown=cooldown_steps(optim.get("cooldown"), total),
        cooldown_shape=optim.get("cooldown_shape"),
        timescale=optim.get("timescale"),
    )
    rates = []
    for _ in range(total):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    return np.array(rates) / 1e-3


@pytest.mark.parametrize(
    "optim, cooldown",
    [
        ({"schedule": "wsd", "cooldown": 20}, 20),
        ({"schedule": "wsd", "cooldown": 0.2, "cooldown_shape": "1-sqrt"}, 20),
        ({"schedule": "rsqrt", "timescale": 7, "cooldown": 30, "cooldown_shape": "linear"}, 30),
        ({"schedule": "rsqrt", "timescale": 7}, 0),
    ],
)
def test_the_rate_is_the_papers_closed_form(optim, cooldown):
    optim = {"warmup_steps": 10, **optim}
    want = _oracle(
        100,
        warmup=10,
        schedule=optim["schedule"],
        cooldown=max(cooldown, 1),
        shape=optim.get("cooldown_shape") or "linear",
        timescale=optim.get("timescale"),
    )
    if not cooldown:  # no cooldown: the stable phase to the end
        want = _oracle(200, warmup=10, schedule="rsqrt", cooldown=1, timescale=7)[:100]
    np.testing.assert_allclose(_rates(100, optim), want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("schedule", ["wsd", "rsqrt"])
def test_runs_of_any_length_share_every_step_before_their_cooldown(schedule):
    optim = {"warmup_steps": 5, "schedule": schedule, "cooldown": 0.25, "timescale": 7}
    long = _rates(200, optim, end_lr=1e-4)
    for total in range(20, 200):
        start = total - round(0.25 * total)
        short = _rates(total, optim, end_lr=1e-4)
        # bit for bit, the cooldown's first step too (a branch's metrics row there is its
        # trunk's)
        assert np.array_equal(short[: start + 1], long[: start + 1]), total
        assert short[start + 1] < long[start + 1]  # then it cools down


def test_a_schedule_that_depends_on_the_length_has_no_branch_point():
    cfg = resolve(tiny_config(optim={"schedule": "linear"}))
    assert cooldown_start(cfg.optim, 12) is None
    cfg = resolve(tiny_config(optim={"schedule": "wsd", "cooldown": 3, "warmup_steps": 2}))
    assert cooldown_start(cfg.optim, 12) == 9


@pytest.mark.parametrize(
    "optim, says",
    [
        ({"schedule": "wsd"}, "optim.cooldown: a wsd schedule needs its cooldown"),
        ({"schedule": "rsqrt"}, "optim.timescale: an rsqrt schedule needs its timescale"),
        ({"schedule": "linear", "cooldown": 3}, "optim.cooldown: only the 'wsd' and 'rsqrt'"),
        ({"schedule": "cosine", "timescale": 3}, "optim.timescale: only the 'wsd' and 'rsqrt'"),
        ({"schedule": "wsd", "cooldown": 1.5}, "optim.cooldown must be a whole number of steps"),
        ({"schedule": "wsd", "cooldown": 0}, "optim.cooldown must be a whole number of steps"),
        ({"schedule": "wsd", "cooldown": 11}, "optim.cooldown: 11 is 11 of the run's 12 steps"),
        ({"schedule": "wsd", "cooldown": 0.01}, "leaves no room"),
        (
            {"schedule": "wsd", "cooldown": 2, "cooldown_shape": "sqrt"},
            "optim.cooldown_shape: unknown value 'sqrt'; valid: 'linear', '1-sqrt'",
        ),
        ({"schedule": "rsqrt", "timescale": 0}, "optim.timescale must be positive, got 0"),
        ({"schedule": "rsqrt", "timescale": 5, "cooldown_shape": "1-sqrt"}, "set optim.cooldown"),
    ],
)
def test_a_bad_schedule_is_one_line(optim, says):
    with pytest.raises(ConfigError) as e:
        resolve(tiny_config(optim={"warmup_steps": 2, **optim}), num_processes=1)
    (line,) = e.value.problems
    assert says in line, line
