// The register-tiled prefill kernel: flash attention over query blocks of 64 rows (query_blocks.hpp
// plans them), tiles of 64 tokens, 256 threads. Same parameters, chunks and results as the simple
// kernel (prefill_blocks.cuh); what differs is how the products use the registers:
//
//   - thread (rg, kg) = (tid / 16, tid % 16) owns rows 4 rg .. 4 rg + 3 of the block, and in a tile
//     tokens 4 kg .. 4 kg + 3 for the scores and value columns 4 kg .. 4 kg + 3 (+ 64, 128, 192)
//     for the outputs: a 4 x 4 block of each;
//   - scores: the queries (scaled) and the tile's keys sit transposed in shared memory, (key_dim,
//     64) each, so that a step over one key column is two float4 loads (four rows, four tokens)
//     for 16 FMAs, the 16 threads of a row group reading 16 different float4s of the key row;
//   - online softmax per row: a row's max over the 16 threads of its group (4 shuffles, all in one
//     half-warp); each thread keeps only its own tokens' part of the row sums, added up at the end;
//   - values: the weights go to shared memory transposed (token, row), read back by the same 16
//     threads (a __syncwarp is enough), then per token one float4 of weights and one of values
//     for 16 FMAs.
// A thread's four rows see the whole tile in most tiles (a full mask, or a causal mask away from
// the diagonal) and take the products unchecked; on a mask's edge a row adds only its own tokens'
// products (0 * inf would be NaN), as the simple kernel does. Accumulation is fp32 (FMAs in
// another order than the simple kernel's, with the same error bound). Scores at the limits (-inf,
// overflow, NaN, nothing visible) behave as in attend_chunks (core/attend.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/online_softmax.hpp"
#include "polyattn/exec/cuda/device_layout.hpp"
#include "polyattn/exec/cuda/kernels.cuh"
#include "polyattn/exec/cuda/prefill_blocks.cuh"
#include "polyattn/exec/cuda/query_blocks.hpp"

namespace polyattn::exec::cuda {

static_assert(kTiledRows == 64 && kTiledKeys == 64 && kTiledPrefillThreads == 256, "16 x 16 threads of 4 x 4");

/// The maximum over the 16 threads of a row group (lanes differing in their low four bits), NaN if
/// any holds NaN.
__device__ __forceinline__ float row_group_max(float x) {
  for (int offset = 8; offset > 0; offset /= 2) x = max_keeping_nan(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

__device__ __forceinline__ float row_group_sum(float x) {
  for (int offset = 8; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/// One token's products for a thread's 4 rows x 4 kColVec value columns: `weights` the 4 rows'
/// weights (a float4), `values` the thread's first 4 columns of the token's value row (then + 64,
/// + 128, + 192). A row that does not see the token (`seen`) adds nothing, not 0 x value.
template <int kColVec>
__device__ __forceinline__ void add_token_values(float (&acc)[4][4 * kColVec], const float* weights, const float* values,
                                                 const bool (&seen)[4]) {
  const float4 w = *reinterpret_cast<const float4*>(weights);
  const float ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int m = 0; m < kColVec; ++m) {
    const float4 v = *reinterpret_cast<const float4*>(values + 64 * m);
    const float vs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if (seen[i]) acc[i][4 * m + c] = fmaf(ws[i], vs[c], acc[i][4 * m + c]);
  }
}

/// kColVec: value columns per thread in fours, tiled_value_cols(value_dim) / 64 (1, 2 or 4).
template <class T, int kColVec>
__global__ void __launch_bounds__(kTiledPrefillThreads) attend_query_tiles(PrefillParams<T> p) {
  const AttendSpec& s = p.spec;
  const PrefillBlockIndex at = prefill_block_index(p);
  if (at.idle(p.max_chunks)) return;
  const QueryBlock& b = at.b;
  const int qh = at.qh, head = at.head, g = at.g, chunk = at.chunk, begin = at.begin, stop = at.stop;
  const int query_heads = s.cache_heads * s.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int rg = tid / 16, kg = tid % 16;
  const int dh = s.key_dim, dv = s.value_dim;
  constexpr int kS = kTiledStride, kCols = 64 * kColVec;

  // Shared memory (floats): queries q_t[d * kS + r], keys k_t[d * kS + t], values v_t[t * kCols + c],
  // weights w_t[t * kS + r] (query_blocks.hpp, tiled_prefill_shared_bytes).
  extern __shared__ __align__(16) float tiles_shared[];
  float* q_t = tiles_shared;
  float* k_t = q_t + dh * kS;
  float* v_t = k_t + dh * kS;
  float* w_t = v_t + kTiledKeys * kCols;

  // The queries, scaled, transposed; rows past the block's as zeros (computed, never written).
  for (int i = tid; i < kTiledRows * dh; i += kTiledPrefillThreads) {
    const int r = i / dh, d = i % dh;
    q_t[d * kS + r] = r < b.rows ? p.queries[std::int64_t(b.first_job + r) * p.query_stride + qh * dh + d] * s.scale : 0.0f;
  }

  // This thread's rows: their token ranges (a row past the block's takes the block's union, so that
  // it never holds a tile off the unchecked path), softmax states (the max is the row's; the sum
  // only this thread's tokens') and accumulators.
  int first[4], end[4];
  float run_max[4], run_sum[4], acc[4][4 * kColVec];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = 4 * rg + i;
    const DeviceJob jb = r < b.rows ? p.jobs[b.first_job + r] : DeviceJob{b.seq, b.key_first, b.key_end};
    first[i] = jb.first;
    end[i] = jb.end;
    run_max[i] = kNegativeInfinity<float>;
    run_sum[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < 4 * kColVec; ++c) acc[i][c] = 0.0f;
  }
  const int key_column = s.key_offset + g * s.key_group_stride;

  for (int tile = begin; tile < stop; tile += kTiledKeys) {
    const int n = min(kTiledKeys, stop - tile);
    __syncthreads();  // the last tile's reads are done (and, the first time, the queries written)
    // 1. The tile's keys (transposed) and values as float; tokens past its end as zeros (never
    // weighted), and value columns past value_dim too. Warp w converts tokens w, w + 8, ...
    for (int t = warp; t < kTiledKeys; t += kTiledPrefillThreads / 32) {
      if (t < n) {
        const T* key = p.cache.row(s.key_tensor, b.seq, tile + t, head) + key_column;
        const T* value = p.cache.row(s.value_tensor, b.seq, tile + t, head) + s.value_offset;
        for (int d = lane; d < dh; d += 32) k_t[d * kS + t] = static_cast<float>(key[d]);
        for (int c = lane; c < kCols; c += 32) v_t[t * kCols + c] = c < dv ? static_cast<float>(value[c]) : 0.0f;
      } else {
        for (int d = lane; d < dh; d += 32) k_t[d * kS + t] = 0.0f;
        for (int c = lane; c < kCols; c += 32) v_t[t * kCols + c] = 0.0f;
      }
    }
    __syncthreads();

    // 2. Scores of the thread's 4 rows x 4 tokens.
    float score[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) score[i][j] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < dh; ++d) {
      const float4 q = *reinterpret_cast<const float4*>(q_t + d * kS + 4 * rg);
      const float4 k = *reinterpret_cast<const float4*>(k_t + d * kS + 4 * kg);
      const float qs[4] = {q.x, q.y, q.z, q.w}, ks[4] = {k.x, k.y, k.z, k.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) score[i][j] = fmaf(qs[i], ks[j], score[i][j]);
    }

    // 3. Online softmax per row. `whole`: each of the thread's rows sees every token of the tile.
    bool whole = n == kTiledKeys;
#pragma unroll
    for (int i = 0; i < 4; ++i) whole = whole && first[i] <= tile && tile + kTiledKeys <= end[i];
    float weight[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float tile_max = kNegativeInfinity<float>;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int t = 4 * kg + j, token = tile + t;
        const bool seen = whole || (t < n && token >= first[i] && token < end[i]);
        score[i][j] = seen ? bounded_score(score[i][j]) : kNegativeInfinity<float>;
        tile_max = max_keeping_nan(tile_max, score[i][j]);
      }
      SoftmaxState<float> state;
      state.max = run_max[i];
      state.sum = run_sum[i];
      const float factor = state.raise_max(row_group_max(tile_max));  // the same in the 16 threads
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        weight[i][j] = state.empty() ? 0.0f : expf(score[i][j] - state.max);
        sum += weight[i][j];
      }
      run_max[i] = state.max;
      run_sum[i] = state.sum + sum;
#pragma unroll
      for (int c = 0; c < 4 * kColVec; ++c) acc[i][c] *= factor;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
      *reinterpret_cast<float4*>(w_t + (4 * kg + j) * kS + 4 * rg) = make_float4(weight[0][j], weight[1][j], weight[2][j], weight[3][j]);
    __syncwarp();  // a row group's weights are written and read by its own 16 threads

    // 4. Values: per token, the 4 rows' weights and the thread's value columns.
    if (whole) {
      const bool all[4] = {true, true, true, true};
#pragma unroll 4
      for (int t = 0; t < kTiledKeys; ++t) add_token_values<kColVec>(acc, w_t + t * kS + 4 * rg, v_t + t * kCols + 4 * kg, all);
    } else {
      for (int t = 0; t < n; ++t) {
        bool seen[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) seen[i] = tile + t >= first[i] && tile + t < end[i];
        add_token_values<kColVec>(acc, w_t + t * kS + 4 * rg, v_t + t * kCols + 4 * kg, seen);
      }
    }
  }

  // 5. The rows' sums over the 16 threads; then, with one chunk, the normalised outputs (as
  // merge_chunks does); with several, the partials for merge_chunks.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float row_sum = row_group_sum(run_sum[i]);
    const int r = 4 * rg + i;
    if (r >= b.rows) continue;
    const std::int64_t row_head = std::int64_t(b.first_job + r) * query_heads + qh;
    float* out;
    float inv = 1.0f;
    if (p.max_chunks == 1) {
      inv = row_sum > 0.0f ? 1.0f / row_sum : 0.0f;
      out = p.out + std::int64_t(b.first_job + r) * p.out_stride + qh * dv;
    } else {
      const std::int64_t slot = row_head * p.max_chunks + chunk;
      if (kg == 0) {
        p.states[slot].max = run_max[i];
        p.states[slot].sum = row_sum;
      }
      out = p.acc + slot * dv;
    }
#pragma unroll
    for (int m = 0; m < kColVec; ++m)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int col = 64 * m + 4 * kg + c;
        if (col < dv) out[col] = acc[i][4 * m + c] * inv;
      }
  }
}

}  // namespace polyattn::exec::cuda
