"""Real datasets: :mod:`.files` (which files each needs, checked without opening one) and
:mod:`.load` (read through torchvision's own loaders)."""
