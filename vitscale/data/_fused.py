"""The synthetic renderer's pixel loop fused into one C++ kernel (built on first use).

:mod:`vitscale.data.synthetic` draws a glyph scene with about a hundred torch operations
per chunk of images, each one a pass over the whole batch; the toy ViTs of the CPU demo
train faster than that draws (``benchmarks/data_throughput.py``). This kernel computes
each pixel in a few passes, from the same per-example parameters, with the same float32
operations in the same order: no fused multiply-add (``-ffp-contract=off``), no fast-math,
and square roots by torch's own kernel (torch's vectorised sqrt is not the correctly
rounded one), so every image is bit-identical to the torch path, which stays the
reference (``tests/test_data_synthetic.py`` holds the two equal).

It is compiled with ``torch.utils.cpp_extension.load_inline`` into torch's extension
cache the first time it is needed (about a minute); without a C++ compiler, or with
``VITSCALE_FUSED_RENDER=0``, :func:`kernel` returns ``None`` and the torch path renders.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import warnings
from pathlib import Path

__all__ = ["kernel"]

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

// One stroke layer over every example. The squared distances to each segment are
// computed here, their square roots by torch's own sqrt kernel (the reference path's
// sqrt, which is not the correctly rounded one, so the bits match), the rest here.
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
            q[y * S + x] = qx * qx + qy * qy;
          }
        }
      }
  });
  dist.sqrt_();
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
                         torch::Tensor bitmaps, torch::Tensor box, torch::Tensor glyph_colour,
                         int64_t glyph_grid) {
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
  const float grid_f = (float)glyph_grid, top = (float)(P - 1);

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

_lock = threading.Lock()
_state: dict[str, object] = {}
_VERSION = 6  # bump when _SOURCE changes: the build cache is keyed by the module name

# Instruction sets per torch CPU capability (torch.backends.cpu.get_cpu_capability()): a
# cached build is named after its capability, so a shared home directory never hands a
# node a binary its CPU cannot run. FMA units are enabled but never used for a * b + c
# (``-ffp-contract=off``): the bits stay those of the torch path.
_ISA_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma"],
    "AVX2": ["-mavx2", "-mfma"],
}


def kernel():
    """The compiled ``render_glyph_scenes`` function, or ``None`` where it cannot be built."""
    if os.environ.get("VITSCALE_FUSED_RENDER", "1") == "0":
        return None
    with _lock:
        if "fn" not in _state:
            _state["fn"] = _build()
        return _state["fn"]


def _build():
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    isa = _ISA_FLAGS.get(capability, [])
    name = f"vitscale_fused_render_v{_VERSION}_{capability.lower()}"
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
            cpp_sources=_SOURCE,
            functions=["render_glyph_scenes"],
            extra_cflags=["-O3", *isa, "-fopenmp", "-ffp-contract=off", "-fno-trapping-math"],
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
    return module.render_glyph_scenes


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
