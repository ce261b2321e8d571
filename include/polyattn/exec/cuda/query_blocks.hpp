// Whether, and how, a call runs on the prefill kernel (prefill_blocks.cuh): consecutive query jobs
// of one sequence are taken kPrefillRows at a time, so a block reads each key and value row once
// for all of its rows instead of once per row. Decided on the host; plain C++ (no CUDA types), so
// the plan is tested on any machine (tests/test_cuda_layout.cpp).
//
// A block attends over the union [key_first, key_end) of its rows' ranges; each row still sees
// only its own [first, end) (its key mask's range, core/key_mask.hpp), the rest of the union is
// masked inside the kernel. Prefill's jobs (Attention::prefill, one per query row, ranges growing
// by one token a row under a causal mask) make blocks whose rows share most of their tokens.
//
// The call goes to a prefill kernel when its rows come in runs: at least kPrefillMinRows rows a
// block on average. A decode batch (one row per sequence) stays on the decode kernels.
//
// Two prefill kernels: the register-tiled one (prefill_tiles.cuh: 64 rows a block, 64-token
// tiles, each thread a 4 x 4 block of scores and of outputs), taken wherever its shared memory
// fits, and the simple one (prefill_blocks.cuh: 32 rows a block), which needs about half as much
// (128-wide heads on GPUs with 99 KiB a block, say) and can be forced for comparisons.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/host_device.hpp"

namespace polyattn::exec::cuda {

/// One query row as the device sees it: its sequence and the tokens [first, end) it attends to
/// (its key mask's range, core/key_mask.hpp; [0, visible) by default).
struct DeviceJob {
  int seq;
  int first;
  int end;
};

inline constexpr int kPrefillRows = 32;     // query rows of a block: 4 warps x 8 rows
inline constexpr int kPrefillKeys = 32;     // key rows of a tile: one per lane
inline constexpr int kPrefillMaxDim = 256;  // key and value widths (accumulators: 8 rows x 8 column slots a lane)
inline constexpr int kPrefillMinRows = 8;   // rows a block on average for the call to take this kernel

/// Jobs [first_job, first_job + rows) of sequence `seq`; their tokens lie in [key_first, key_end).
struct QueryBlock {
  int first_job;
  int rows;
  int seq;
  int key_first;
  int key_end;
};

/// Columns of a query row in shared memory: key_dim rounded up to 4 (read four at a time).
POLYATTN_HOST_DEVICE int prefill_query_cols(int key_dim) { return (key_dim + 3) / 4 * 4; }

/// Columns of a row of the key tile: the query's, plus one so that the lanes, each on its own key
/// row, read different shared-memory banks.
POLYATTN_HOST_DEVICE int prefill_key_stride(int key_dim) { return prefill_query_cols(key_dim) + 1; }

/// Shared-memory bytes of a prefill block: the block's queries, one tile of key and of value rows
/// (as float), and the tile's weights.
inline std::size_t prefill_shared_bytes(const AttendSpec& s) {
  const std::size_t queries = std::size_t(kPrefillRows) * std::size_t(prefill_query_cols(s.key_dim));
  const std::size_t keys = std::size_t(kPrefillKeys) * std::size_t(prefill_key_stride(s.key_dim));
  const std::size_t values = std::size_t(kPrefillKeys) * std::size_t(s.value_dim);
  const std::size_t weights = std::size_t(kPrefillRows) * kPrefillKeys;
  return (queries + keys + values + weights) * sizeof(float);
}

/// The query blocks of these jobs: runs of consecutive jobs of one sequence, `rows` at most.
inline std::vector<QueryBlock> query_blocks(std::span<const DeviceJob> jobs, int rows = kPrefillRows) {
  std::vector<QueryBlock> blocks;
  for (int j = 0; j < int(jobs.size()); ++j) {
    const DeviceJob& job = jobs[std::size_t(j)];
    const int first = job.first, end = job.end > job.first ? job.end : job.first;  // an empty range adds no token
    if (blocks.empty() || blocks.back().seq != job.seq || blocks.back().rows == rows) {
      blocks.push_back({j, 1, job.seq, first, end});
      continue;
    }
    QueryBlock& b = blocks.back();
    ++b.rows;
    if (first < end) {
      if (b.key_first >= b.key_end) {  // the block's rows so far see nothing
        b.key_first = first;
        b.key_end = end;
      } else {
        b.key_first = first < b.key_first ? first : b.key_first;
        b.key_end = end > b.key_end ? end : b.key_end;
      }
    }
  }
  return blocks;
}

/// The register-tiled kernel (prefill_tiles.cuh): rows and tokens of a block and a tile.
inline constexpr int kTiledRows = 64;
inline constexpr int kTiledKeys = 64;
inline constexpr int kTiledPrefillThreads = 256;  // 16 x 16 threads, each 4 rows x 4 tokens (or 4 value columns)
/// Floats a row of its transposed tiles takes: 64 entries, plus 4 so that a row stays 16-byte
/// aligned and a column's stores spread over 8 banks instead of one.
inline constexpr int kTiledStride = kTiledKeys + 4;

/// Value columns the tiled kernel's threads cover in shared memory and registers: value_dim
/// rounded up to 64, 128 or 256 (16 threads x 4 columns, 1, 2 or 4 times).
POLYATTN_HOST_DEVICE int tiled_value_cols(int value_dim) { return value_dim <= 64 ? 64 : value_dim <= 128 ? 128 : 256; }

/// Shared-memory bytes of a tiled prefill block: the block's queries and a tile's keys, both
/// transposed (key_dim rows of kTiledStride), a tile's values (64 rows of tiled_value_cols), and
/// the tile's weights, transposed (64 rows of kTiledStride).
inline std::size_t tiled_prefill_shared_bytes(const AttendSpec& s) {
  const std::size_t transposed = 2 * std::size_t(s.key_dim) * kTiledStride;
  const std::size_t values = std::size_t(kTiledKeys) * std::size_t(tiled_value_cols(s.value_dim));
  const std::size_t weights = std::size_t(kTiledKeys) * kTiledStride;
  return (transposed + values + weights) * sizeof(float);
}

/// Which prefill kernel runs a call.
enum class PrefillKernel { tiled, simple };

/// Rows of a query block for `kernel`.
inline int prefill_rows(PrefillKernel kernel) { return kernel == PrefillKernel::tiled ? kTiledRows : kPrefillRows; }

/// Whether a call's keys and values fit the simple prefill kernel: at most kPrefillMaxDim wide, and its
/// shared memory within the device's limit for one block (cudaDevAttrMaxSharedMemoryPerBlockOptin:
/// 227 KiB on an H100, 99 KiB on sm_86 and sm_89, where 256-wide rows need 100 KiB).
inline bool prefill_fits(const AttendSpec& s, std::size_t max_shared_bytes) {
  return s.key_dim >= 1 && s.value_dim >= 1 && s.key_dim <= kPrefillMaxDim && s.value_dim <= kPrefillMaxDim &&
         prefill_shared_bytes(s) <= max_shared_bytes;
}

/// Whether a call fits the tiled prefill kernel: keys at most 256 wide (its queries' and keys'
/// transposed tiles), values at most 256, within the device's shared memory for one block.
inline bool tiled_prefill_fits(const AttendSpec& s, std::size_t max_shared_bytes) {
  return s.key_dim >= 1 && s.value_dim >= 1 && s.key_dim <= kPrefillMaxDim && s.value_dim <= kPrefillMaxDim &&
         tiled_prefill_shared_bytes(s) <= max_shared_bytes;
}

/// The prefill kernel for a call's shapes: the tiled one where it fits (and `allow_tiled`), else
/// the simple one where it fits, else none (the decode kernels run it).
inline std::optional<PrefillKernel> choose_prefill_kernel(const AttendSpec& s, std::size_t max_shared_bytes, bool allow_tiled = true) {
  if (allow_tiled && tiled_prefill_fits(s, max_shared_bytes)) return PrefillKernel::tiled;
  if (prefill_fits(s, max_shared_bytes)) return PrefillKernel::simple;
  return std::nullopt;
}

/// A call's query blocks for one prefill kernel, or nothing when the call should run on the
/// decode kernels (rows not in runs).
inline std::optional<std::vector<QueryBlock>> plan_blocks_in_runs(std::span<const DeviceJob> jobs, int rows) {
  if (jobs.size() < std::size_t(kPrefillMinRows)) return std::nullopt;
  std::vector<QueryBlock> blocks = query_blocks(jobs, rows);
  if (jobs.size() < blocks.size() * std::size_t(kPrefillMinRows)) return std::nullopt;
  return blocks;
}

/// A prefill kernel and its query blocks.
struct PrefillPlan {
  PrefillKernel kernel;
  std::vector<QueryBlock> blocks;
};

/// The prefill plan for a call: choose_prefill_kernel's kernel over blocks of its rows, or
/// nothing when the call should run on the decode kernels.
inline std::optional<PrefillPlan> plan_prefill(const AttendSpec& s, std::span<const DeviceJob> jobs, std::size_t max_shared_bytes,
                                               bool allow_tiled = true) {
  const std::optional<PrefillKernel> kernel = choose_prefill_kernel(s, max_shared_bytes, allow_tiled);
  if (!kernel) return std::nullopt;
  std::optional<std::vector<QueryBlock>> blocks = plan_blocks_in_runs(jobs, prefill_rows(*kernel));
  if (!blocks) return std::nullopt;
  return PrefillPlan{*kernel, std::move(*blocks)};
}

}  // namespace polyattn::exec::cuda
