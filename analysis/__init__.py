"""Figures, tables and scaling-law fits from vitscale results (docs/design.md).

Reads the run record (:mod:`vitscale.record`: run folders, or W&B runs through
:mod:`vitscale.record.wandb_runs`) and the paper's own Tables 5 and 6; never imports
training code or torch, so it runs on a laptop. Submodules are imported on use
(``from analysis import figures``), so ``import analysis`` stays cheap.
"""
