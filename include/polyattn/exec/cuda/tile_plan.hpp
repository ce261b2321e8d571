// Whether, and how, a decode call runs on the tiled kernel (attend_tiles.cuh), decided on the
// host from the AttendSpec and the cached tensors' row widths. Plain C++ (no CUDA types), so the
// decision is tested on any machine (tests/test_cuda_layout.cpp).
//
// The tiled kernel copies a tile of tokens' rows into shared memory with 16-byte asynchronous
// copies, double-buffered, so that a block always has the next tile in flight while it computes
// on this one. What it needs:
//   - 16-byte copies: every row, and the column range copied from it, starts and ends on a
//     16-byte boundary; the kernel also reads columns four at a time. So every offset, width and
//     stride in the spec, and every cached row width, must be a multiple of
//     max(4, 16 / sizeof(T)) elements;
//   - a key row of at most kTiledMaxKeyDim columns (the query slice a lane keeps in registers),
//     a value row of at most kTiledMaxValueDim;
//   - the double-buffered tiles within kTiledSharedBudget bytes at 16 tokens or more;
//   - not 8 or more query heads sharing one key row (MQA, MLA's latent, the X-cache): there each
//     warp scores every token of the tile for its heads from shared memory, and on an H100 that
//     ran slower than the general kernel (MQA 0.13-0.14 of the copy bandwidth against 0.18-0.19,
//     MLA<512,64> 0.06 against 0.065; MHA 0.59 against 0.25). Heads packed in one row (slim
//     K-only option 2, key_group_stride > 0) read disjoint columns and stay tiled.
// Anything else runs on the general kernel (kernels.cuh), which reads rows one element at a time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/host_device.hpp"
#include "polyattn/core/shape.hpp"
#include "polyattn/exec/cuda/plan_checks.hpp"

namespace polyattn::exec::cuda {

inline constexpr int kTiledThreads = 256;
inline constexpr int kTiledMaxGroup = 16;          // query heads of one cache head in a block
inline constexpr int kTiledMaxKeyDim = 1024;       // 32 lanes x 8 column quads of query in registers
inline constexpr int kTiledMaxValueDim = 1024;     // 256 threads x 1 column quad of accumulators
inline constexpr std::size_t kTiledSharedBudget = std::size_t(100) << 10;  // two blocks per SM fit in 228 KiB

/// A block's shared memory, in bytes: two tiles of key (and value) rows, the scores of one tile
/// for each head, and the area where the token rows' accumulators are summed.
struct TileShape {
  int group_tile = 1;   ///< query heads per block: a power of two <= kTiledMaxGroup
  int tile_tokens = 0;  ///< tokens per tile: 16, 32 or 64
  int key_stride = 0;   ///< elements between token rows of the key tile (widest span + 16 bytes)
  int value_stride = 0; ///< of the value tile; 0 when values are read from the key tile
  int key_lanes = 1;    ///< lanes sharing one key row's dot product: a power of two <= 32
  std::size_t shared_bytes = 0;
};

/// Shared-memory bytes of a plan (also used by the launch).
inline std::size_t tiled_shared_bytes(int group_tile, int tile_tokens, int key_stride, int value_stride, std::size_t element) {
  const std::size_t tiles = 2 * std::size_t(tile_tokens) * std::size_t(key_stride + value_stride) * element;
  const std::size_t scores = std::size_t(group_tile) * std::size_t(tile_tokens) * sizeof(float);
  const std::size_t reduce = std::size_t(kTiledThreads) * 4 * sizeof(float);
  return tiles + scores + reduce;
}

/// Columns [lo, hi) of the key tensor's row that the block of group tile `g0` (heads g0 ..
/// g0 + gn - 1) copies: its heads' key slices and, when values share the tensor, the value columns.
struct ColumnSpan {
  int lo = 0, hi = 0;
};
POLYATTN_HOST_DEVICE ColumnSpan key_span(const AttendSpec& s, int g0, int gn) {
  ColumnSpan span{s.key_offset + g0 * s.key_group_stride, s.key_offset + (g0 + gn - 1) * s.key_group_stride + s.key_dim};
  if (s.value_tensor == s.key_tensor) {
    span.lo = s.value_offset < span.lo ? s.value_offset : span.lo;
    span.hi = s.value_offset + s.value_dim > span.hi ? s.value_offset + s.value_dim : span.hi;
  }
  return span;
}

/// The tiled kernel's shape for this call, or nothing when it cannot run it (see the top).
/// `tensors`: the cached tensors (their `dim` is the width in elements of one head's row).
inline std::optional<TileShape> plan_tiles(const AttendSpec& s, std::span<const TensorSpec> tensors, std::size_t element) {
  if (element > 16 || 16 % element != 0) return std::nullopt;
  if (!names_cached_tensors(s, tensors) || !columns_aligned(s, tensors, std::max<int>(4, int(16 / element)))) return std::nullopt;
  if (s.key_dim > kTiledMaxKeyDim || s.value_dim > kTiledMaxValueDim || s.key_dim < 1 || s.value_dim < 1) return std::nullopt;

  TileShape shape;
  shape.group_tile = ceil_pow2(std::min(s.group, kTiledMaxGroup));
  if (shape.group_tile >= 8 && s.key_group_stride == 0) return std::nullopt;  // shared key rows: see the top
  shape.key_lanes = std::min(32, ceil_pow2(s.key_dim / 4));
  int widest = 0;  // over the group tiles of one cache head
  for (int g0 = 0; g0 < s.group; g0 += shape.group_tile) {
    const ColumnSpan span = key_span(s, g0, std::min(shape.group_tile, s.group - g0));
    widest = std::max(widest, span.hi - span.lo);
  }
  const int pad = int(16 / element);  // 16 bytes between rows: fewer shared-memory bank conflicts
  shape.key_stride = widest + pad;
  shape.value_stride = s.value_tensor == s.key_tensor ? 0 : s.value_dim + pad;
  for (int tokens : {64, 32, 16}) {
    const std::size_t bytes = tiled_shared_bytes(shape.group_tile, tokens, shape.key_stride, shape.value_stride, element);
    if (bytes <= kTiledSharedBudget) {
      shape.tile_tokens = tokens;
      shape.shared_bytes = bytes;
      return shape;
    }
  }
  return std::nullopt;
}

}  // namespace polyattn::exec::cuda
