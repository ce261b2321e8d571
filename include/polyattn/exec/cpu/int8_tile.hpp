// int8 caches on the CPU kernels: a tile's rows are decoded to fp32 once, code * scale per
// segment (core/row_scales.hpp), into a scratch tile of float rows in L1/L2, which the float
// kernels then read for every query head of the group (decode) or every query row of the block
// (prefill). The decoded values are decode_at's, bit for bit: one fp32 product per element.
// The decode costs a few instructions per element, once per tile and cache head, while the
// score and value products cost G multiply-adds per element and more: what int8 saves is the
// bytes read from memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "polyattn/cache/layout_traits.hpp"
#include "polyattn/core/row_codec.hpp"
#include "polyattn/core/row_scales.hpp"
#include "polyattn/exec/cpu/load_floats.hpp"

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

/// The first n rows of `run` as the kernels read them: the run itself, or for an int8 cache its
/// rows decoded into `scratch` (resized as needed).
template <class Arch, class T>
CacheRun<TileElement<T>> tile_rows(const CacheRun<T>& run, int n, RowScales layout, std::vector<float>& scratch) {
  if constexpr (is_scaled_int8<T>) {
    scratch.resize(std::size_t(n) * std::size_t(layout.codes));
    decode_int8_rows<Arch>(run.data, run.stride, n, layout, scratch.data());
    return {scratch.data(), std::ptrdiff_t(layout.codes), n};
  } else {
    return run;
  }
}

}  // namespace polyattn::exec::cpu
