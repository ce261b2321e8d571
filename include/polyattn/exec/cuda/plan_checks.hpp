// What the tiled and the streaming decode plans (tile_plan.hpp, stream_plan.hpp) both ask of a
// call before they look at its shape: that the spec names cached tensors, and that its column
// offsets, widths and the tensors' row widths are whole 16-byte loads. Plain C++, tested with the
// plans (tests/test_cuda_layout.cpp).
#pragma once

#include <span>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn::exec::cuda {

/// The smallest power of two >= n.
inline int ceil_pow2(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

/// Whether the spec's key and value tensors are among `tensors`.
inline bool names_cached_tensors(const AttendSpec& s, std::span<const TensorSpec> tensors) {
  const auto exists = [&](int t) { return t >= 0 && t < int(tensors.size()); };
  return exists(s.key_tensor) && exists(s.value_tensor);
}

/// Whether every column offset, width and stride of the spec, and the row width of its key and
/// value tensors, is a multiple of `quantum` elements. The tensors must exist (names_cached_tensors).
inline bool columns_aligned(const AttendSpec& s, std::span<const TensorSpec> tensors, int quantum) {
  const auto aligned = [&](int v) { return v % quantum == 0; };
  return aligned(s.key_offset) && aligned(s.key_dim) && aligned(s.key_group_stride) && aligned(s.value_offset) &&
         aligned(s.value_dim) && aligned(tensors[std::size_t(s.key_tensor)].dim) &&
         aligned(tensors[std::size_t(s.value_tensor)].dim);
}

}  // namespace polyattn::exec::cuda
