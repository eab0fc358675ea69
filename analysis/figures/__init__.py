"""One module per figure of the paper (Dosovitskiy et al., ICLR 2021), plus training curves.

- :mod:`~analysis.figures.fig3`: Fig. 3, transfer to ImageNet against the pre-training
  dataset (ImageNet, ImageNet-21k, JFT-300M), a band for the BiT ResNets;
- :mod:`~analysis.figures.fig4`: Fig. 4, linear few-shot accuracy against the
  pre-training dataset size, one line per model (or any column);
- :mod:`~analysis.figures.fig5`: Fig. 5, transfer accuracy against pre-training compute,
  Pareto frontier per family, optional power-law fit (Zhai et al. 2021);
- :mod:`~analysis.figures.curves`: a metric along training, one line per model.

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
