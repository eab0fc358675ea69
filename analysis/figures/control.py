"""The positive control's figure (experiments/preregistered/permuted.md): the gap
(ResNet - ViT, 5-shot points) at the smallest and the largest subset against the fraction
f of pixels moved, with bars of the registered noise band (+- 2 noise units,
:data:`analysis.control.FACTOR`). Above zero the ResNet leads; a crossover is the smallest
subset's line above its band and the largest's below it at one f. Fig. 4 per level is
:mod:`.fig4`'s, one file per world's transfer metric."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .. import style
from ..control import FACTOR, Control


def figure(control: Control):
    gaps = control.gaps
    with style.paper_style():
        fig, (ax,) = style.new_figure()
        ends = sorted({gaps.num_examples.min(), gaps.num_examples.max()})
        for n, look in zip(
            ends, ({"linestyle": "--", "marker": "s"}, {"marker": "o"}), strict=False
        ):
            g = gaps[gaps.num_examples == n]
            ax.errorbar(
                g["fraction"], g["gap"], yerr=FACTOR * g["unit"], capsize=2, markersize=4,
                label=f"{n:,} images", **look,
            )  # fmt: skip
        ax.axhline(0.0, color="0.5", linewidth=0.8)
        ax.text(0.02, 0.97, "ResNet ahead", transform=ax.transAxes, va="top", fontsize=7)
        ax.text(0.02, 0.03, "ViT ahead", transform=ax.transAxes, va="bottom", fontsize=7)
        ax.set_xlabel("Fraction of pixels permuted, f")
        ax.set_ylabel(f"Gap, ResNet - ViT ({control.shots}-shot points)")
        handles, labels = ax.get_legend_handles_labels()
        style.legend_below(fig, handles, labels)
    return fig


def write(
    control: Control, out_dir: str | os.PathLike, *, formats: Sequence[str] = style.FORMATS
) -> list[Path]:
    """Write ``control_gap.<format>``; returns the paths (none before both families have
    a point at one level and subset)."""
    if control.gaps.empty:
        return []
    return style.save(figure(control), out_dir, "control_gap", formats=formats)
