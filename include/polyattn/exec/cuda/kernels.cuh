// The CUDA kernels of the attend primitive (core/attend.hpp), written for review first:
//
//   attend_chunks  split-K (flash-decoding): one block per (query job, cache head, group tile,
//                  chunk of the job's visible tokens). For the <= kGroupTile query heads of its
//                  tile it computes scores (key_dim dots), a running max and sum, and the
//                  weighted sum of value rows, and writes the chunk's partial (max, sum, acc).
//   merge_chunks   one block per (job, query head): merges the job's chunks in order with
//                  merge_softmax (core/online_softmax.hpp, shared with the CPU executors) and
//                  normalises.
//   scatter_rows   places staged host rows into the device cache through the layout view.
//
// Keys and values are read through DeviceCacheView, so one kernel serves Nhd, Hnd and Paged<P>,
// and through AttendSpec (tensor, column offset, dims, group), so MHA/GQA/MQA and every variant
// that reduces to the primitive (K-only caches, X-cache, MLA absorbed decode) run unchanged.
// A prefill whose rows come in runs of one sequence takes prefill_blocks.cuh instead; otherwise
// each query row is a job of these kernels with its own range of tokens.
// Accumulation is fp32; the cache element type T is anything convertible to float. Scores at the
// limits (-inf, overflow to +inf, no visible token) as core/attend.hpp says, as on the CPU.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/online_softmax.hpp"
#include "polyattn/exec/cuda/device_layout.hpp"
#include "polyattn/exec/cuda/query_blocks.hpp"  // DeviceJob

namespace polyattn::exec::cuda {

inline constexpr int kThreads = 256;              // threads of an attend_chunks block
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kGroupTile = kWarps;         // query heads per block; warp g runs head g's softmax
inline constexpr int kTileTokens = 64;            // tokens scored at once (scores stay in shared memory)
inline constexpr int kMaxKeyDim = 2048;           // query tile in shared memory: kGroupTile * key_dim floats
inline constexpr int kMaxValueDim = 2048;         // accumulators: 8 column slots of 256 threads
inline constexpr int kMergeThreads = 128;
inline constexpr int kMergeSlots = kMaxValueDim / kMergeThreads;
inline constexpr int kBlocksPerSm = 8;            // split target: about two waves of resident blocks
inline constexpr int kMaxGridYZ = 65535;

/// One staged cache row: token `token` of `seq` in `tensor`, all heads, at `offset` in staging.
struct StagedRow {
  int tensor;
  int seq;
  int token;
  int unused;
  std::int64_t offset;
};

template <class T>
struct ChunkParams {
  DeviceCacheView<T> cache;
  AttendSpec spec;
  const DeviceJob* jobs;
  const float* queries;         // (jobs, query_heads, key_dim)
  int chunk_tokens;             // job j has ceil((end_j - first_j) / chunk_tokens) chunks
  int max_chunks;
  SoftmaxState<float>* states;  // (jobs, query_heads, max_chunks)
  float* acc;                   // (jobs, query_heads, max_chunks, value_dim), unnormalised
};

struct MergeParams {
  const DeviceJob* jobs;
  int query_heads;
  int value_dim;
  int chunk_tokens;
  int max_chunks;
  const SoftmaxState<float>* states;
  const float* acc;
  float* out;               // job j's output at out + j * out_stride: (query_heads, value_dim)
  std::int64_t out_stride;
};

/// How a batch is split: chunk length and the largest number of chunks of any job.
struct ChunkPlan {
  int chunk_tokens = kTileTokens;
  int max_chunks = 1;
};

/// Splits sequences only as far as needed to give every SM work: a batch with many
/// (job, head) pairs gets one chunk per job, a single long sequence gets many.
/// `blocks_per_sm`: the blocks a split aims at per SM (0: no split).
inline ChunkPlan plan_chunks(int jobs, int head_blocks, int max_visible, int sm_count, int blocks_per_sm = kBlocksPerSm) {
  const auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  const std::int64_t pairs = std::max<std::int64_t>(1, std::int64_t(jobs) * head_blocks);
  const std::int64_t target = std::int64_t(std::max(0, blocks_per_sm)) * std::max(1, sm_count);
  const std::int64_t splits = std::clamp<std::int64_t>(ceil_div(target, pairs), 1, kMaxGridYZ);
  const std::int64_t visible = std::max(1, max_visible);
  std::int64_t chunk = std::max<std::int64_t>({kTileTokens, ceil_div(visible, splits), ceil_div(visible, kMaxGridYZ)});
  chunk = ceil_div(chunk, kTileTokens) * kTileTokens;
  return {int(chunk), int(ceil_div(visible, chunk))};
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/// max(a, b), NaN if either is: fmaxf alone drops NaN, and a NaN score beside only -inf ones
/// would then weigh 0 instead of making the output NaN (core/attend.hpp). A NaN running max makes
/// raise_max's factor and every later weight NaN, so the row's output is NaN, as on the CPU.
__device__ __forceinline__ float max_keeping_nan(float a, float b) {
  return isnan(a) || isnan(b) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
}

/// The lanes' maximum (NaN if any lane holds NaN).
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x = max_keeping_nan(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

/// One warp's online-softmax step for one head over a tile: raises the head's running max to the
/// tile's, turns `scores[0, n)` into exp(score - max) in place, adds them to the running sum, and
/// leaves in `rescale` the factor for what was accumulated under the old max. A tile seen while
/// every score so far is -inf weighs 0 (never exp(-inf - -inf)). run_max, run_sum and rescale
/// are the head's shared-memory slots; every lane of the warp must call.
__device__ __forceinline__ void softmax_tile(float* scores, int n, float& run_max, float& run_sum, float& rescale, int lane) {
  float m = kNegativeInfinity<float>;
  for (int t = lane; t < n; t += 32) m = max_keeping_nan(m, scores[t]);
  m = warp_max(m);
  SoftmaxState<float> state;
  state.max = run_max;
  state.sum = run_sum;
  const float factor = state.raise_max(m);  // rescales state.sum
  const bool nothing = state.empty();
  float sum = 0.0f;
  for (int t = lane; t < n; t += 32) {
    const float w = nothing ? 0.0f : expf(scores[t] - state.max);
    scores[t] = w;
    sum += w;
  }
  sum = warp_sum(sum);  // also orders every lane's read of run_* before lane 0's write
  if (lane == 0) {
    run_max = state.max;
    run_sum = state.sum + sum;
    rescale = factor;
  }
}

/// What one block of a decode kernel (attend_chunks, attend_tiles) works on. The grid is
/// x = query job, y = cache head x group tile (of `group_tile` query heads), z = chunk of the
/// job's tokens [first, end); the host sizes it from the same group tile (exec/cuda/cuda.cuh).
struct BlockWork {
  int job, head, chunk;
  int g0, gn;            ///< the tile's first query head within the group, and how many it has
  int first_head;        ///< the tile's first query head among all of the job's
  DeviceJob jb;
  int begin, end;        ///< the chunk's tokens [begin, end); empty when past the job's last chunk
  std::int64_t first_out;  ///< partial-result slot of (job, first_head, chunk); + g * max_chunks for head g

  __device__ bool empty() const { return begin >= jb.end; }

  /// The chunk's softmax state of each of the block's heads, from their shared-memory slots
  /// (threads tid < gn each write one).
  __device__ void store_states(SoftmaxState<float>* states, int max_chunks, const float* run_max, const float* run_sum,
                               int tid) const {
    if (tid < gn) {
      SoftmaxState<float>& out = states[first_out + std::int64_t(tid) * max_chunks];
      out.max = run_max[tid];
      out.sum = run_sum[tid];
    }
  }
};

template <class T>
__device__ __forceinline__ BlockWork block_work(const ChunkParams<T>& p, int group_tile) {
  const AttendSpec& s = p.spec;
  const int group_tiles = (s.group + group_tile - 1) / group_tile;
  BlockWork w;
  w.job = blockIdx.x;
  w.head = blockIdx.y / group_tiles;
  w.chunk = blockIdx.z;
  w.g0 = (blockIdx.y % group_tiles) * group_tile;
  w.gn = min(group_tile, s.group - w.g0);
  w.first_head = w.head * s.group + w.g0;
  w.jb = p.jobs[w.job];
  w.begin = w.jb.first + w.chunk * p.chunk_tokens;
  w.end = min(w.jb.end, w.begin + p.chunk_tokens);
  w.first_out = (std::int64_t(w.job) * s.cache_heads * s.group + w.first_head) * p.max_chunks + w.chunk;
  return w;
}

/// kColSlots: value columns per thread, ceil(value_dim / 256) rounded up to 1, 2, 4 or 8.
template <class T, int kColSlots>
__global__ void __launch_bounds__(kThreads) attend_chunks(ChunkParams<T> p) {
  extern __shared__ float q_tile[];                // (kGroupTile, key_dim), softmax scale folded in
  __shared__ float weights[kGroupTile][kTileTokens];  // scores, then exp(score - running max)
  __shared__ float run_max[kGroupTile], run_sum[kGroupTile], rescale[kGroupTile];
  __shared__ float partial[kGroupTile][kThreads];  // token-row reduction of the accumulators

  const AttendSpec& s = p.spec;
  const BlockWork w = block_work(p, kGroupTile);
  if (w.empty()) return;  // past this job's last chunk; merge_chunks does not read it
  const int job = w.job, head = w.head, g0 = w.g0, gn = w.gn, begin = w.begin, end = w.end, first_head = w.first_head;
  const DeviceJob jb = w.jb;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int query_heads = s.cache_heads * s.group;

  const float* q = p.queries + (std::int64_t(job) * query_heads + first_head) * s.key_dim;
  for (int i = tid; i < gn * s.key_dim; i += kThreads) q_tile[i] = q[i] * s.scale;
  if (tid < kGroupTile) {
    run_max[tid] = kNegativeInfinity<float>;
    run_sum[tid] = 0.0f;
  }

  // Thread (row, col) accumulates value columns col + k * cols over tokens row, row + rows, ...
  const int cols = min(kThreads, (s.value_dim + 31) / 32 * 32);
  const int rows = kThreads / cols;
  const int col = tid % cols, row = tid / cols;
  float acc[kGroupTile][kColSlots];
#pragma unroll
  for (int g = 0; g < kGroupTile; ++g)
#pragma unroll
    for (int k = 0; k < kColSlots; ++k) acc[g][k] = 0.0f;
  __syncthreads();

  for (int tile = begin; tile < end; tile += kTileTokens) {
    const int n = min(kTileTokens, end - tile);

    // 1. Scores: warp w takes tokens w, w + kWarps, ...; its lanes split the key row.
    for (int t = warp; t < n; t += kWarps) {
      const T* key = p.cache.row(s.key_tensor, jb.seq, tile + t, head) + s.key_offset;
      float dot[kGroupTile];
#pragma unroll
      for (int g = 0; g < kGroupTile; ++g) dot[g] = 0.0f;
      if (s.key_group_stride == 0) {  // one key row for the whole group (MHA/GQA/MQA, MLA, X-cache)
        for (int i = lane; i < s.key_dim; i += 32) {
          const float k = static_cast<float>(key[i]);
#pragma unroll
          for (int g = 0; g < kGroupTile; ++g)
            if (g < gn) dot[g] += q_tile[g * s.key_dim + i] * k;
        }
      } else {  // query head g0 + g scores against its own slice of the row (slim K-only, option 2)
        for (int i = lane; i < s.key_dim; i += 32)
#pragma unroll
          for (int g = 0; g < kGroupTile; ++g)
            if (g < gn) dot[g] += q_tile[g * s.key_dim + i] * static_cast<float>(key[std::int64_t(g0 + g) * s.key_group_stride + i]);
      }
#pragma unroll
      for (int g = 0; g < kGroupTile; ++g) {
        const float d = warp_sum(dot[g]);
        if (lane == 0 && g < gn) weights[g][t] = bounded_score(d);
      }
    }
    __syncthreads();

    // 2. Online softmax: warp g raises head g's running max and turns its scores into weights.
    if (warp < gn) softmax_tile(weights[warp], n, run_max[warp], run_sum[warp], rescale[warp], lane);
    __syncthreads();

    // 3. Values: rescale what was accumulated under the old max, add this tile's weighted rows.
    if (row < rows) {
#pragma unroll
      for (int g = 0; g < kGroupTile; ++g) {
        const float f = g < gn ? rescale[g] : 0.0f;
#pragma unroll
        for (int k = 0; k < kColSlots; ++k) acc[g][k] *= f;
      }
      for (int t = row; t < n; t += rows) {
        const T* value = p.cache.row(s.value_tensor, jb.seq, tile + t, head) + s.value_offset;
#pragma unroll
        for (int k = 0; k < kColSlots; ++k) {
          const int c = col + k * cols;
          if (c < s.value_dim) {
            const float v = static_cast<float>(value[c]);
#pragma unroll
            for (int g = 0; g < kGroupTile; ++g)
              if (g < gn) acc[g][k] += weights[g][t] * v;
          }
        }
      }
    }
    __syncthreads();  // the next tile overwrites `weights`
  }

  // 4. Sum the token rows' accumulators; write this chunk's partial result per query head.
  const std::int64_t first_out = w.first_out;  // + g * max_chunks
#pragma unroll
  for (int k = 0; k < kColSlots; ++k) {
#pragma unroll
    for (int g = 0; g < kGroupTile; ++g) partial[g][tid] = acc[g][k];
    __syncthreads();
    const int c = col + k * cols;
    if (row == 0 && c < s.value_dim)
      for (int g = 0; g < gn; ++g) {
        float sum = 0.0f;
        for (int r = 0; r < rows; ++r) sum += partial[g][r * cols + col];
        p.acc[(first_out + std::int64_t(g) * p.max_chunks) * s.value_dim + c] = sum;
      }
    __syncthreads();
  }
  w.store_states(p.states, p.max_chunks, run_max, run_sum, tid);
}

/// Acc: the accumulator type of the partials (float).
template <class Acc>
__global__ void __launch_bounds__(kMergeThreads) merge_chunks(MergeParams p) {
  const int job = blockIdx.x, qh = blockIdx.y, tid = threadIdx.x;
  const DeviceJob jb = p.jobs[job];
  const int n_chunks = (max(0, jb.end - jb.first) + p.chunk_tokens - 1) / p.chunk_tokens;
  // This thread's columns: tid + k * kMergeThreads for k < count.
  const int count = tid < p.value_dim ? (p.value_dim - tid - 1) / kMergeThreads + 1 : 0;
  const std::int64_t first = (std::int64_t(job) * p.query_heads + qh) * p.max_chunks;

  SoftmaxState<Acc> state;
  Acc acc[kMergeSlots], other[kMergeSlots];
  for (int k = 0; k < count; ++k) acc[k] = Acc(0);
  for (int c = 0; c < n_chunks; ++c) {
    for (int k = 0; k < count; ++k) other[k] = p.acc[(first + c) * p.value_dim + tid + k * kMergeThreads];
    merge_softmax(state, acc, p.states[first + c], other, count);
  }
  const Acc inv = state.sum > Acc(0) ? Acc(1) / state.sum : Acc(0);
  float* out = p.out + std::int64_t(job) * p.out_stride + std::int64_t(qh) * p.value_dim;
  for (int k = 0; k < count; ++k) out[tid + k * kMergeThreads] = float(acc[k] * inv);
}

/// One block per staged row: element e of the row is head e / dim, column e % dim.
template <class T>
__global__ void scatter_rows(DeviceCacheView<T> cache, const StagedRow* rows, const T* staging) {
  const StagedRow r = rows[blockIdx.x];
  const int dim = cache.dim[r.tensor], n = cache.heads[r.tensor] * dim;
  for (int e = threadIdx.x; e < n; e += blockDim.x) cache.row(r.tensor, r.seq, r.token, e / dim)[e % dim] = staging[r.offset + e];
}

}  // namespace polyattn::exec::cuda
