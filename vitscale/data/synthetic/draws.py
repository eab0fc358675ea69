"""The synthetic scene's numbers: the columns of the per-example uniform draws and the
ranges they are scaled to, read by both renderers (:mod:`.render`, and :mod:`._fused` as
compile-time constants), which must draw the same pixels."""

from __future__ import annotations

from .._hash import Fields

# Brightness ranges: background from one, object from the other (contrast >= 0.2 per channel).
DARK = (0.0, 0.4)
LIGHT = (0.6, 1.0)
NOISE_GRID, NOISE_AMPLITUDE = 6, 0.3
MAX_STROKES, STROKE_P, STROKE_FRONT_P = 6, 0.5, 0.35
STROKE_HALF_WIDTH = (0.008, 0.02)  # fraction of the image side
# Glyph side, fraction of the image side. Large glyphs still move by up to 15% of the side
# and vary 10% in scale and 15% in aspect: at 32 px a ResNet learns them in ~100 steps, a
# toy ViT/16 in a few hundred; at (0.38, 0.62) the toy ViTs learned nothing in the demo's
# budget (position jitter is what a ViT must learn from data).
GLYPH_SCALE = (0.85, 0.95)
PAIR_SCALE = (0.3, 0.42)
ASPECT = 0.15  # each side independently scaled by 1 +- this
PATCH_RADIUS = (0.25, 0.4)
PERIOD = (0.1, 0.16)  # texture period, fraction of the image side


_F = Fields()  # one layout for all tasks
POLARITY = _F.take(1)
BG_COLOURS = _F.take(6)
GRADIENT = _F.take(2)
NOISE = _F.take(3 * NOISE_GRID * NOISE_GRID)
STROKES = _F.take(7 * MAX_STROKES)  # active, front, ax, ay, bx, by, half width
STROKE_COLOURS = _F.take(8)  # per layer (behind, over): object brightness?, rgb
OBJECT = _F.take(18)
NUM_FIELDS = _F.size
