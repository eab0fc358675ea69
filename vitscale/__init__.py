"""vitscale: scaling studies of vision models (Dosovitskiy et al., ICLR 2021, and beyond)."""

__version__ = "0.1.0"
