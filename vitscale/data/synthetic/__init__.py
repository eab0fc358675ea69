"""The embedded synthetic family: :mod:`.vocabulary` (torch-free), :mod:`.draws`, and two
renderers of the same pixels, :mod:`.render` (torch, with the ``Dataset``) and :mod:`._fused`."""
