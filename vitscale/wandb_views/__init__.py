"""W&B as the study's live dashboard (``vitscale wandb ...``): the trainer mirrors each cell
into one W&B run (:mod:`vitscale.train.tracking`); this package turns a grid's runs into
what a researcher watches and shares (a saved workspace, a report) and uploads offline
runs. Nothing here imports torch; ``wandb`` and ``wandb_workspaces`` load only when a
subcommand needs them.
"""
