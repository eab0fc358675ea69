"""Counter-based random numbers: every draw is a pure function of (key, index, field).

Subsets (:mod:`vitscale.data.subsets`) and the synthetic generator
(:mod:`vitscale.data.synthetic.render`) need randomness that is identical on every process and
machine and that can be evaluated for any index without drawing the ones before it (a
10^9-example set has no state to replay). SplitMix64's finaliser (Steele et al. 2014) on
unsigned 64-bit integers gives that: plain integer arithmetic, so numpy on any platform
returns the same bits. Only numpy, no torch.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser: a bijection on uint64 whose outputs look independent."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _M1
        x = x ^ (x >> np.uint64(27))
        x = x * _M2
        return x ^ (x >> np.uint64(31))


def derive_key(*words: int) -> int:
    """One 64-bit key from a sequence of non-negative integers (seed, task, split, ...)."""
    key = np.uint64(0)
    with np.errstate(over="ignore"):
        for w in words:
            key = mix64(key ^ np.uint64(w & _MASK64)) + _GOLDEN
    return int(key)


class Fields:
    """Names for the columns of :func:`uniform`'s per-example draws: each ``take(n)`` is
    the next ``n`` columns; ``size`` is how many there are so far."""

    def __init__(self) -> None:
        self.size = 0

    def take(self, n: int) -> slice:
        s = slice(self.size, self.size + n)
        self.size += n
        return s


def uniform(key: int, index: np.ndarray, fields: int) -> np.ndarray:
    """``(len(index), fields)`` float64 draws in [0, 1): field ``j`` of example ``i``."""
    index = np.ravel(np.asarray(index, dtype=np.uint64))
    with np.errstate(over="ignore"):
        base = mix64(index * _GOLDEN ^ np.uint64(key))
        f = np.arange(1, fields + 1, dtype=np.uint64) * _GOLDEN
        bits = mix64(base[:, None] + f[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
