"""One module per figure of the paper (docs/protocol.md, "The figures"), plus training
curves.

Each module has ``plot(ax, frame, ...)`` (draws on one axes, returns nothing), a
``figure(...)`` that adds the legend below the axes, and ``write(...)`` that saves PNG
and PDF files (:func:`analysis.style.save`). Only finished cells are drawn.

This package module imports nothing heavy: ``vitscale figures --help`` reads
:data:`AGGREGATES` without loading pandas or matplotlib.
"""

from __future__ import annotations

__all__ = ["AGGREGATES"]

# How the cells sharing a line and an x value (seeds, usually) are combined.
AGGREGATES = ("mean", "median", "max", "min")
