// The one place a cache element is encoded from arithmetic values and decoded back. Every
// variant's cache writer goes through encode_row, and the scalar reads of the Reference and
// CpuSimd executors through decode_element. (CpuSimd's vector loads, exec/cpu/load_floats.hpp,
// decode the same formats with conversion instructions, and exec::Cuda converts on the device;
// both give the values decode_element gives.)
//   encode  float or double -> T, rounded to nearest even (a copy when the types agree; double
//           to a 16-bit type goes through float, as Eigen converts it)
//   decode  T -> float, or double for a double cache (exact: every T widens losslessly)
#pragma once

#include <cstring>
#include <type_traits>

#include "polyattn/core/cache_element.hpp"

namespace polyattn {

/// What a cache element decodes to: double for a double cache, float for the others.
template <CacheElement T>
using DecodedElement = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// One cached element as the arithmetic type.
template <CacheElement T>
inline DecodedElement<T> decode_element(T x) {
  return static_cast<DecodedElement<T>>(x);
}

/// dst[0, n) = src[0, n) rounded to T. `Source` is float, or double where a variant accumulates
/// in double (MTLA's merged row: rounded once from the double sum, never from a rounded partial).
template <CacheElement T, class Source>
inline void encode_row(T* dst, const Source* src, int n) {
  static_assert(std::is_same_v<Source, float> || std::is_same_v<Source, double>, "polyattn: rows are encoded from float or double");
  if (n <= 0) return;
  if constexpr (std::is_same_v<T, Source>)
    std::memcpy(dst, src, std::size_t(n) * sizeof(T));
  else
    for (int i = 0; i < n; ++i) dst[i] = T(src[i]);
}

/// dst[0, n) = the decoded values of src[0, n).
template <CacheElement T>
inline void decode_row(DecodedElement<T>* dst, const T* src, int n) {
  for (int i = 0; i < n; ++i) dst[i] = decode_element(src[i]);
}

}  // namespace polyattn
