"""The model families, one module each (:class:`~vitscale.families.base.Family`); the
registry is the tuple below, in paper Table 6's order, then families the paper has not.
:mod:`vitscale.catalog` answers every question about a model name by asking them."""

from .hybrid import HybridSpec
from .mixer import MixerSpec
from .resnet import ResNetSpec
from .vit import ViTSpec

REGISTRY = (ViTSpec, ResNetSpec, HybridSpec, MixerSpec)
