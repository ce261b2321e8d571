// The element types a cache may store: float, double, and the 16-bit formats Eigen::half (IEEE
// binary16) and Eigen::bfloat16, which halve the cache's bytes per token. Queries, outputs and
// all arithmetic stay float (or double in the Reference executor); rows are rounded to T once,
// when written. Which executors read which types: Reference all of them, CpuSimd float, half and
// bfloat16, exec::Cuda float, double, half and bfloat16 (as __half and __nv_bfloat16 on the device).
#pragma once

#include <Eigen/Core>

#include <type_traits>

namespace polyattn {

template <class T>
concept CacheElement = std::is_floating_point_v<T> || std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>;

}  // namespace polyattn
