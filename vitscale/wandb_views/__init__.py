"""W&B as the study's live dashboard (``vitscale wandb ...``).

The trainer mirrors each cell into one W&B run (:mod:`vitscale.train.tracking`); this package
turns a grid's runs into what a researcher watches and shares:

- :mod:`.study`: which grid, cells and metrics a view is about, read from a grid file or
  from run folders (no W&B, no network);
- :mod:`.keys`: the W&B names of what the trainer logs (history, summary, config) and the
  keys a built spec refers to, so a panel naming a metric nobody logs is caught;
- :mod:`.workspace`: the saved workspace view (Fig. 4, Fig. 5, curves, the run table),
  built with wandb's own ``wandb-workspaces`` library;
- :mod:`.report`: the report of a (partly) finished grid: figures, Table 6, the summary's
  verdict, the grid file and the version;
- :mod:`.remote`: everything that talks to a W&B server, with one clear error per failure
  (no key, no network, unknown project, no runs) checked before anything is written;
- :mod:`.sync`: uploading a grid's offline runs with ``wandb sync``;
- :mod:`.cli`: the ``vitscale wandb`` subcommands.

Nothing here imports torch; ``wandb`` and ``wandb_workspaces`` load only when a
subcommand needs them.
"""
