// One attend call of the CPU executor, for the kernels of one xsimd architecture:
//   decode   one query row per sequence: parallel over (query row, cache head; all heads in one
//            task for Nhd and Paged<P>) and, when that leaves threads idle, over chunks of each
//            sequence (flash-decoding). Chunk results
//            are recombined exactly with the online-softmax merge, so one long sequence still
//            uses every core.
//   prefill  several consecutive query rows of one sequence (a prefill, an uncached attention):
//            blocks of rows, parallel over (block, cache head), each block reading a tile's keys
//            once for all its rows (attend_block.hpp).
// Both read only the tokens a row's key mask (core/key_mask.hpp) gives it, and ask the mask
// inside the tile loop when it drops keys.
//
// attend_jobs is a function template that is not inline, and everything it keeps between calls
// is in ExecutorState, which does not depend on the architecture: so a translation unit compiled
// for an architecture can instantiate it explicitly and one compiled without can call it
// (exec/cpu/dispatch_cpu_simd.hpp), the planning and the kernels always of one architecture.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include <Eigen/Core>
#include <xsimd/xsimd.hpp>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/key_mask.hpp"
#include "polyattn/core/online_softmax.hpp"
#include "polyattn/core/thread_pool.hpp"
#include "polyattn/exec/cpu/attend_block.hpp"
#include "polyattn/exec/cpu/kernels.hpp"
#include "polyattn/exec/cpu/scratch_floats.hpp"

namespace polyattn::exec::cpu {

/// What a CPU executor keeps between calls: its threads and the plan's buffers.
struct ExecutorState {
  /// `threads` counts the calling thread (0 = usable_cores(): the CPUs it may run on), or names a
  /// lent team (core/threads.hpp).
  explicit ExecutorState(Threads threads) : pool(std::make_unique<ThreadPool>(std::move(threads))) {}

  std::unique_ptr<ThreadPool> pool;
  std::vector<std::span<const QueryJob>> blocks;  // the plan: query blocks, and rows for the decode kernel
  std::vector<QueryJob> single;
  std::vector<SoftmaxState<float>> states;  // the decode kernel's per-(unit, query head) results
  ScratchFloats acc;
};

/// Smallest chunk a sequence is split into: below this the merge costs more than it saves.
inline constexpr int kMinChunk = 256;

/// Consecutive query rows of one sequence from which they are attended as blocks (prefill)
/// rather than one by one (decode).
inline constexpr int kMinBlockRows = 4;

namespace detail {

/// Every (block, cache head) is a task; the last blocks first, since under a causal mask they
/// see the most tokens (the pool hands tasks out in order, so long ones do not come last).
template <class Arch, class KeyMaskT, class Store>
void attend_blocks(ExecutorState& state, const Store& store, const AttendSpec& spec) {
  const int H = spec.cache_heads, n = int(state.blocks.size());
  state.pool->parallel_for(n * H, [&](int task) {
    thread_local BlockScratch scratch;
    const int block = n - 1 - task / H, head = task % H;
    attend_block<Arch, KeyMaskT>(store, spec, head, state.blocks[std::size_t(block)], scratch);
  });
}

/// The decode kernel: one query row per job, over the tokens of its key range.
template <class Arch, class KeyMaskT, class Store>
void attend_rows(ExecutorState& state, const Store& store, const AttendSpec& spec, std::span<const QueryJob> jobs) {
  const int H = spec.cache_heads, G = spec.group, dv = spec.value_dim;
  const int n_jobs = int(jobs.size());
  if (n_jobs == 0) return;

  // Plan: a unit is one (job, chunk, cache head); a task runs the units of one (job, chunk) for
  // a block of heads: all of them when a token's heads are adjacent in memory (Nhd), so that
  // each tile's rows are read once for all heads, or lie in one page (Paged<P>), else one.
  // Enough tasks for every thread (4 per thread smooths uneven lengths). Paged<P> with a task per
  // head read each head's block of a page (2 KiB: 16 half rows of 64) apart from the others, in
  // time and in DRAM; with all heads in one task a tile's pages are read whole, head after head,
  // and MHA and GQA<2> ran 1.06-1.37x faster at L 65536, batch 16 and L 4096, batch 64 (f32,
  // half, bfloat16, int8), 1.04-1.13x at L 65536, batch 1; MHA f32 at L 1500, batch 16 (in the
  // L3) ran 1.09-1.15x slower, the other cases there 0.93-1.08x as long (Intel Xeon, 2 threads,
  // Paged<16>, medians of 9-41 calls alternated in one process, the same outputs).
  const int heads_per_task = heads_adjacent<Store>() || heads_paged<Store>() ? H : 1;
  const int head_blocks = H / heads_per_task;
  const int blocks = n_jobs * head_blocks;
  const int wanted_splits = std::max(1, (4 * state.pool->size() + blocks - 1) / blocks);
  std::vector<int> chunk_len(std::size_t{0} + std::size_t(n_jobs));
  std::vector<int> first_unit(std::size_t(n_jobs) + 1, 0), first_task(std::size_t(n_jobs) + 1, 0);
  for (int j = 0; j < n_jobs; ++j) {
    const int visible = KeyMaskT::range(jobs[std::size_t(j)]).size();
    const int splits = std::clamp((visible + kMinChunk - 1) / kMinChunk, 1, wanted_splits);
    chunk_len[std::size_t(j)] = std::max(1, (visible + splits - 1) / splits);
    const int chunks = std::max(1, (visible + chunk_len[std::size_t(j)] - 1) / chunk_len[std::size_t(j)]);
    first_unit[std::size_t(j) + 1] = first_unit[std::size_t(j)] + chunks * H;
    first_task[std::size_t(j) + 1] = first_task[std::size_t(j)] + chunks * head_blocks;
  }
  const int n_units = first_unit.back();

  // Per unit and query head of the group: a softmax state and a value accumulator; the units
  // of one (job, chunk) are adjacent, head after head.
  state.states.assign(std::size_t(n_units) * G, SoftmaxState<float>{});
  state.acc.resize(std::size_t(n_units) * G * dv);

  state.pool->parallel_for(first_task.back(), [&](int task) {
    const int j = int(std::upper_bound(first_task.begin(), first_task.end(), task) - first_task.begin()) - 1;
    const QueryJob& job = jobs[std::size_t(j)];
    const int local = task - first_task[std::size_t(j)];
    const int h0 = local % head_blocks * heads_per_task, chunk = local / head_blocks;
    const KeyRange keys = KeyMaskT::range(job);
    const int begin = keys.first + chunk * chunk_len[std::size_t(j)];
    const int end = std::min(keys.end, begin + chunk_len[std::size_t(j)]);
    const std::size_t unit = std::size_t(first_unit[std::size_t(j)] + chunk * H + h0);
    thread_local ScratchFloats q, scores;
    q.resize(std::size_t(heads_per_task) * G * spec.key_dim);
    scores.resize(chunk_score_floats(heads_per_task, G));
    const float* q_heads = job.query + std::ptrdiff_t(h0) * G * spec.key_dim;
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = q_heads[i] * spec.scale;  // fold the scale into q once
    attend_chunk<Arch, KeyMaskT>(store, spec, job, h0, heads_per_task, begin, end, q.data(),
                                 {state.states.data() + unit * G, state.acc.data() + unit * G * dv}, scores.data());
  });

  // Merge each (job, head)'s chunks in order and normalise.
  state.pool->parallel_for(n_jobs * H, [&](int pair) {
    const int j = pair / H, h = pair % H;
    const int chunks = (first_unit[std::size_t(j) + 1] - first_unit[std::size_t(j)]) / H;
    for (int g = 0; g < G; ++g) {
      const std::size_t first = std::size_t(first_unit[std::size_t(j)] + h) * G + g;
      SoftmaxState<float> merged = state.states[first];
      float* acc = state.acc.data() + first * dv;
      for (int c = 1; c < chunks; ++c) {
        const std::size_t other = std::size_t(first_unit[std::size_t(j)] + c * H + h) * G + g;
        merge_softmax(merged, acc, state.states[other], state.acc.data() + other * dv, dv);
      }
      float* out = jobs[std::size_t(j)].out + std::ptrdiff_t(h * G + g) * dv;
      const float inv = merged.sum > 0 ? 1.0f / merged.sum : 0.0f;
      for (int i = 0; i < dv; ++i) out[i] = acc[i] * inv;
    }
  });
}

}  // namespace detail

/// Attends `jobs` over `store` with Arch's kernels. Runs of at least kMinBlockRows jobs of one
/// sequence go to the block kernel, the others to the decode kernel.
template <class Arch, KeyMask KeyMaskT, class Store>
void attend_jobs(ExecutorState& state, const Store& store, const AttendSpec& spec, std::span<const QueryJob> jobs) {
  static_assert(Arch::supported(),
                "polyattn: these CPU kernels are for an architecture this translation unit is not compiled for. To "
                "choose them at run time (exec::DispatchCpuSimd), instantiate them in a translation unit built for "
                "it (POLYATTN_CPU_KERNELS) and declare them here (POLYATTN_EXTERN_CPU_KERNELS), for every (mask, "
                "store) the executor is given: see exec/cpu/dispatch_cpu_simd.hpp");
  using T = std::remove_cvref_t<decltype(*store.row(0, 0, 0, 0))>;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16> ||
                    std::is_same_v<T, std::int8_t>,
                "polyattn: the CpuSimd executor reads float, Eigen::half, Eigen::bfloat16 and int8 caches (double caches "
                "are exec::Reference only)");
  state.blocks.clear();
  state.single.clear();
  for_each_sequence_run(jobs, [&](std::size_t first, std::size_t count) {
    if (count >= std::size_t(kMinBlockRows)) {
      // Whether the run's rows see the same keys, judged by its first and last rows: it only
      // sizes the blocks (block_rows), each block is exact whatever its rows see.
      const bool uniform = KeyMaskT::range(jobs[first]) == KeyMaskT::range(jobs[first + count - 1]);
      const std::size_t rows = std::size_t(block_rows<default_kernels_t<Arch>>(spec, uniform, int(count)));
      for (std::size_t b = 0; b < count; b += rows) state.blocks.push_back(jobs.subspan(first + b, std::min(count - b, rows)));
    } else {
      state.single.insert(state.single.end(), jobs.begin() + std::ptrdiff_t(first), jobs.begin() + std::ptrdiff_t(first + count));
    }
  });
  // Prefill's blocks keep the fp32 query under every policy: avx512bw's kernels (default_kernels).
  if (!state.blocks.empty()) detail::attend_blocks<default_kernels_t<Arch>, KeyMaskT>(state, store, spec);
  if (state.single.size() == jobs.size())
    detail::attend_rows<Arch, KeyMaskT>(state, store, spec, jobs);
  else if (!state.single.empty())
    detail::attend_rows<Arch, KeyMaskT>(state, store, spec, std::span<const QueryJob>(state.single));
}

}  // namespace polyattn::exec::cpu
