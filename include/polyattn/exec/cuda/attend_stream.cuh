// The streaming decode kernel: the same work and output as attend_chunks (kernels.cuh), one block
// per (query job, cache head, group tile, chunk), for MHA, GQA and MQA rows (stream_plan.hpp says
// which calls). It exists because the tiled kernel (attend_tiles.cuh) is bound by its
// instructions, not by the memory: three block-wide barriers and a one-warp softmax per tile,
// and two blocks an SM.
//
//   - No shared-memory tiles and no barrier inside the loop. `kLanes` lanes hold one token's key
//     and value slice, one 16-byte load each, straight into registers; a warp reads 32 / kLanes
//     tokens at once, and each lane group takes kStreamUnroll tokens a step, all their loads issued
//     before the first is used.
//   - Every lane group keeps its own online softmax (core/online_softmax.hpp) for each of the
//     block's query heads: one max and one rescale per step of kStreamUnroll tokens. The key row
//     is read once for all of the group's heads.
//   - At the end the lane groups of a warp merge by shuffles, the warps through shared memory
//     (merge_softmax, as merge_chunks does for chunks), and the block writes its chunk's partial
//     result per query head.
// Scores at the limits behave as in attend_chunks (core/attend.hpp): a NaN score makes the
// output NaN, -inf weighs 0, +inf counts as the largest finite score.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/online_softmax.hpp"
#include "polyattn/exec/cuda/device_layout.hpp"
#include "polyattn/exec/cuda/kernels.cuh"
#include "polyattn/exec/cuda/stream_plan.hpp"

namespace polyattn::exec::cuda {

inline constexpr int kStreamWarps = kStreamThreads / 32;
inline constexpr int kStreamUnroll = 8;  // tokens a lane group has in flight per step (4 for 4-8 heads)

/// Dynamic shared memory of a block: each warp's merged (max, sum) and accumulators per head.
inline std::size_t stream_shared_bytes(int group_tile, int value_dim) {
  return std::size_t(kStreamWarps) * std::size_t(group_tile) * std::size_t(value_dim + 2) * sizeof(float);
}

/// 16 bytes of cache elements as 16 / sizeof(T) floats.
template <class T>
__device__ __forceinline__ void unpack16(const uint4& x, float (&v)[16 / sizeof(T)]) {
  if constexpr (sizeof(T) == 4) {
    v[0] = __uint_as_float(x.x), v[1] = __uint_as_float(x.y), v[2] = __uint_as_float(x.z), v[3] = __uint_as_float(x.w);
  } else {
    const unsigned words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f;
      if constexpr (std::is_same_v<T, __half>) f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
      else f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[i]));
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
}

/// kLanes: lanes per token row (plan_stream's `lanes`); kGroup: query heads per block, a power of
/// two <= kStreamMaxGroup. T: float, __half or __nv_bfloat16.
template <class T, int kLanes, int kGroup>
__global__ void __launch_bounds__(kStreamThreads) attend_stream(ChunkParams<T> p) {
  constexpr int kVec = 16 / int(sizeof(T));  // elements a lane loads from a row
  constexpr int kRows = 32 / kLanes;          // token rows a warp reads at once
  constexpr int kStride = kStreamWarps * kRows;  // token rows the block reads at once
  constexpr int kUnroll = kGroup >= 4 ? kStreamUnroll / 2 : kStreamUnroll;  // fewer registers for many heads

  const AttendSpec& s = p.spec;
  const BlockWork w = block_work(p, kGroup);
  if (w.empty()) return;  // past this job's last chunk; merge_chunks does not read it
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int slot = lane / kLanes, column = (lane % kLanes) * kVec;
  const int query_heads = s.cache_heads * s.group;

  // This lane's columns of every head's query, the softmax scale folded in.
  float q[kGroup][kVec];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const float* qg = p.queries + (std::int64_t(w.job) * query_heads + w.first_head + min(g, w.gn - 1)) * s.key_dim + column;
#pragma unroll
    for (int i = 0; i < kVec; ++i) q[g][i] = qg[i] * s.scale;
  }
  float acc[kGroup][kVec];
  SoftmaxState<float> state[kGroup];
#pragma unroll
  for (int g = 0; g < kGroup; ++g)
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[g][i] = 0.0f;

  const int key_column = s.key_offset + column, value_column = s.value_offset + column;
  // The loop runs while any lane group of the warp has a token (the shuffles need every lane).
  for (int base = w.begin + warp * kRows; base < w.end; base += kStride * kUnroll) {
    const int first = base + slot;
    // Issue every load of the step before using any (a token past the chunk reads its last
    // token's row, which is visible, and is left out below).
    uint4 key_raw[kUnroll], value_raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int token = min(first + u * kStride, w.end - 1);
      key_raw[u] = __ldg(reinterpret_cast<const uint4*>(p.cache.row(s.key_tensor, w.jb.seq, token, w.head) + key_column));
      value_raw[u] = __ldg(reinterpret_cast<const uint4*>(p.cache.row(s.value_tensor, w.jb.seq, token, w.head) + value_column));
    }
    float score[kGroup][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float key[kVec];
      unpack16<T>(key_raw[u], key);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kVec; ++i) dot = fmaf(q[g][i], key[i], dot);
#pragma unroll
        for (int offset = kLanes / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        score[g][u] = first + u * kStride < w.end ? bounded_score(dot) : kNegativeInfinity<float>;
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float step_max = score[g][0];
#pragma unroll
      for (int u = 1; u < kUnroll; ++u) step_max = max_keeping_nan(step_max, score[g][u]);
      const float factor = state[g].raise_max(step_max);  // rescales state[g].sum
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[g][i] *= factor;
      if (state[g].empty()) continue;  // every score so far -inf: nothing weighs
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (first + u * kStride >= w.end) continue;  // past the chunk: never read its value
        const float weight = expf(score[g][u] - state[g].max);
        state[g].sum += weight;
        float value[kVec];
        unpack16<T>(value_raw[u], value);
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[g][i] = fmaf(weight, value[i], acc[g][i]);
      }
    }
  }

  // Merge the warp's lane groups (same columns, other tokens) by shuffles...
#pragma unroll
  for (int offset = kLanes; offset < 32; offset *= 2)
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      SoftmaxState<float> other;
      other.max = __shfl_xor_sync(0xffffffffu, state[g].max, offset);
      other.sum = __shfl_xor_sync(0xffffffffu, state[g].sum, offset);
      float other_acc[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) other_acc[i] = __shfl_xor_sync(0xffffffffu, acc[g][i], offset);
      merge_softmax(state[g], acc[g], other, other_acc, kVec);
    }

  // ... then the warps through shared memory: per warp, (max, sum) of each head, then its
  // accumulators (kGroup, value_dim).
  extern __shared__ __align__(16) float merged[];
  float* warp_states = merged + warp * kGroup * (s.value_dim + 2);
  if (slot == 0)
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      if (column == 0) warp_states[2 * g] = state[g].max, warp_states[2 * g + 1] = state[g].sum;
#pragma unroll
      for (int i = 0; i < kVec; ++i) warp_states[2 * kGroup + g * s.value_dim + column + i] = acc[g][i];
    }
  __syncthreads();
  for (int e = tid; e < w.gn * s.value_dim; e += kStreamThreads) {
    const int g = e / s.value_dim, c = e % s.value_dim;
    SoftmaxState<float> total;
    float sum = 0.0f;
    for (int v = 0; v < kStreamWarps; ++v) {
      const float* from = merged + v * kGroup * (s.value_dim + 2);
      SoftmaxState<float> part;
      part.max = from[2 * g];
      part.sum = from[2 * g + 1];
      merge_softmax(total, &sum, part, from + 2 * kGroup + g * s.value_dim + c, 1);
    }
    const std::int64_t out = w.first_out + std::int64_t(g) * p.max_chunks;
    p.acc[out * s.value_dim + c] = sum;
    if (c == 0) p.states[out] = total;
  }
}

}  // namespace polyattn::exec::cuda
