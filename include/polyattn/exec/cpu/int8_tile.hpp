// int8 caches on the CPU kernels. Decode (kernels.hpp) reads the codes in place and applies the
// scales to scores and weights. Prefill (attend_block.hpp) decodes a tile's rows to fp32 once,
// code * scale per segment (core/row_scales.hpp), into a scratch tile of float rows that the
// float kernels then read for every query row of the block: the decode's cost is shared by up to
// kBlockVectors query vectors. (Decode did the same at first: a 64-row tile of XCache's or
// SlimK2's 384-wide rows decoded to floats is 96 KiB, more than L1, and int8 then ran no faster
// than float: 1.0-1.4x float's time on the Xeon at L 65536, batch 16 and 64.) The decoded values
// are decode_at's, bit for bit: one fp32 product per element.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "polyattn/cache/layout_traits.hpp"
#include "polyattn/core/row_codec.hpp"
#include "polyattn/core/row_scales.hpp"
#include "polyattn/exec/cpu/load_floats.hpp"
#include "polyattn/exec/cpu/scratch_floats.hpp"

namespace polyattn::exec::cpu {

/// What the kernels read a cache of T as: T itself, or float rows decoded from int8.
template <class T>
using TileElement = std::conditional_t<is_scaled_int8<T>, float, T>;

/// dst row j (at dst + j * layout.codes) = the decoded codes of row j of `rows` (at rows + j *
/// stride), for j < n.
template <class Arch>
void decode_int8_rows(const std::int8_t* rows, std::ptrdiff_t stride, int n, RowScales layout, float* dst) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  for (int j = 0; j < n; ++j) {
    const std::int8_t* row = rows + std::ptrdiff_t(j) * stride;
    float* out = dst + std::ptrdiff_t(j) * layout.codes;
    for (int s = 0; s < layout.segments(); ++s) {
      const float scale = segment_scale(row, layout, s);
      const int end = std::min(layout.codes, (s + 1) * layout.segment);
      int c = s * layout.segment;
      for (const B factor(scale); c + W <= end; c += W) (load_floats<Arch>(row + c) * factor).store_unaligned(out + c);
      for (; c < end; ++c) out[c] = float(row[c]) * scale;
    }
  }
}

/// Whether every scale of rows [0, n) is finite (the codes always are).
inline bool scales_finite(const std::int8_t* rows, std::ptrdiff_t stride, int n, RowScales layout) {
  for (int j = 0; j < n; ++j)
    for (int s = 0; s < layout.segments(); ++s)
      if (!std::isfinite(segment_scale(rows + std::ptrdiff_t(j) * stride, layout, s))) return false;
  return true;
}

/// The first n rows of `run` as the float kernels read them (prefill blocks, and decode's
/// tokens-it-sees path): the run itself, or for an int8 cache its rows decoded into `scratch`
/// (resized as needed).
template <class Arch, class T>
CacheRun<TileElement<T>> tile_rows(const CacheRun<T>& run, int n, RowScales layout, ScratchFloats& scratch) {
  if constexpr (is_scaled_int8<T>) {
    scratch.resize(std::size_t(n) * std::size_t(layout.codes));
    decode_int8_rows<Arch>(run.data, run.stride, n, layout, scratch.data());
    return {scratch.data(), std::ptrdiff_t(layout.codes), n};
  } else {
    return run;
  }
}

}  // namespace polyattn::exec::cpu
