"""Figures, tables and scaling-law fits from vitscale results (docs/design.md).

Reads the run record (:mod:`vitscale.record`: run folders, or W&B runs through
:mod:`vitscale.record.wandb_runs`) and the paper's own Tables 5 and 6; never imports
training code or torch, so it runs on a laptop.

- :mod:`analysis.paper`: Tables 5 and 6 as tidy frames (``source="paper"``);
- :mod:`analysis.metrics`: which columns are transfer metrics, averages, axis labels;
- :mod:`analysis.frontier`: Pareto frontiers (less compute, more accuracy);
- :mod:`analysis.scaling`: the saturating power law of Zhai et al. 2021;
- :mod:`analysis.figures`: one module per figure (paper Figs. 3, 4, 5; training curves);
- :mod:`analysis.draw`: every figure and table of a study in one call (``vitscale figures``);
- :mod:`analysis.summary`: the measured answer (``vitscale summary``);
- :mod:`analysis.tables`: Table 6 as markdown and LaTeX;
- :mod:`analysis.fixtures`: synthetic run folders (tests, benchmarks, trying the figures).

Submodules are imported on use (``from analysis import figures``), so ``import
analysis`` stays cheap.
"""
