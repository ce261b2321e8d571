// The element types a cache may store: float, double, the 16-bit formats Eigen::half (IEEE
// binary16) and Eigen::bfloat16, which halve the cache's bytes per token, and std::int8_t, a
// signed 8-bit code with one float scale per segment of a row (core/row_codec.hpp), about a
// quarter of float's bytes. Queries, outputs and all arithmetic stay float (or double in the
// Reference executor); rows are rounded to T once, when written. Which executors read which types:
// Reference all of them, CpuSimd float, half, bfloat16 and int8, exec::Cuda float, double, half
// and bfloat16 (as __half and __nv_bfloat16 on the device).
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace polyattn {

template <class T>
concept CacheElement = std::is_floating_point_v<T> || std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16> ||
                       std::is_same_v<T, std::int8_t>;

/// Whether rows of T are int8 codes followed by float scales (core/row_codec.hpp).
template <class T>
inline constexpr bool is_scaled_int8 = std::is_same_v<T, std::int8_t>;

/// What a store fills unused capacity with when asked to poison it (CacheConfig::poison_unused),
/// so that a read of it shows as NaN: NaN for the floating types; for int8, all bits set, which
/// makes every scale stored there a NaN (0xffffffff) and every code -1.
template <CacheElement T>
inline T poison_element() {
  if constexpr (is_scaled_int8<T>)
    return T(-1);
  else
    return std::numeric_limits<T>::quiet_NaN();
}

}  // namespace polyattn
