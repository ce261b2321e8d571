// The one place a cache element is encoded from arithmetic values and decoded back. Every
// variant's cache writer goes through encode_row, and the scalar reads of the Reference and
// CpuSimd executors through decode_element / decode_at. (CpuSimd's vector loads,
// exec/cpu/load_floats.hpp, decode the same formats with conversion instructions, and exec::Cuda
// converts on the device; both give the values decode_element gives.)
//   encode  float or double -> T, rounded to nearest even (a copy when the types agree; double
//           to a 16-bit type goes through float, as Eigen converts it)
//   decode  T -> float, or double for a double cache (exact: every T widens losslessly)
// int8 (core/row_scales.hpp) quantises each segment of a row symmetrically: scale = max |x| / 127
// rounded to float, code = x / scale rounded to nearest even, so |x - code * scale| <= scale / 2
// (the largest |x| maps to +-127, never clipped). A segment of zeros has scale 0; a segment holding
// inf or NaN has scale NaN and codes 0, so it decodes to NaN, as a float cache would show it.
// Decoding multiplies in float: float(code) * scale, rounded once (relative error <= 2^-24).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "polyattn/core/cache_element.hpp"
#include "polyattn/core/row_scales.hpp"

namespace polyattn {

/// What a cache element decodes to: double for a double cache, float for the others.
template <CacheElement T>
using DecodedElement = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The per-element decoders below (and segment_scale) are always inlined: each is a few
// instructions, and an out-of-line copy costs a call per element. The linker keeps one copy of
// an inline function for the whole program, possibly an unoptimised one from an object compiled
// at -O0 (the tests' FAST_AT_O0 under ASan), which optimised loops calling it would then run.

/// One cached element of a floating type as the arithmetic type (an int8 code needs its row's
/// scale: decode_at).
template <CacheElement T>
[[gnu::always_inline]] inline DecodedElement<T> decode_element(T x) {
  static_assert(!is_scaled_int8<T>, "polyattn: an int8 code decodes with its row's scale: decode_at or decode_row");
  return static_cast<DecodedElement<T>>(x);
}

/// Column c of a cached row as the arithmetic type; `scales` says where an int8 row's scales are
/// (ignored for the floating types).
template <CacheElement T>
[[gnu::always_inline]] inline DecodedElement<T> decode_at(const T* row, int c, RowScales scales) {
  if constexpr (is_scaled_int8<T>)
    return float(row[c]) * segment_scale(row, scales, c / scales.segment);
  else
    return decode_element(row[c]);
}

/// The int8 layout of a row of n values in segments of `segment` (0: the whole row).
constexpr RowScales int8_row(int n, int segment = 0) { return {n, segment > 0 ? segment : n}; }

/// dst[0, n) = src[0, n) rounded to T (for int8: n codes, then the scales of segments of
/// `segment` values, 0 meaning the whole row; dst has int8_row(n, segment).stored_elements()).
/// `Source` is float, or double where a variant accumulates in double (MTLA's merged row: rounded
/// once from the double sum, never from a rounded partial).
template <CacheElement T, class Source>
inline void encode_row(T* dst, const Source* src, int n, [[maybe_unused]] int segment = 0) {
  static_assert(std::is_same_v<Source, float> || std::is_same_v<Source, double>, "polyattn: rows are encoded from float or double");
  if (n <= 0) return;
  if constexpr (is_scaled_int8<T>) {
    const RowScales layout = int8_row(n, segment);
    for (int s = 0; s < layout.segments(); ++s) {
      const int begin = s * layout.segment, end = std::min(n, begin + layout.segment);
      double largest = 0;
      bool finite = true;
      for (int i = begin; i < end; ++i) {
        finite = finite && std::isfinite(double(src[i]));
        largest = std::max(largest, std::abs(double(src[i])));
      }
      float scale = finite ? float(largest / 127) : std::numeric_limits<float>::quiet_NaN();
      if (finite && largest > 0 && scale == 0) scale = std::numeric_limits<float>::denorm_min();  // below 127 denorm_min
      for (int i = begin; i < end; ++i)
        dst[i] = finite && scale > 0 ? std::int8_t(std::clamp(std::nearbyint(double(src[i]) / double(scale)), -127.0, 127.0)) : std::int8_t(0);
      std::memcpy(dst + n + 4 * s, &scale, sizeof scale);
    }
  } else if constexpr (std::is_same_v<T, Source>) {
    std::memcpy(dst, src, std::size_t(n) * sizeof(T));
  } else {
    for (int i = 0; i < n; ++i) dst[i] = T(src[i]);
  }
}

/// dst[0, n) = the decoded values of src[0, n) (an int8 row in segments of `segment`, 0: whole).
template <CacheElement T>
inline void decode_row(DecodedElement<T>* dst, const T* src, int n, [[maybe_unused]] int segment = 0) {
  if constexpr (is_scaled_int8<T>) {
    const RowScales layout = int8_row(n, segment);
    for (int i = 0; i < n; ++i) dst[i] = decode_at(src, i, layout);
  } else {
    for (int i = 0; i < n; ++i) dst[i] = decode_element(src[i]);
  }
}

}  // namespace polyattn
