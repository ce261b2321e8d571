// Which rows and page-table entries a device mirror of a host cache lacks. The host store stays
// the source of truth (variants write into it); before each attend the executor copies only what
// changed for the sequences of the batch:
//   - rows [synced, length) of every cached tensor, where `synced` is what the mirror holds;
//   - with AttendSpec::rewrites_last_row (a variant that merges later tokens into a sequence's
//     last row, MTLA), rows [synced - 1, length): the row that was last when the mirror copied it
//     may have been rewritten since, every row before it is final;
//   - a sequence whose slot was reopened (new generation) or got shorter starts again from 0;
//   - for paged layouts, the page-table entries that differ from the mirror's copy.
// Rows before a sequence's last synced row are assumed unchanged once copied.
// Paged layouts are tracked by physical page, not by sequence: a fork (a beam) shares its
// parent's full pages, which the mirror already holds, so only the child's own pages are copied.
// A page handed out again (a new Paged page_stamp) holds nothing valid on the device.
//
// Plain C++, no CUDA: the bookkeeping is tested on any machine (tests/test_cuda_layout.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "polyattn/core/attend.hpp"
#include "polyattn/exec/cuda/device_layout.hpp"

namespace polyattn::exec::cuda {

/// Tokens [first, first + count) of sequence `seq` (every cached tensor, every head).
struct RowRange {
  int seq = 0;
  int first = 0;
  int count = 0;
};

/// Page-table entries [first, first + count) of sequence `seq`.
struct PageTableRange {
  int seq = 0;
  int first = 0;
  int count = 0;
};

struct MirrorPlan {
  std::vector<PageTableRange> page_tables;  ///< copy these first: rows are placed through them
  std::vector<RowRange> rows;
};

class MirrorTracker {
 public:
  /// Forgets everything: the mirror holds nothing valid.
  void reset(const DeviceGeometry& geometry) {
    geometry_ = geometry;
    seqs_.assign(std::size_t(geometry.max_sequences), SeqState{});
    table_.assign(geometry.paged ? std::size_t(geometry.max_sequences) * std::size_t(geometry.pages_per_seq) : 0, -1);
    pages_.assign(geometry.paged ? std::size_t(geometry.pages) : 0, PageState{});
  }

  /// Plans the copies that bring the sequences of `jobs` up to date, and records them as done
  /// (on a failed copy, call reset()). A sequence named by several jobs (a prefill chunk) is
  /// planned once per call. `rewrites_last_row`: the variant may have rewritten each sequence's
  /// last synced row since it was copied (AttendSpec::rewrites_last_row).
  template <class Store>
  MirrorPlan plan(const Store& store, std::span<const QueryJob> jobs, bool rewrites_last_row = false) {
    MirrorPlan out;
    ++calls_;
    for (const QueryJob& job : jobs) {
      const int seq = job.seq;
      SeqState& s = seqs_[std::size_t(seq)];
      if (s.planned_in == calls_) continue;
      const std::uint64_t generation = store.generation(seq);
      const int length = store.length(seq);
      const bool shorter = s.generation == generation && length < s.synced;
      if (s.generation != generation || shorter) s = SeqState{generation, 0};
      s.planned_in = calls_;
      // The row the variant may have rewritten since the mirror copied it (-1: none).
      const int rewritten = rewrites_last_row && s.synced > 0 ? s.synced - 1 : -1;
      if constexpr (requires { store.pages_of(seq); }) {
        const std::span<const int> pages = store.pages_of(seq);
        if (shorter) forget_rows_from(pages, length);
        plan_page_table(seq, pages, out);
        plan_paged_rows(store, seq, pages, length, rewritten, out);
      } else {
        const int first = rewritten >= 0 ? rewritten : s.synced;
        if (length > first) out.rows.push_back({seq, first, length - first});
      }
      s.synced = length;
    }
    return out;
  }

  /// The page table as the device holds it after the planned copies: (max_sequences, pages_per_seq).
  const int* page_table() const { return table_.data(); }
  int synced(int seq) const { return seqs_[std::size_t(seq)].synced; }

 private:
  struct SeqState {
    std::uint64_t generation = 0;  // 0: never synced (stores stamp openings from 1)
    int synced = 0;                // rows the mirror holds
    std::uint64_t planned_in = 0;  // the plan() call that last planned this sequence
  };

  struct PageState {
    std::uint64_t stamp = 0;  // the store's page_stamp when the mirror first copied into the page
    int rows = 0;             // rows [0, rows) of the page the mirror holds
  };

  /// The rows of `seq`'s pages the mirror lacks (or that `rewritten` names), as token ranges of
  /// `seq`; ranges of consecutive pages join.
  template <class Store>
  void plan_paged_rows(const Store& store, int seq, std::span<const int> pages, int length, int rewritten, MirrorPlan& out) {
    const int page_size = geometry_.page_size;
    RowRange range{seq, 0, 0};
    const auto flush = [&] {
      if (range.count > 0) out.rows.push_back(range);
      range.count = 0;
    };
    for (int i = 0; i * page_size < length; ++i) {
      const int page = pages[std::size_t(i)], first_token = i * page_size;
      PageState& state = pages_[std::size_t(page)];
      const std::uint64_t stamp = store.page_stamp(page);
      if (state.stamp != stamp) state = PageState{stamp, 0};
      const int rows = std::min(page_size, length - first_token);
      int from = std::min(state.rows, rows);
      if (rewritten >= first_token && rewritten < first_token + page_size) from = std::min(from, rewritten - first_token);
      state.rows = std::max(state.rows, rows);
      if (from == rows) {
        flush();
        continue;
      }
      if (range.count > 0 && range.first + range.count != first_token + from) flush();
      if (range.count == 0) range.first = first_token + from;
      range.count += rows - from;
    }
    flush();
  }

  /// A sequence got shorter in place: its pages' rows from token `length` on are no longer valid.
  void forget_rows_from(std::span<const int> pages, int length) {
    const int page_size = geometry_.page_size;
    for (std::size_t i = 0; i < pages.size(); ++i) {
      PageState& state = pages_[std::size_t(pages[i])];
      state.rows = std::clamp(length - int(i) * page_size, 0, state.rows);
    }
  }

  void plan_page_table(int seq, std::span<const int> pages, MirrorPlan& out) {
    int* row = table_.data() + std::size_t(seq) * std::size_t(geometry_.pages_per_seq);
    int first = -1;
    for (int i = 0; i < int(pages.size()); ++i)
      if (row[i] != pages[std::size_t(i)]) {
        if (first < 0) first = i;
        row[i] = pages[std::size_t(i)];
      }
    if (first >= 0) out.page_tables.push_back({seq, first, int(pages.size()) - first});
  }

  DeviceGeometry geometry_;
  std::vector<SeqState> seqs_;
  std::vector<int> table_;
  std::vector<PageState> pages_;  // paged layouts: per physical page of the pool
  std::uint64_t calls_ = 0;
};

}  // namespace polyattn::exec::cuda
