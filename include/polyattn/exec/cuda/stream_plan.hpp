// Whether a decode call runs on the streaming kernel (attend_stream.cuh), decided on the host from
// the AttendSpec and the cached tensors' row widths. Plain C++ (no CUDA types), so the decision is
// tested on any machine (tests/test_cuda_layout.cpp).
//
// The streaming kernel reads each token's key and value slice straight into registers, one
// 16-byte load per lane: `lanes` lanes hold one row, so a row of the slice must be exactly
// lanes x 16 bytes. What it needs:
//   - separate key and value tensors, and the group's query heads sharing one key (MHA, GQA, MQA:
//     key_group_stride 0), at most kStreamMaxGroup query heads per cache head;
//   - key_dim == value_dim, that many elements being 8, 16 or 32 lanes of 16 bytes (fp32: 32, 64
//     or 128 wide; 16-bit: 64, 128 or 256);
//   - every offset and row width a multiple of 16 bytes' elements, so each load is aligned;
//   - an element of 2 or 4 bytes (float, half, bfloat16).
// Anything else takes the tiled or the general kernel (tile_plan.hpp, kernels.cuh).
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/shape.hpp"
#include "polyattn/exec/cuda/plan_checks.hpp"

namespace polyattn::exec::cuda {

inline constexpr int kStreamThreads = 128;   // four warps a block
inline constexpr int kStreamMaxGroup = 8;    // query heads held in a lane's registers
// Split target (plan_chunks): how many of its blocks a call aims at per SM. Few and long chunks
// pay: on an H200 (bench_cuda_decode's split rows, bench/results/cuda_decode/h200_2026-11-30_*),
// MHA 8 x 64 fp32 over one sequence of 65536 tokens read 0.63-0.64 of the copy's bandwidth at 2
// and 0.28-0.29 at 16; at batch 16, L 16384, 0.99-1.01 at 2 and 0.97-0.98 at 16 (GQA<2> there
// was best at 8: 0.82-0.83, against 0.70-0.71 at 2).
inline constexpr int kStreamBlocksPerSm = 2;

/// The streaming kernel's shape for a call.
struct StreamShape {
  int group_tile = 1;  ///< query heads per block: the group rounded up to a power of two
  int lanes = 0;       ///< lanes holding one token's row slice: 8, 16 or 32
};

/// The streaming kernel's shape for this call, or nothing when it cannot run it (see the top).
inline std::optional<StreamShape> plan_stream(const AttendSpec& s, std::span<const TensorSpec> tensors, std::size_t element) {
  if (element != 2 && element != 4) return std::nullopt;
  const int per_load = int(16 / element);
  if (!names_cached_tensors(s, tensors) || !columns_aligned(s, tensors, per_load)) return std::nullopt;
  if (s.key_tensor == s.value_tensor || s.key_group_stride != 0 || s.group < 1 || s.group > kStreamMaxGroup) return std::nullopt;
  if (s.key_dim != s.value_dim) return std::nullopt;
  const int lanes = s.key_dim / per_load;
  if (lanes != 8 && lanes != 16 && lanes != 32) return std::nullopt;
  return StreamShape{ceil_pow2(s.group), lanes};
}

}  // namespace polyattn::exec::cuda
