"""Figures, tables and scaling-law fits from vitscale results (../shared/DESIGN.md).

Reads run folders (through :mod:`vitscale.results`, the run-folder contract) or the W&B
API, and the paper's own Tables 5 and 6; never imports training code or torch, so it
runs on a laptop.

- :mod:`analysis.load`: run folders, W&B (online API or offline run files) and the
  paper's tables, all as the same tidy frame (one row per cell);
- :mod:`analysis.paper`: Tables 5 and 6 as tidy frames (``source="paper"``);
- :mod:`analysis.metrics`: which columns are transfer metrics, averages, axis labels;
- :mod:`analysis.frontier`: Pareto frontiers (less compute, more accuracy);
- :mod:`analysis.scaling`: the saturating power law of Zhai et al. 2021;
- :mod:`analysis.figures`: one module per figure (paper Figs. 3, 4, 5; training curves);
- :mod:`analysis.tables`: Table 6 as markdown and LaTeX;
- :mod:`analysis.cli`: ``vitscale figures`` and ``vitscale fit``;
- :mod:`analysis.fixtures`: synthetic run folders (tests, benchmarks, trying the figures).

Submodules are imported on use (``from analysis import figures``), so ``import
analysis`` stays cheap.
"""
