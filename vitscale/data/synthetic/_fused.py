"""The synthetic renderer for glyph and pair scenes as C++ kernels (built on first use).

:mod:`vitscale.data.synthetic.render` draws a scene with about a hundred torch operations per
chunk of images and derives its per-example parameters with numpy; the toy ViTs of the
CPU demo train faster than that draws (``benchmarks/data_throughput.py``). Two kernels do
the same work here: ``glyph_scene_params`` derives the parameters from (key, index) (the
counter-based hash, colours, background grid, strokes, glyph boxes) and
``render_glyph_scenes`` draws the pixels, stage by stage. Both use the same float64 and
float32 operations in the same order as the Python path: no fused multiply-add
(``-ffp-contract=off``, and no vectoriser where GCC would still emit one), no fast-math,
square roots by the CPU's correctly rounded instruction (``std::sqrt``; the reference's
:func:`~vitscale.data.synthetic.render._sqrt`). So every image is bit-identical to the
torch path, which stays the reference (``tests/test_data_synthetic.py`` holds the two
equal), on every x86-64 CPU.

It is compiled with ``torch.utils.cpp_extension.load_inline`` into torch's extension
cache the first time it is needed (about 30 s, once per CPU capability and source
version); without a C++ compiler, or with ``VITSCALE_FUSED_RENDER=0``, :func:`kernel`
returns ``None`` and the torch path renders.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import threading
import warnings
from pathlib import Path

from . import draws as sc
from .vocabulary import GLYPH_GRID

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <vector>

static inline float clamp01(float v) { return std::min(std::max(v, 0.0f), 1.0f); }

// canvas <- canvas + (colour - canvas) * coverage, per channel (synthetic._over).
static inline void over(float* canvas, const float* cov, const float* colour, int64_t n) {
  for (int c = 0; c < 3; ++c) {
    float* ch = canvas + c * n;
    const float col = colour[c];
    for (int64_t p = 0; p < n; ++p) ch[p] = ch[p] + (col - ch[p]) * cov[p];
  }
}

// One stroke layer over every example: the distance of each pixel to each segment
// (std::sqrt is IEEE 754's correctly rounded square root, as the reference's), then the
// layer's ink over the canvas.
static void strokes(torch::Tensor& out, const torch::Tensor& segs, const torch::Tensor& counts,
                    const torch::Tensor& colour, const float* pp) {
  const int64_t B = out.size(0), S = out.size(2), N = S * S, K = segs.size(1);
  const int32_t* cnt = counts.data_ptr<int32_t>();
  const float* sg = segs.data_ptr<float>();
  const float* col = colour.data_ptr<float>();
  float* o = out.data_ptr<float>();
  std::vector<int64_t> first(B + 1, 0);  // example b's segments: rows first[b] .. first[b+1]
  for (int64_t b = 0; b < B; ++b) first[b + 1] = first[b] + cnt[b];
  if (first[B] == 0) return;  // zero coverage: the reference's over is an exact no-op
  auto dist = torch::empty({first[B], S, S}, out.options());
  float* d = dist.data_ptr<float>();
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      for (int64_t k = 0; k < cnt[b]; ++k) {
        const float* s = sg + (b * K + k) * 5;
        const float ax = s[0], ay = s[1], dx = s[2] - ax, dy = s[3] - ay;
        const float inv = 1.0f / (dx * dx + dy * dy + 1e-6f);
        const float a = dx * inv, c = dy * inv;
        float* q = d + (first[b] + k) * N;
        for (int64_t y = 0; y < S; ++y) {
          const float py = pp[y] - ay, pyc = py * c;
          for (int64_t x = 0; x < S; ++x) {
            const float px = pp[x] - ax;
            const float t = clamp01(px * a + pyc);
            const float qx = px - t * dx, qy = py - t * dy;
            q[y * S + x] = std::sqrt(qx * qx + qy * qy);
          }
        }
      }
  });
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> ink(N);
    for (int64_t b = begin; b < end; ++b) {
      if (cnt[b] == 0) continue;
      std::fill(ink.begin(), ink.end(), 0.0f);
      for (int64_t k = 0; k < cnt[b]; ++k) {
        const float reach = sg[(b * K + k) * 5 + 4];
        const float* q = d + (first[b] + k) * N;
        for (int64_t p = 0; p < N; ++p) ink[p] = std::max(ink[p], clamp01(-q[p] + reach));
      }
      over(o + b * 3 * N, ink.data(), col + b * 3, N);
    }
  });
}

// out (B,3,S,S); grid (B,3,G,G); lerp_i, lerp_w (S); pix (S) centres in [0,1]; pix_px (S) in pixels;
// segs (2,B,K,5) ax ay bx by reach; counts (2,B); stroke_colour (2,B,3);
// bitmaps (J,B,P,P); box (J,B,5) lo_x side_x lo_y side_y cell_px; glyph_colour (J,B,3).
// out (B,3,S,S), contiguous: written in full.
void render_glyph_scenes(torch::Tensor out, torch::Tensor grid, torch::Tensor lerp_i,
                         torch::Tensor lerp_w, torch::Tensor pix, torch::Tensor pix_px,
                         torch::Tensor segs, torch::Tensor counts, torch::Tensor stroke_colour,
                         torch::Tensor bitmaps, torch::Tensor box, torch::Tensor glyph_colour) {
  TORCH_CHECK(out.is_contiguous() && out.size(0) == grid.size(0), "out must be (B,3,S,S) contiguous");
  const int64_t B = grid.size(0), G = grid.size(2), S = pix.size(0);
  const int64_t J = bitmaps.size(0), P = bitmaps.size(2), N = S * S;
  const float* g = grid.data_ptr<float>();
  const int64_t* li = lerp_i.data_ptr<int64_t>();
  const float* lw = lerp_w.data_ptr<float>();
  const float* px01 = pix.data_ptr<float>();
  const float* pp = pix_px.data_ptr<float>();
  const float* bm = bitmaps.data_ptr<float>();
  const float* bx = box.data_ptr<float>();
  const float* gcol = glyph_colour.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const float grid_f = (float)GLYPH_GRID, top = (float)(P - 1);

  // 1. background: separable bilinear upsampling of the G x G grid (x, then y).
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> rows(G * S);
    for (int64_t b = begin; b < end; ++b)
      for (int c = 0; c < 3; ++c) {
        const float* gc = g + (b * 3 + c) * G * G;
        for (int64_t gy = 0; gy < G; ++gy)
          for (int64_t x = 0; x < S; ++x) {
            const float l = gc[gy * G + li[x]], r = gc[gy * G + li[x] + 1];
            rows[gy * S + x] = (r - l) * lw[x] + l;
          }
        float* ch = o + (b * 3 + c) * N;
        for (int64_t y = 0; y < S; ++y)
          for (int64_t x = 0; x < S; ++x) {
            const float t = rows[li[y] * S + x], u = rows[(li[y] + 1) * S + x];
            ch[y * S + x] = t + (u - t) * lw[y];
          }
      }
  });
  // 2. distractor strokes behind the object.
  strokes(out, segs[0], counts[0], stroke_colour[0], pp);
  // 3. the glyph(s): bilinear lookup of the zero-padded bitmap, one-pixel edges.
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> cov(N), wx(S), wy(S), rows(P);
    std::vector<int64_t> ix(S), iy(S);
    for (int64_t b = begin; b < end; ++b)
      for (int64_t j = 0; j < J; ++j) {
        const float* q = bx + (j * B + b) * 5;
        const float* bmp = bm + (j * B + b) * P * P;
        for (int64_t p = 0; p < S; ++p) {
          const float gxv = std::min(std::max((px01[p] - q[0]) / q[1] * grid_f + 0.5f, 0.0f), top);
          const float gyv = std::min(std::max((px01[p] - q[2]) / q[3] * grid_f + 0.5f, 0.0f), top);
          ix[p] = std::min((int64_t)std::floor(gxv), P - 2);
          iy[p] = std::min((int64_t)std::floor(gyv), P - 2);
          wx[p] = gxv - (float)ix[p];
          wy[p] = gyv - (float)iy[p];
        }
        const float cell = q[4];
        for (int64_t y = 0; y < S; ++y) {
          const float* r0 = bmp + iy[y] * P;
          const float* r1 = r0 + P;
          for (int64_t k = 0; k < P; ++k) rows[k] = r0[k] + wy[y] * (r1[k] - r0[k]);
          for (int64_t x = 0; x < S; ++x) {
            const float c0 = rows[ix[x]], c1 = rows[ix[x] + 1];
            const float v = c0 + wx[x] * (c1 - c0);
            cov[y * S + x] = clamp01((v - 0.5f) * cell + 0.5f);
          }
        }
        over(o + b * 3 * N, cov.data(), gcol + (j * B + b) * 3, N);
      }
  });
  // 4. strokes over the object, then [0, 1] -> [-1, 1].
  strokes(out, segs[1], counts[1], stroke_colour[1], pp);
  at::parallel_for(0, B * 3 * N, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) o[p] = clamp01(o[p]) * 2.0f - 1.0f;
  });
}
"""


# The per-example parameters (render.py: uniform, _background_grid, _stroke_layer,
# _glyph_layers), computed from (key, index) in the same float64 and float32 operations;
# the constants come from draws.py (_constants, one place for each).
_PARAMS_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cstdint>
#include <tuple>


static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27; x *= 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
static constexpr uint64_t GOLDEN = 0x9E3779B97F4A7C15ULL;
static inline double lerp_range(double u, double lo, double hi) { return lo + u * (hi - lo); }
static inline void colours(const double* u, bool light, float* out) {
  for (int c = 0; c < 3; ++c)
    out[c] = (float)(light ? lerp_range(u[c], LIGHT_LO, LIGHT_HI) : lerp_range(u[c], DARK_LO, DARK_HI));
}

// GCC 12's SLP vectoriser turns a * b + c * d into vfmaddsub despite -ffp-contract=off;
// this function is not the hot loop, so it is compiled without the vectoriser.
#pragma GCC push_options
#pragma GCC optimize("no-tree-vectorize", "no-tree-slp-vectorize")
std::vector<torch::Tensor> glyph_scene_params(int64_t key_bits, torch::Tensor indices, int64_t size,
                                              bool pair, torch::Tensor classes, torch::Tensor bank,
                                              double scale_lo, double scale_hi) {
  const int64_t B = indices.size(0), C = classes.size(0), J = pair ? 2 : 1, P = GLYPH_GRID + 2;
  const uint64_t key = (uint64_t)key_bits;
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  auto grid = torch::empty({B, 3, NOISE_GRID, NOISE_GRID}, f32);
  auto segs = torch::zeros({2, B, STROKES, 5}, f32);
  auto counts = torch::zeros({2, B}, torch::TensorOptions().dtype(torch::kInt32));
  auto scol = torch::empty({2, B, 3}, f32);
  auto bitmaps = torch::zeros({J, B, P, P}, f32);
  auto box = torch::empty({J, B, 5}, f32);
  auto gcol = torch::empty({J, B, 3}, f32);
  const int64_t* idx = indices.data_ptr<int64_t>();
  const int64_t* cls = classes.data_ptr<int64_t>();
  const float* bk = bank.data_ptr<float>();
  float *gp = grid.data_ptr<float>(), *sp = segs.data_ptr<float>(), *scp = scol.data_ptr<float>();
  float *bmp = bitmaps.data_ptr<float>(), *bxp = box.data_ptr<float>(), *gcp = gcol.data_ptr<float>();
  int32_t* cp = counts.data_ptr<int32_t>();
  at::parallel_for(0, B, 16, [&](int64_t begin, int64_t end) {
    double u[NUM_FIELDS];
    for (int64_t b = begin; b < end; ++b) {
      const uint64_t base = mix64(((uint64_t)idx[b] * GOLDEN) ^ key);
      for (int64_t f = 0; f < NUM_FIELDS; ++f)
        u[f] = (double)(mix64(base + (uint64_t)(f + 1) * GOLDEN) >> 11) * (1.0 / 9007199254740992.0);
      const bool light_bg = u[POLARITY] < 0.5;
      // background grid (float32, as the numpy path)
      float c0[3], c1[3];
      colours(u + BG_COLOURS, light_bg, c0);
      colours(u + BG_COLOURS + 3, light_bg, c1);
      const float d0 = (float)(u[GRADIENT] * 2.0 - 1.0), d1 = (float)(u[GRADIENT + 1] * 2.0 - 1.0);
      for (int c = 0; c < 3; ++c)
        for (int gy = 0; gy < NOISE_GRID; ++gy)
          for (int gx = 0; gx < NOISE_GRID; ++gx) {
            const float noise = (float)((u[NOISE + (c * NOISE_GRID + gy) * NOISE_GRID + gx] - 0.5) * NOISE_AMPLITUDE);
            const float g_x = ((float)gx + 0.5f) / (float)NOISE_GRID - 0.5f;
            const float g_y = ((float)gy + 0.5f) / (float)NOISE_GRID - 0.5f;
            float ramp = (g_x * d0 + g_y * d1) + 0.5f;
            ramp = std::min(std::max(ramp, 0.0f), 1.0f);
            gp[((b * 3 + c) * NOISE_GRID + gy) * NOISE_GRID + gx] = noise + c0[c] + ramp * (c1[c] - c0[c]);
          }
      // stroke layers: 0 behind, 1 over the object
      for (int layer = 0; layer < 2; ++layer) {
        int32_t n = 0;
        for (int k = 0; k < STROKES; ++k) {
          const double* s = u + STROKES_AT + 7 * k;
          if (!(s[0] < STROKE_P && ((s[1] < STROKE_FRONT_P) == (layer == 1)))) continue;
          float* out = sp + ((layer * B + b) * STROKES + n) * 5;
          for (int e = 0; e < 4; ++e) out[e] = (float)(s[2 + e] * (double)size);
          out[4] = (float)(lerp_range(s[6], HALF_WIDTH_LO, HALF_WIDTH_HI) * (double)size + 0.5);
          ++n;
        }
        cp[layer * B + b] = n;
        const double* c = u + STROKE_COLOURS + 4 * layer;
        colours(c + 1, c[0] < 0.5 ? light_bg : !light_bg, scp + (layer * B + b) * 3);
      }
      // the glyph object(s)
      const double* o = u + OBJECT;
      const int64_t label = idx[b] % C;
      int64_t glyphs[2];
      if (pair) {
        const bool swap = o[17] < 0.5;
        glyphs[0] = cls[label * 2 + (swap ? 1 : 0)];
        glyphs[1] = cls[label * 2 + (swap ? 0 : 1)];
      } else {
        glyphs[0] = cls[label];
      }
      const bool side_by_side = o[16] < 0.5;
      for (int64_t j = 0; j < J; ++j) {
        const double lo = pair ? 0.5 * (double)j : 0.0, hi = pair ? 0.5 * (double)(j + 1) : 1.0;
        const double* f = o + 8 * j;
        const double scale = lerp_range(f[0], scale_lo, scale_hi);
        const double hx = scale / 2 * (1.0 + ASPECT * (2 * f[1] - 1));
        const double hy = scale / 2 * (1.0 + ASPECT * (2 * f[2] - 1));
        const double lo_x = side_by_side ? lo : 0.0, hi_x = side_by_side ? hi : 1.0;
        const double lo_y = side_by_side ? 0.0 : lo, hi_y = side_by_side ? 1.0 : hi;
        const double cx = lo_x + hx + f[3] * std::max(hi_x - lo_x - 2 * hx, 0.0);
        const double cy = lo_y + hy + f[4] * std::max(hi_y - lo_y - 2 * hy, 0.0);
        float* q = bxp + (j * B + b) * 5;
        q[0] = (float)(cx - hx); q[1] = (float)(2.0 * hx);
        q[2] = (float)(cy - hy); q[3] = (float)(2.0 * hy);
        q[4] = (float)(2.0 * std::min(hx, hy) * (double)size / (double)GLYPH_GRID);
        colours(f + 5, !light_bg, gcp + (j * B + b) * 3);
        const float* src = bk + glyphs[j] * GLYPH_GRID * GLYPH_GRID;
        float* dst = bmp + (j * B + b) * P * P;
        for (int r = 0; r < GLYPH_GRID; ++r)
          for (int k = 0; k < GLYPH_GRID; ++k) dst[(r + 1) * P + k + 1] = src[r * GLYPH_GRID + k];
      }
    }
  });
  return {grid, segs, counts, scol, bitmaps, box, gcol};
}
#pragma GCC pop_options
"""

_lock = threading.Lock()
_state: dict[str, object] = {}

# Instruction sets per torch CPU capability (torch.backends.cpu.get_cpu_capability()): a
# cached build is named after its capability, so a shared home directory never hands a
# node a binary its CPU cannot run. FMA units are enabled, never used (_CFLAGS).
_ISA_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma"],
    "AVX2": ["-mavx2", "-mfma"],
}

# Beside the instruction set: no contraction into FMAs (the torch path's bits), no trapping
# math (GCC then if-converts the clamps), no errno (a sqrt without a branch to set it).
_CFLAGS = ("-O3", "-fopenmp", "-ffp-contract=off", "-fno-trapping-math", "-fno-math-errno")


def kernel():
    """The compiled module (``glyph_scene_params``, ``render_glyph_scenes``), or ``None``
    where it cannot be built."""
    if os.environ.get("VITSCALE_FUSED_RENDER", "1") == "0":
        return None
    with _lock:
        if "module" not in _state:
            _state["module"] = _build()
        return _state["module"]


def _constants() -> str:
    """The synthetic family's layout and ranges as C++ constants (read from :mod:`.draws`)."""

    ints = {
        "NUM_FIELDS": sc.NUM_FIELDS,
        "POLARITY": sc.POLARITY.start,
        "BG_COLOURS": sc.BG_COLOURS.start,
        "GRADIENT": sc.GRADIENT.start,
        "NOISE": sc.NOISE.start,
        "STROKES_AT": sc.STROKES.start,
        "STROKE_COLOURS": sc.STROKE_COLOURS.start,
        "OBJECT": sc.OBJECT.start,
        "NOISE_GRID": sc.NOISE_GRID,
        "STROKES": sc.MAX_STROKES,
        "GLYPH_GRID": GLYPH_GRID,
    }
    doubles = {
        "NOISE_AMPLITUDE": sc.NOISE_AMPLITUDE,
        "STROKE_P": sc.STROKE_P,
        "STROKE_FRONT_P": sc.STROKE_FRONT_P,
        "HALF_WIDTH_LO": sc.STROKE_HALF_WIDTH[0],
        "HALF_WIDTH_HI": sc.STROKE_HALF_WIDTH[1],
        "DARK_LO": sc.DARK[0],
        "DARK_HI": sc.DARK[1],
        "LIGHT_LO": sc.LIGHT[0],
        "LIGHT_HI": sc.LIGHT[1],
        "ASPECT": sc.ASPECT,
    }
    lines = ["#include <cstdint>"]
    lines += [f"static constexpr int64_t {k} = {v};" for k, v in ints.items()]
    lines += [f"static constexpr double {k} = {float(v)!r};" for k, v in doubles.items()]
    return "\n".join(lines) + "\n"


def _build():
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    isa = _ISA_FLAGS.get(capability, [])
    sources = [_constants(), _SOURCE, _PARAMS_SOURCE]  # one file, in this order
    digest = hashlib.sha256("\n".join([*sources, *_CFLAGS, *isa]).encode()).hexdigest()[:12]
    name = f"vitscale_fused_render_{capability.lower()}_{digest}"  # a new build per change
    cpp_log = logging.getLogger("torch.utils.cpp_extension")
    level = cpp_log.level
    try:
        cpp_log.setLevel(logging.ERROR)  # "no CUDA runtime found": irrelevant to a CPU kernel
        from torch.utils.cpp_extension import load_inline

        _ninja_on_path()

        if not _built(name):
            print(
                f"vitscale: building the fused synthetic renderer for {capability} "
                "(once per machine type, about 30 s)",
                file=sys.stderr,
                flush=True,
            )
        module = load_inline(
            name=name,
            cpp_sources=sources,
            functions=["glyph_scene_params", "render_glyph_scenes"],
            extra_cflags=[*_CFLAGS, *isa],
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except Exception as e:  # no compiler, no headers: the torch path renders the same pixels
        first = str(e).splitlines()[0] if str(e) else ""
        warnings.warn(
            f"vitscale: the fused synthetic renderer could not be built "
            f"({type(e).__name__}: {first}); rendering with torch operations "
            "(same images, slower)",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    finally:
        cpp_log.setLevel(level)
    return module


def _built(name: str) -> bool:
    """Whether torch's extension cache already holds ``name`` (only to say when a build
    is about to take a while; torch decides what to rebuild)."""
    try:
        from torch.utils.cpp_extension import _get_build_directory

        return (Path(_get_build_directory(name, verbose=False)) / f"{name}.so").exists()
    except Exception:  # a private helper: if it moves, just skip the message
        return True


def _ninja_on_path() -> None:
    """torch builds extensions with ``ninja`` from PATH; the ``ninja`` wheel (a vitscale
    dependency) puts it in the environment's bin folder, which is not on PATH unless the
    environment is activated."""
    if shutil.which("ninja") is None:
        try:
            import ninja
        except ImportError:
            return
        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
