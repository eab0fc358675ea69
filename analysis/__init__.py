"""Figures, tables and scaling-law fits from vitscale results (docs/design.md).

Reads the run record (:mod:`vitscale.record`: run folders, or W&B runs through
:mod:`vitscale.record.wandb_runs`), the paper's own Tables 5 and 6 and published reference
data (:mod:`analysis.reference`: the JFT learning curves); never imports
training code or torch, so it runs on a laptop. Submodules are imported on use
(``from analysis import figures``), so ``import analysis`` stays cheap.
"""
