"""Counts as people write them (``30000``, ``"30k"``, ``"9M"``, ``0.1``, ``"10%"``), and
a training duration as optimiser steps.

The config owns these spellings (``data.subset``, ``train.examples``): it validates them
before anything runs, and the data layer (:mod:`vitscale.data.subsets`) reads them with
the same functions. Pure Python: no numpy, no torch.
"""

from __future__ import annotations

import re
from numbers import Integral, Real

SubsetSpec = int | float | str | None

_SUFFIX = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKMBG]?)\s*$")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


def parse_count(value: int | str, *, what: str = "count") -> int:
    """A whole number of examples: ``30000``, ``"30k"``, ``"2121M"``, ``"1.5B"``."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a whole number of examples, got {value!r}")
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real) and float(value).is_integer():
        return int(value)
    if isinstance(value, str) and (m := _SIZE.match(value)):
        number, suffix = m.groups()
        count = float(number) * _SUFFIX[suffix]
        if count.is_integer():
            return int(count)
    raise ValueError(
        f"{what}: expected a whole number of examples such as 30000, '30k' or '2121M', "
        f"got {value!r}"
    )


def parse_subset(subset: SubsetSpec) -> int | float | None:
    """A subset spec as a count (int) or a fraction in (0, 1] (float); ``None`` = all.

    Accepted: a count (``30000``), a fraction (``0.1``), a paper-style size with a suffix
    (``"30k"``, ``"9M"``, ``"1.5M"``, ``"1B"``), a percentage (``"10%"``), or a numeric
    string of either kind. An integral float above 1 (YAML's ``3e4``) is a count.
    """
    if subset is None:
        return None
    if isinstance(subset, bool):
        raise ValueError(
            f"subset: expected a count, a fraction or a size like '9M', got {subset!r}"
        )
    if isinstance(subset, Integral):
        if subset < 1:
            raise ValueError(f"subset: a count must be >= 1, got {subset}")
        return int(subset)
    if isinstance(subset, Real):
        value = float(subset)
        if 0.0 < value <= 1.0:
            return value
        if value > 1.0 and value.is_integer():
            return int(value)
        raise ValueError(
            f"subset: {subset!r} is neither a fraction in (0, 1] nor a whole count of examples"
        )
    if isinstance(subset, str):
        if m := _PERCENT.match(subset):
            return parse_subset(float(m.group(1)) / 100.0)
        if m := _SIZE.match(subset):
            number, suffix = m.groups()
            if not suffix:
                return parse_subset(float(number) if "." in number else int(number))
            return parse_subset(parse_count(subset, what="subset"))
    raise ValueError(
        f"subset: cannot read {subset!r}; use a count (30000), a fraction (0.1), "
        "a percentage ('10%') or a size with a k/M/B suffix ('9M')"
    )


def subset_size(n_total: int, subset: SubsetSpec) -> int:
    """How many examples ``subset`` selects from ``n_total`` (fractions round to nearest)."""
    spec = parse_subset(subset)
    if spec is None:
        return int(n_total)
    if isinstance(spec, float):
        return max(1, round(spec * n_total))
    if spec > n_total:
        raise ValueError(
            f"subset: {subset!r} asks for {spec:,} examples but the split has only {n_total:,}"
        )
    return spec


def to_steps(
    *,
    steps: int | None,
    epochs: float | None,
    examples: int | float | str | None,
    batch_size: int,
    num_examples: int | None,
) -> int:
    """The one conversion of a training duration into optimiser steps.

    Given once as ``steps``, ``epochs`` of the pre-training subset, or ``examples`` seen;
    epochs and examples round up to whole global batches.
    """
    given = {
        k: v
        for k, v in dict(steps=steps, epochs=epochs, examples=examples).items()
        if v is not None
    }
    if len(given) != 1:
        raise ValueError(
            "give the training duration exactly once as train.steps, train.epochs or "
            f"train.examples; got {', '.join(given) or 'none'}"
        )
    if steps is not None:
        return int(steps)
    if examples is not None:
        examples = parse_count(examples, what="train.examples")
    if epochs is not None:
        if num_examples is None:
            raise ValueError(
                "train.epochs needs a dataset of known size; give train.steps or train.examples"
            )
        examples = epochs * num_examples
    return max(1, -(-int(round(examples)) // batch_size))


def cooldown_steps(cooldown: int | float | None, total_steps: int) -> int:
    """The cooldown of a ``wsd`` or ``rsqrt`` schedule in steps: a whole number is steps,
    a number in (0, 1) a fraction of the run (Hägele et al. 2024: 20%), rounded; None: none."""
    if cooldown is None:
        return 0
    if isinstance(cooldown, int):
        return cooldown
    return round(cooldown * total_steps)


def cooldown_start(optim, total_steps: int) -> int | None:
    """The step at which a branchable schedule's cooldown starts (``total_steps`` when it
    has none): every step before it has the same learning rate whatever the run's length,
    so runs that differ only in length share their states up to there (docs/schedules.md).
    None for a schedule whose every step depends on the length (``linear``, ``cosine``)."""
    if optim.schedule not in ("wsd", "rsqrt"):
        return None
    return total_steps - cooldown_steps(optim.cooldown, total_steps)
