// The prefill kernel: a simple tiled flash-attention over query blocks (query_blocks.hpp plans
// them). One block per (query block of up to 32 rows of one sequence, query head, chunk of the
// query block's tokens), 4 warps:
//
//   - the block's queries (scaled) sit in shared memory for the whole block;
//   - tiles of 32 tokens: the key and value rows of the tile are converted to float into shared
//     memory once, for all 32 rows (the decode kernels read them once per row);
//   - scores: warp w owns rows 8w .. 8w + 7, lane j scores token j of the tile against those 8
//     rows (8 dots of key_dim; a lane reads its own key row, the queries as broadcast float4s);
//   - online softmax per row across the warp (one max and one rescale per row and tile);
//   - values: lane c owns value columns c, c + 32, ... of its warp's 8 rows; the tile's weights
//     go through shared memory and are read four at a time.
// Where the query blocks and heads alone would not fill the GPU, the tokens are split into chunks
// (plan_chunks, as for decode): each block writes its rows' partial (max, sum, acc) and
// merge_chunks combines them, over jobs that carry their query block's range; with one chunk the
// block writes its rows' normalised output directly. Accumulation is fp32, as in the decode kernels. A row sees only its own
// tokens [first, end) of the block's union: other tokens get no weight and their values are not
// read into its sum (a token outside a row's mask may hold anything, NaN included). Scores at the
// limits (-inf, overflow, nothing visible) behave as in attend_chunks (core/attend.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/online_softmax.hpp"
#include "polyattn/exec/cuda/device_layout.hpp"
#include "polyattn/exec/cuda/kernels.cuh"
#include "polyattn/exec/cuda/query_blocks.hpp"

namespace polyattn::exec::cuda {

inline constexpr int kPrefillThreads = 128;
inline constexpr int kPrefillWarps = kPrefillThreads / 32;
inline constexpr int kRowsPerWarp = kPrefillRows / kPrefillWarps;
static_assert(kPrefillKeys == 32, "one key of a tile per lane");

template <class T>
struct PrefillParams {
  DeviceCacheView<T> cache;
  AttendSpec spec;
  const DeviceJob* jobs;
  const QueryBlock* blocks;
  const float* queries;        // job j's query row at queries + j * query_stride: (query_heads, key_dim)
  std::int64_t query_stride;
  float* out;                  // job j's output at out + j * out_stride: (query_heads, value_dim),
  std::int64_t out_stride;     //   normalised; written here when max_chunks == 1
  int chunk_tokens;      // chunk z of a query block: tokens key_first + z * chunk_tokens, ... (plan_chunks)
  int max_chunks;
  SoftmaxState<float>* states;  // (jobs, query_heads, max_chunks) partials, when max_chunks > 1
  float* acc;                   // (jobs, query_heads, max_chunks, value_dim), unnormalised
};

/// What a prefill block (of either kernel) works on: its query block, its query head (and the
/// cache head and group member that head reads), and its chunk of the block's tokens [begin, stop).
struct PrefillBlockIndex {
  QueryBlock b;
  int qh, head, g, chunk, begin, stop;
  /// Past the query block's last chunk: merge_chunks does not read it. A block whose rows see no
  /// token at all still writes their zeros when it is the only chunk.
  __device__ bool idle(int max_chunks) const { return begin >= b.key_end && (chunk > 0 || max_chunks > 1); }
};

template <class T>
__device__ PrefillBlockIndex prefill_block_index(const PrefillParams<T>& p) {
  PrefillBlockIndex at;
  at.b = p.blocks[blockIdx.x];
  at.qh = blockIdx.y;
  at.head = at.qh / p.spec.group;
  at.g = at.qh % p.spec.group;
  at.chunk = blockIdx.z;
  at.begin = at.b.key_first + at.chunk * p.chunk_tokens;
  at.stop = min(at.b.key_end, at.begin + p.chunk_tokens);
  return at;
}

/// kColSlots: value columns per lane, ceil(value_dim / 32) rounded up to 1, 2, 4 or 8.
template <class T, int kColSlots>
__global__ void __launch_bounds__(kPrefillThreads) attend_query_blocks(PrefillParams<T> p) {
  const AttendSpec& s = p.spec;
  const PrefillBlockIndex at = prefill_block_index(p);
  if (at.idle(p.max_chunks)) return;
  const QueryBlock& b = at.b;
  const int qh = at.qh, head = at.head, g = at.g, chunk = at.chunk, begin = at.begin, stop = at.stop;
  const int query_heads = s.cache_heads * s.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int query_cols = prefill_query_cols(s.key_dim), key_stride = prefill_key_stride(s.key_dim), dv = s.value_dim;

  // Shared memory: queries (kPrefillRows, query_cols), keys (kPrefillKeys, key_stride), values
  // (kPrefillKeys, dv), weights (kPrefillRows, kPrefillKeys); all float.
  extern __shared__ __align__(16) float prefill_shared[];
  float* q_tile = prefill_shared;
  float* k_tile = q_tile + kPrefillRows * query_cols;
  float* v_tile = k_tile + kPrefillKeys * key_stride;
  float* w_tile = v_tile + kPrefillKeys * dv;

  for (int i = tid; i < kPrefillRows * query_cols; i += kPrefillThreads) {
    const int r = i / query_cols, d = i % query_cols;
    q_tile[i] = r < b.rows && d < s.key_dim ? p.queries[std::int64_t(b.first_job + r) * p.query_stride + qh * s.key_dim + d] * s.scale
                                            : 0.0f;
  }

  // This warp's rows: their ranges, softmax states and accumulators (the same in every lane).
  int first[kRowsPerWarp], end[kRowsPerWarp];
  float run_max[kRowsPerWarp], run_sum[kRowsPerWarp], acc[kRowsPerWarp][kColSlots];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp * kRowsPerWarp + i;
    const DeviceJob jb = r < b.rows ? p.jobs[b.first_job + r] : DeviceJob{b.seq, 0, 0};
    first[i] = jb.first;
    end[i] = jb.end;
    run_max[i] = kNegativeInfinity<float>;
    run_sum[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kColSlots; ++c) acc[i][c] = 0.0f;
  }
  const int key_column = s.key_offset + g * s.key_group_stride;

  for (int tile = begin; tile < stop; tile += kPrefillKeys) {
    const int n = min(kPrefillKeys, stop - tile);
    __syncthreads();  // the last tile's reads are done (and, the first time, the queries written)
    // 1. The tile's rows as float; tokens past its end as zeros (never weighted).
    for (int t = warp; t < kPrefillKeys; t += kPrefillWarps) {
      float* key_row = k_tile + t * key_stride;
      float* value_row = v_tile + t * dv;
      if (t < n) {
        const T* key = p.cache.row(s.key_tensor, b.seq, tile + t, head) + key_column;
        const T* value = p.cache.row(s.value_tensor, b.seq, tile + t, head) + s.value_offset;
        for (int d = lane; d < query_cols; d += 32) key_row[d] = d < s.key_dim ? static_cast<float>(key[d]) : 0.0f;
        for (int c = lane; c < dv; c += 32) value_row[c] = static_cast<float>(value[c]);
      } else {
        for (int d = lane; d < query_cols; d += 32) key_row[d] = 0.0f;
        for (int c = lane; c < dv; c += 32) value_row[c] = 0.0f;
      }
    }
    __syncthreads();

    // 2. Scores of token `lane` for the warp's rows.
    float score[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) score[i] = 0.0f;
    const float* key_row = k_tile + lane * key_stride;
    const float* q_rows = q_tile + warp * kRowsPerWarp * query_cols;
    for (int d = 0; d < query_cols; d += 4) {
      const float k0 = key_row[d], k1 = key_row[d + 1], k2 = key_row[d + 2], k3 = key_row[d + 3];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const float4 q = *reinterpret_cast<const float4*>(q_rows + i * query_cols + d);
        score[i] = fmaf(q.x, k0, fmaf(q.y, k1, fmaf(q.z, k2, fmaf(q.w, k3, score[i]))));
      }
    }

    // 3. Online softmax per row: weights of the tile's tokens into w_tile, accumulators rescaled.
    const int token = tile + lane;
    float* w_rows = w_tile + warp * kRowsPerWarp * kPrefillKeys;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const bool seen = lane < n && token >= first[i] && token < end[i];
      const float x = seen ? bounded_score(score[i]) : kNegativeInfinity<float>;
      SoftmaxState<float> state;
      state.max = run_max[i];
      state.sum = run_sum[i];
      const float factor = state.raise_max(warp_max(x));
      const float w = state.empty() ? 0.0f : expf(x - state.max);
      run_max[i] = state.max;
      run_sum[i] = state.sum + warp_sum(w);
#pragma unroll
      for (int c = 0; c < kColSlots; ++c) acc[i][c] *= factor;
      w_rows[i * kPrefillKeys + lane] = w;
    }
    __syncwarp();

    // 4. Values: tokens four at a time. A row that sees the whole tile takes plain products; a row
    // on its mask's edge adds only its own tokens' (0 * inf would be NaN).
    for (int t0 = 0; t0 < n; t0 += 4) {
      float v[4][kColSlots];
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int c = 0; c < kColSlots; ++c) {
          const int col = lane + 32 * c;
          v[u][c] = col < dv ? v_tile[(t0 + u) * dv + col] : 0.0f;
        }
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const float4 w = *reinterpret_cast<const float4*>(w_rows + i * kPrefillKeys + t0);
        const float ws[4] = {w.x, w.y, w.z, w.w};
        if (first[i] <= tile && tile + n <= end[i]) {
#pragma unroll
          for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int c = 0; c < kColSlots; ++c) acc[i][c] = fmaf(ws[u], v[u][c], acc[i][c]);
        } else {
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int at = tile + t0 + u;
            if (t0 + u < n && at >= first[i] && at < end[i])
#pragma unroll
              for (int c = 0; c < kColSlots; ++c) acc[i][c] = fmaf(ws[u], v[u][c], acc[i][c]);
          }
        }
      }
    }
  }

  // 5. One chunk: normalise and write the rows' outputs (as merge_chunks does). Several: write
  // the rows' partials for merge_chunks.
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp * kRowsPerWarp + i;
    if (r >= b.rows) break;
    const std::int64_t row_head = std::int64_t(b.first_job + r) * query_heads + qh;
    if (p.max_chunks == 1) {
      const float inv = run_sum[i] > 0.0f ? 1.0f / run_sum[i] : 0.0f;
      float* out = p.out + std::int64_t(b.first_job + r) * p.out_stride + qh * dv;
#pragma unroll
      for (int c = 0; c < kColSlots; ++c)
        if (lane + 32 * c < dv) out[lane + 32 * c] = acc[i][c] * inv;
    } else {
      const std::int64_t slot = row_head * p.max_chunks + chunk;
      if (lane == 0) {
        p.states[slot].max = run_max[i];
        p.states[slot].sum = run_sum[i];
      }
      float* out = p.acc + slot * dv;
#pragma unroll
      for (int c = 0; c < kColSlots; ++c)
        if (lane + 32 * c < dv) out[lane + 32 * c] = acc[i][c];
    }
  }
}

}  // namespace polyattn::exec::cuda
