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
// The call goes to the prefill kernel when its rows come in runs: at least kPrefillMinRows rows a
// block on average. A decode batch (one row per sequence) stays on the decode kernels.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
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

/// The query blocks of these jobs: runs of consecutive jobs of one sequence, kPrefillRows at most.
inline std::vector<QueryBlock> query_blocks(std::span<const DeviceJob> jobs) {
  std::vector<QueryBlock> blocks;
  for (int j = 0; j < int(jobs.size()); ++j) {
    const DeviceJob& job = jobs[std::size_t(j)];
    const int first = job.first, end = job.end > job.first ? job.end : job.first;  // an empty range adds no token
    if (blocks.empty() || blocks.back().seq != job.seq || blocks.back().rows == kPrefillRows) {
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

/// Whether a call's keys and values fit the prefill kernel: at most kPrefillMaxDim wide, and its
/// shared memory within the device's limit for one block (cudaDevAttrMaxSharedMemoryPerBlockOptin:
/// 227 KiB on an H100, 99 KiB on sm_86 and sm_89, where 256-wide rows need 100 KiB).
inline bool prefill_fits(const AttendSpec& s, std::size_t max_shared_bytes) {
  return s.key_dim >= 1 && s.value_dim >= 1 && s.key_dim <= kPrefillMaxDim && s.value_dim <= kPrefillMaxDim &&
         prefill_shared_bytes(s) <= max_shared_bytes;
}

/// The prefill kernel's blocks for these jobs, or nothing when the call should run on the decode
/// kernels (rows not in runs, or rows that do not fit it).
inline std::optional<std::vector<QueryBlock>> plan_query_blocks(const AttendSpec& s, std::span<const DeviceJob> jobs,
                                                                std::size_t max_shared_bytes) {
  if (!prefill_fits(s, max_shared_bytes) || jobs.size() < std::size_t(kPrefillMinRows)) return std::nullopt;
  std::vector<QueryBlock> blocks = query_blocks(jobs);
  if (jobs.size() < blocks.size() * std::size_t(kPrefillMinRows)) return std::nullopt;
  return blocks;
}

}  // namespace polyattn::exec::cuda
