// The tiled decode kernel: the same work and output as attend_chunks (kernels.cuh), one block per
// (query job, cache head, group tile, chunk), built to stream the cache at the memory's speed.
//
//   - A tile of `tile_tokens` rows is copied into shared memory with 16-byte cp.async copies,
//     double-buffered: the next tile is in flight while this one is scored and summed. A row is
//     copied once per block whatever the group is, and when values live in the key tensor (K-only
//     caches, X-cache, MLA's latent) they are read from the same tile, so the row crosses the
//     memory bus once.
//   - Scores: a warp takes HeadsPerWarp heads and a share of the tile's tokens; the lanes of one
//     token row split its key columns four at a time, with the query slice of each lane held in
//     registers for the whole chunk, and the row's partial dots meet in a few shuffles.
//   - Softmax: one max and one rescale per head per tile (online softmax, core/online_softmax.hpp).
//   - Values: a thread owns four value columns of every head in the block and a share of the
//     tile's tokens; its accumulators stay in registers until the chunk ends.
// plan_tiles (tile_plan.hpp) decides on the host whether a call fits these rules. Scores at the
// limits behave as in attend_chunks (core/attend.hpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/online_softmax.hpp"
#include "polyattn/exec/cuda/device_layout.hpp"
#include "polyattn/exec/cuda/kernels.cuh"
#include "polyattn/exec/cuda/tile_plan.hpp"

namespace polyattn::exec::cuda {

inline constexpr int kTiledWarps = kTiledThreads / 32;
inline constexpr int kTiledQuadsPerLane = kTiledMaxKeyDim / 4 / 32;    // query registers: quads per lane
inline constexpr int kTiledValueSlots = kTiledMaxValueDim / 4 / kTiledThreads;  // column quads per thread

template <class T>
struct TiledParams {
  ChunkParams<T> chunk;  // everything attend_chunks takes
  TileShape shape;
};

/// Four consecutive cache elements as floats. `p` is 4-element aligned in shared memory.
template <class T>
__device__ __forceinline__ void load4(const T* p, float (&v)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = static_cast<float>(p[i]);
}
template <>
__device__ __forceinline__ void load4<float>(const float* p, float (&v)[4]) {
  const float4 x = *reinterpret_cast<const float4*>(p);
  v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
}
template <>
__device__ __forceinline__ void load4<__half>(const __half* p, float (&v)[4]) {
  const uint2 x = *reinterpret_cast<const uint2*>(p);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&x.x)), b = __half22float2(*reinterpret_cast<const __half2*>(&x.y));
  v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}
template <>
__device__ __forceinline__ void load4<__nv_bfloat16>(const __nv_bfloat16* p, float (&v)[4]) {
  const uint2 x = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x.y));
  v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}

/// Starts copying columns [lo, lo + width) of `n` token rows (from token `first`) of `tensor` into
/// `tile` (row stride `stride`), 16 bytes per cp.async.
template <class T>
__device__ __forceinline__ void copy_tile(const DeviceCacheView<T>& cache, int tensor, int seq, int head, int first, int n, int lo,
                                          int width, T* tile, int stride) {
  constexpr int kPerCopy = 16 / sizeof(T);
  const int copies_per_row = width / kPerCopy, copies = n * copies_per_row;
  for (int c = threadIdx.x; c < copies; c += kTiledThreads) {
    const int t = c / copies_per_row, e = (c % copies_per_row) * kPerCopy;
    __pipeline_memcpy_async(tile + t * stride + e, cache.row(tensor, seq, first + t, head) + lo + e, 16);
  }
}

/// kGroup: query heads per block (power of two). Requires plan_tiles(...) to have accepted the call.
/// Up to 8 heads a block keeps its query slices and accumulators in 128 registers a thread, so two
/// blocks share an SM; 16 heads need twice that, and one block a SM (its next tile still in flight).
template <class T, int kGroup>
__global__ void __launch_bounds__(kTiledThreads, kGroup >= 16 ? 1 : 2) attend_tiles(TiledParams<T> tp) {
  constexpr int kHeadWarps = kGroup < kTiledWarps ? kGroup : kTiledWarps;  // warps sharing out the heads
  constexpr int kTokenWarps = kTiledWarps / kHeadWarps;                    // warps sharing out the tokens
  constexpr int kHeadsPerWarp = kGroup / kHeadWarps;

  const ChunkParams<T>& p = tp.chunk;
  const AttendSpec& s = p.spec;
  const TileShape& shape = tp.shape;
  const BlockWork w = block_work(p, kGroup);
  if (w.empty()) return;  // past this job's last chunk; merge_chunks does not read it
  const int job = w.job, head = w.head, g0 = w.g0, gn = w.gn, begin = w.begin, end = w.end, first_head = w.first_head;
  const DeviceJob jb = w.jb;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int query_heads = s.cache_heads * s.group;

  // Shared memory: [key tile 0][key tile 1][value tile 0][value tile 1] (T), scores, reduce (float).
  extern __shared__ __align__(16) unsigned char shared[];
  const int tokens = shape.tile_tokens;
  T* key_tiles = reinterpret_cast<T*>(shared);
  T* value_tiles = key_tiles + 2 * tokens * shape.key_stride;
  float* weights = reinterpret_cast<float*>(value_tiles + 2 * tokens * shape.value_stride);  // (kGroup, tokens)
  float* reduce = weights + kGroup * tokens;                                                 // (kTiledThreads, 4)
  __shared__ float run_max[kGroup], run_sum[kGroup], rescale[kGroup];

  const ColumnSpan span = key_span(s, g0, gn);
  const bool shared_values = shape.value_stride == 0;
  const int value_column = shared_values ? s.value_offset - span.lo : 0;  // of the value tile's rows
  const auto start_tile = [&](int first, int buffer) {
    const int n = min(tokens, end - first);
    copy_tile(p.cache, s.key_tensor, jb.seq, head, first, n, span.lo, span.hi - span.lo, key_tiles + buffer * tokens * shape.key_stride,
              shape.key_stride);
    if (!shared_values)
      copy_tile(p.cache, s.value_tensor, jb.seq, head, first, n, s.value_offset, s.value_dim,
                value_tiles + buffer * tokens * shape.value_stride, shape.value_stride);
    __pipeline_commit();
  };
  start_tile(begin, 0);

  // Scores: warp (head_warp, token_warp) takes heads head_warp + k * kHeadWarps and tokens
  // token_warp * rows + r (+ multiples of kTokenWarps * rows); `lanes` lanes share one row.
  const int quads = s.key_dim / 4;
  const int lanes = shape.key_lanes, rows = 32 / lanes;
  const int head_warp = warp % kHeadWarps, token_warp = warp / kHeadWarps;
  const int row_in_warp = lane / lanes, lane_in_row = lane % lanes;
  float q[kHeadsPerWarp][kTiledQuadsPerLane][4];
  int key_column[kHeadsPerWarp];  // where head g's key starts in a key-tile row
#pragma unroll
  for (int k = 0; k < kHeadsPerWarp; ++k) {
    const int g = head_warp + k * kHeadWarps;
    key_column[k] = s.key_offset + (g0 + g) * s.key_group_stride - span.lo;
    const float* qg = p.queries + (std::int64_t(job) * query_heads + first_head + min(g, gn - 1)) * s.key_dim;
#pragma unroll
    for (int m = 0; m < kTiledQuadsPerLane; ++m) {
      const int quad = lane_in_row + m * lanes;
#pragma unroll
      for (int i = 0; i < 4; ++i) q[k][m][i] = quad < quads ? qg[quad * 4 + i] * s.scale : 0.0f;
    }
  }

  // Values: thread (column quad, token row) accumulates its quads for every head of the block.
  const int value_quads = s.value_dim / 4;
  const int column_threads = min(kTiledThreads, value_quads), token_rows = kTiledThreads / column_threads;
  const int my_quad = tid % column_threads, my_row = tid / column_threads;
  float acc[kGroup][kTiledValueSlots][4];
#pragma unroll
  for (int g = 0; g < kGroup; ++g)
#pragma unroll
    for (int k = 0; k < kTiledValueSlots; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[g][k][i] = 0.0f;
  if (tid < kGroup) {
    run_max[tid] = kNegativeInfinity<float>;
    run_sum[tid] = 0.0f;
  }

  int buffer = 0;
  for (int first = begin; first < end; first += tokens, buffer ^= 1) {
    const int n = min(tokens, end - first);
    const bool more = first + tokens < end;
    if (more) start_tile(first + tokens, buffer ^ 1);
    if (more) __pipeline_wait_prior(1);
    else __pipeline_wait_prior(0);
    __syncthreads();  // this tile has landed for every thread's copies
    const T* key_tile = key_tiles + buffer * tokens * shape.key_stride;
    const T* value_tile = shared_values ? key_tile : value_tiles + buffer * tokens * shape.value_stride;
    const int value_stride = shared_values ? shape.key_stride : shape.value_stride;

    // 1. Scores.
    for (int t0 = token_warp * rows; t0 < n; t0 += kTokenWarps * rows) {
      const int t = t0 + row_in_warp;
      const T* key = key_tile + min(t, n - 1) * shape.key_stride;
      float dot[kHeadsPerWarp];
#pragma unroll
      for (int k = 0; k < kHeadsPerWarp; ++k) {
        dot[k] = 0.0f;
#pragma unroll
        for (int m = 0; m < kTiledQuadsPerLane; ++m) {
          const int quad = lane_in_row + m * lanes;
          if (quad < quads) {
            float kv[4];
            load4(key + key_column[k] + quad * 4, kv);
            dot[k] += q[k][m][0] * kv[0] + q[k][m][1] * kv[1] + q[k][m][2] * kv[2] + q[k][m][3] * kv[3];
          }
        }
        for (int offset = lanes / 2; offset > 0; offset /= 2) dot[k] += __shfl_xor_sync(0xffffffffu, dot[k], offset);
        const int g = head_warp + k * kHeadWarps;
        if (lane_in_row == 0 && t < n && g < gn) weights[g * tokens + t] = bounded_score(dot[k]);
      }
    }
    __syncthreads();

    // 2. Online softmax: warp w takes heads w, w + kTiledWarps, ...
    for (int g = warp; g < gn; g += kTiledWarps)
      softmax_tile(weights + g * tokens, n, run_max[g], run_sum[g], rescale[g], lane);
    __syncthreads();

    // 3. Values.
    if (my_row < token_rows) {
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        const float f = g < gn ? rescale[g] : 0.0f;
#pragma unroll
        for (int k = 0; k < kTiledValueSlots; ++k)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[g][k][i] *= f;
      }
      for (int t = my_row; t < n; t += token_rows) {
        const T* value = value_tile + t * value_stride + value_column;
#pragma unroll
        for (int k = 0; k < kTiledValueSlots; ++k) {
          const int quad = my_quad + k * column_threads;
          if (quad < value_quads) {
            float v[4];
            load4(value + quad * 4, v);
#pragma unroll
            for (int g = 0; g < kGroup; ++g) {
              const float w = g < gn ? weights[g * tokens + t] : 0.0f;
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[g][k][i] += w * v[i];
            }
          }
        }
      }
    }
    __syncthreads();  // the tile after next lands in this buffer
  }

  // 4. Sum the token rows' accumulators; write the chunk's partial result per query head.
  const std::int64_t first_out = w.first_out;  // + g * max_chunks
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    if (g >= gn) break;
#pragma unroll
    for (int k = 0; k < kTiledValueSlots; ++k) {
      const int quad = my_quad + k * column_threads;
      if (k * column_threads >= value_quads) break;
#pragma unroll
      for (int i = 0; i < 4; ++i) reduce[tid * 4 + i] = acc[g][k][i];
      __syncthreads();
      if (my_row == 0 && quad < value_quads)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float sum = 0.0f;
          for (int r = 0; r < token_rows; ++r) sum += reduce[(r * column_threads + my_quad) * 4 + i];
          p.acc[(first_out + std::int64_t(g) * p.max_chunks) * s.value_dim + quad * 4 + i] = sum;
        }
      __syncthreads();
    }
  }
  w.store_states(p.states, p.max_chunks, run_max, run_sum, tid);
}

}  // namespace polyattn::exec::cuda
