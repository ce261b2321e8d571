// The CUDA executor's host-side logic, which needs no GPU and no nvcc: the device layout view
// addresses exactly the rows the host stores do, and the mirror tracker plans the right copies.
#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/exec/cuda/device_layout.hpp>
#include <polyattn/exec/cuda/mirror_plan.hpp>
#include <polyattn/exec/cuda/query_blocks.hpp>
#include <polyattn/exec/cuda/stream_plan.hpp>
#include <polyattn/exec/cuda/tile_plan.hpp>

#include "support/attend_spec.hpp"

using namespace polyattn;
using namespace polyattn::exec::cuda;
using polyattn::testing::attend_spec;

namespace {

/// One-head cached tensors of the given row widths.
std::vector<TensorSpec> rows(std::initializer_list<int> dims) {
  std::vector<TensorSpec> tensors;
  for (int dim : dims) tensors.push_back({1, dim});
  return tensors;
}

}  // namespace

namespace {

std::vector<QueryJob> jobs_for(std::initializer_list<int> seqs) {
  std::vector<QueryJob> jobs;
  for (int s : seqs) jobs.push_back({s, 1, nullptr, nullptr});
  return jobs;
}

}  // namespace

TEST_CASE_TEMPLATE("the device layout view addresses the host store's rows", Layout, Nhd, Hnd, Paged<4>, Paged<7>) {
  const std::vector<TensorSpec> specs{{3, 5}, {1, 9}};  // two tensors of different shapes
  CacheStore<Layout, float> store(specs, {.max_sequences = 3, .capacity = 20});
  const int a = store.open(), b = store.open(), c = store.open();
  store.grow(b, 9);  // interleaved growth, so paged sequences get scattered pages
  store.grow(a, 20);
  store.grow(c, 13);
  store.grow(b, 11);

  const DeviceGeometry geometry = device_geometry(store);
  CHECK(geometry.paged == requires { store.pages_of(0); });
  MirrorTracker tracker;
  tracker.reset(geometry);
  const auto jobs = jobs_for({a, b, c});
  tracker.plan(store, jobs);  // fills the host copy of the page table

  // Base of each tensor: the store's row of (seq, token 0, head 0) minus its page's offset.
  const float* base[kMaxCachedTensors] = {};
  for (int t = 0; t < 2; ++t) {
    const int page = geometry.paged ? tracker.page_table()[std::size_t(a) * std::size_t(geometry.pages_per_seq)] : a;
    base[t] = store.row(t, a, 0, 0) - page * geometry.strides[std::size_t(t)].page;
    CHECK(geometry.elements(t) * sizeof(float) <= store.bytes_allocated());
  }
  const DeviceCacheView<const float> view = make_view<const float>(geometry, base, tracker.page_table());
  for (int seq : {a, b, c})
    for (int t = 0; t < 2; ++t)
      for (int token = 0; token < store.length(seq); ++token)
        for (int h = 0; h < specs[std::size_t(t)].heads; ++h) {
          INFO("tensor ", t, " seq ", seq, " token ", token, " head ", h);
          CHECK(view.row(t, seq, token, h) == store.row(t, seq, token, h));
        }
}

TEST_CASE_TEMPLATE("the mirror tracker copies only new rows, and everything after a reopen", Layout, Nhd, Hnd, Paged<4>) {
  const std::vector<TensorSpec> specs{{2, 3}, {2, 3}};
  CacheStore<Layout, float> store(specs, {.max_sequences = 2, .capacity = 16});
  MirrorTracker tracker;
  tracker.reset(device_geometry(store));
  const int a = store.open(), b = store.open();
  store.grow(a, 5);
  store.grow(b, 2);

  MirrorPlan plan = tracker.plan(store, jobs_for({a, a, b}));  // a twice, as in a prefill: planned once
  REQUIRE(plan.rows.size() == 2);
  CHECK(plan.rows[0].seq == a);
  CHECK(plan.rows[0].first == 0);
  CHECK(plan.rows[0].count == 5);
  CHECK(plan.rows[1].seq == b);
  CHECK(plan.rows[1].count == 2);

  store.grow(a, 1);  // one decode step for a only
  plan = tracker.plan(store, jobs_for({b, a}));
  REQUIRE(plan.rows.size() == 1);
  CHECK(plan.rows[0].seq == a);
  CHECK(plan.rows[0].first == 5);
  CHECK(plan.rows[0].count == 1);
  CHECK(tracker.plan(store, jobs_for({a, b})).rows.empty());

  // Closed, reopened and grown past the old length: copied again from token 0.
  store.close(a);
  CHECK(store.open() == a);
  store.grow(a, 9);
  plan = tracker.plan(store, jobs_for({a}));
  REQUIRE(plan.rows.size() == 1);
  CHECK(plan.rows[0].first == 0);
  CHECK(plan.rows[0].count == 9);
  CHECK(tracker.synced(a) == 9);
}

TEST_CASE("the mirror tracker copies only page-table entries that changed") {
  const std::vector<TensorSpec> specs{{1, 2}};
  CacheStore<Paged<4>, float> store(specs, {.max_sequences = 2, .capacity = 16});
  MirrorTracker tracker;
  tracker.reset(device_geometry(store));
  const int a = store.open(), b = store.open();
  store.grow(a, 5);  // pages 0, 1
  store.grow(b, 1);  // page 2
  MirrorPlan plan = tracker.plan(store, jobs_for({a, b}));
  REQUIRE(plan.page_tables.size() == 2);
  CHECK(plan.page_tables[0].seq == a);
  CHECK(plan.page_tables[0].first == 0);
  CHECK(plan.page_tables[0].count == 2);

  store.grow(a, 3);  // still within page 1: no table change
  CHECK(tracker.plan(store, jobs_for({a})).page_tables.empty());
  store.grow(a, 1);  // a third page
  plan = tracker.plan(store, jobs_for({a}));
  REQUIRE(plan.page_tables.size() == 1);
  CHECK(plan.page_tables[0].first == 2);
  CHECK(plan.page_tables[0].count == 1);
  CHECK(tracker.page_table()[2] == store.pages_of(a)[2]);
}

TEST_CASE_TEMPLATE("the mirror tracker re-copies each sequence's last row when the variant rewrites it", Layout, Nhd, Hnd, Paged<4>) {
  // Mtla-like: later tokens merge into a sequence's last row, so the row that was last when the
  // mirror copied it may differ now; rows before it are final.
  const std::vector<TensorSpec> specs{{1, 6}};
  CacheStore<Layout, float> store(specs, {.max_sequences = 2, .capacity = 16});
  MirrorTracker tracker;
  tracker.reset(device_geometry(store));
  const int a = store.open(), b = store.open();
  const auto rows_of = [](const MirrorPlan& plan, int seq) {
    for (const RowRange& r : plan.rows)
      if (r.seq == seq) return std::pair{r.first, r.count};
    return std::pair{-1, 0};
  };

  store.grow(a, 1);  // token 0 opens row 0
  store.grow(b, 3);
  MirrorPlan plan = tracker.plan(store, jobs_for({a, a, b}), true);  // a twice (prefill): planned once
  CHECK(plan.rows.size() == 2);
  CHECK(rows_of(plan, a) == std::pair{0, 1});
  CHECK(rows_of(plan, b) == std::pair{0, 3});

  // Token 1 merges into row 0 (no new row): row 0 is copied again.
  plan = tracker.plan(store, jobs_for({a}), true);
  CHECK(rows_of(plan, a) == std::pair{0, 1});
  // Tokens merge into row 0, then open row 1, with no attend between: rows 0 and 1.
  store.grow(a, 1);
  plan = tracker.plan(store, jobs_for({a}), true);
  CHECK(rows_of(plan, a) == std::pair{0, 2});
  CHECK(tracker.synced(a) == 2);
  // Another step: only the last row (1) again, never the final row 0.
  plan = tracker.plan(store, jobs_for({b, a}), true);
  CHECK(rows_of(plan, a) == std::pair{1, 1});
  CHECK(rows_of(plan, b) == std::pair{2, 1});
  store.grow(a, 2);
  plan = tracker.plan(store, jobs_for({a}), true);
  CHECK(rows_of(plan, a) == std::pair{1, 3});

  // Without the flag nothing already copied is copied again.
  CHECK(tracker.plan(store, jobs_for({a, b}), false).rows.empty());

  // A reopened slot starts from row 0 either way.
  store.close(b);
  CHECK(store.open() == b);
  store.grow(b, 2);
  plan = tracker.plan(store, jobs_for({b}), true);
  CHECK(rows_of(plan, b) == std::pair{0, 2});
}


TEST_CASE("the mirror tracker copies a fork's own pages only: the shared ones are on the device already") {
  const std::vector<TensorSpec> specs{{2, 3}, {2, 3}};
  CacheStore<Paged<4>, float> store(specs, {.max_sequences = 3, .capacity = 16});
  MirrorTracker tracker;
  tracker.reset(device_geometry(store));
  const int parent = store.open();
  store.grow(parent, 10);  // pages: two full, one holding tokens 8 and 9
  MirrorPlan plan = tracker.plan(store, jobs_for({parent}));
  REQUIRE(plan.rows.size() == 1);
  CHECK(plan.rows[0].count == 10);

  const int child = store.fork(parent, false);  // shares the two full pages, copies the last
  plan = tracker.plan(store, jobs_for({parent, child}));
  REQUIRE(plan.page_tables.size() == 1);  // the child's table, all of it
  CHECK(plan.page_tables[0].seq == child);
  CHECK(plan.page_tables[0].count == 3);
  REQUIRE(plan.rows.size() == 1);  // the parent is up to date; of the child only its copied page
  CHECK(plan.rows[0].seq == child);
  CHECK(plan.rows[0].first == 8);
  CHECK(plan.rows[0].count == 2);
  CHECK(tracker.synced(child) == 10);

  // Both go on: each copies its own new rows.
  store.grow(parent, 3);  // tokens 10, 11 (its last page), 12 (a new page)
  store.grow(child, 1);
  plan = tracker.plan(store, jobs_for({parent, child}));
  REQUIRE(plan.rows.size() == 2);
  CHECK((plan.rows[0].seq == parent && plan.rows[0].first == 10 && plan.rows[0].count == 3));
  CHECK((plan.rows[1].seq == child && plan.rows[1].first == 10 && plan.rows[1].count == 1));

  // A fork of a fork on a page boundary shares every page: nothing to copy but its table.
  store.grow(child, 1);  // 12 tokens: three full pages
  CHECK(tracker.plan(store, jobs_for({child})).rows.size() == 1);
  const int grandchild = store.fork(child, false);
  plan = tracker.plan(store, jobs_for({grandchild}));
  CHECK(plan.rows.empty());
  CHECK(plan.page_tables.size() == 1);

  // The parent closes: its own pages go back to the pool, and the sequence that takes them next
  // is copied in full, since the device holds the parent's rows there.
  const std::vector<int> parents_own{store.pages_of(parent)[2], store.pages_of(parent)[3]};
  store.close(parent);
  const int other = store.open();
  store.grow(other, 6);
  CHECK(std::ranges::find_first_of(store.pages_of(other), parents_own) != store.pages_of(other).end());
  plan = tracker.plan(store, jobs_for({other, child, grandchild}));
  REQUIRE(plan.rows.size() == 1);
  CHECK((plan.rows[0].seq == other && plan.rows[0].first == 0 && plan.rows[0].count == 6));
}

TEST_CASE("the mirror tracker re-copies a forked parent's rewritten last row, and the child's private copy of it") {
  // Mtla: the open last row is private to each sequence after a fork (fork(.., true) copies its
  // page even when full), and later tokens rewrite it.
  const std::vector<TensorSpec> specs{{1, 6}};
  CacheStore<Paged<4>, float> store(specs, {.max_sequences = 2, .capacity = 16});
  MirrorTracker tracker;
  tracker.reset(device_geometry(store));
  const int parent = store.open();
  store.grow(parent, 8);  // two full pages; row 7 still open
  CHECK(tracker.plan(store, jobs_for({parent}), true).rows.size() == 1);
  const int child = store.fork(parent, true);
  MirrorPlan plan = tracker.plan(store, jobs_for({child, parent}), true);
  REQUIRE(plan.rows.size() == 2);
  CHECK((plan.rows[0].seq == child && plan.rows[0].first == 4 && plan.rows[0].count == 4));  // its own copy of page 1
  CHECK((plan.rows[1].seq == parent && plan.rows[1].first == 7 && plan.rows[1].count == 1));  // its open row
  // The child's next attend re-copies only its own open row.
  plan = tracker.plan(store, jobs_for({child}), true);
  REQUIRE(plan.rows.size() == 1);
  CHECK((plan.rows[0].first == 7 && plan.rows[0].count == 1));
}

TEST_CASE_TEMPLATE("contiguous layouts: the mirror copies a fork in full, its rows being in a new slot", Layout, Nhd, Hnd) {
  const std::vector<TensorSpec> specs{{1, 2}};
  CacheStore<Layout, float> store(specs, {.max_sequences = 2, .capacity = 16});
  MirrorTracker tracker;
  tracker.reset(device_geometry(store));
  const int parent = store.open();
  store.grow(parent, 5);
  tracker.plan(store, jobs_for({parent}));
  const int child = store.fork(parent, false);
  const MirrorPlan plan = tracker.plan(store, jobs_for({child, parent}));
  REQUIRE(plan.rows.size() == 1);
  CHECK((plan.rows[0].seq == child && plan.rows[0].first == 0 && plan.rows[0].count == 5));
}

TEST_CASE("the tiled decode kernel takes aligned rows that fit its shared memory, and only those") {
  // MHA, float: separate key and value tiles of 64 tokens, each row padded by 16 bytes.
  const auto mha = plan_tiles(attend_spec(1, 1, 0, 0, 64, 1, 0, 64), rows({64, 64}), sizeof(float));
  REQUIRE(mha);
  CHECK(mha->group_tile == 1);
  CHECK(mha->tile_tokens == 64);
  CHECK(mha->key_stride == 68);
  CHECK(mha->value_stride == 68);
  CHECK(mha->key_lanes == 16);  // 16 column quads: two key rows per warp
  CHECK(mha->shared_bytes == tiled_shared_bytes(1, 64, 68, 68, sizeof(float)));
  CHECK(mha->shared_bytes <= kTiledSharedBudget);

  // 8 or more heads sharing one key row (MQA, MLA's latent): the general kernel, faster there.
  CHECK_FALSE(plan_tiles(attend_spec(1, 16, 0, 0, 576, 0, 0, 512), rows({576}), sizeof(float)));
  CHECK_FALSE(plan_tiles(attend_spec(1, 8, 0, 0, 64, 1, 0, 64), rows({64, 64}), sizeof(float)));
  CHECK(plan_tiles(attend_spec(1, 4, 0, 0, 64, 1, 0, 64), rows({64, 64}), sizeof(float)));  // GQA<4>
  // Heads packed in one row sharing the values (slim K-only option 2, 16 heads of 32): values
  // read from the key tile; in half precision twice the tokens fit the same bytes.
  const auto slim = plan_tiles(attend_spec(1, 16, 0, 0, 32, 0, 0, 512, 32), rows({512}), sizeof(float));
  REQUIRE(slim);
  CHECK(slim->group_tile == 16);
  CHECK(slim->value_stride == 0);
  CHECK(slim->key_stride == 516);
  CHECK(slim->tile_tokens == 16);  // 2 x 32 x 516 floats would pass the budget
  const auto slim_half = plan_tiles(attend_spec(1, 16, 0, 0, 32, 0, 0, 512, 32), rows({512}), 2);
  REQUIRE(slim_half);
  CHECK(slim_half->key_stride == 520);
  CHECK(slim_half->tile_tokens == 32);

  // Heads packed in one row (slim K-only option 2): a group tile copies the span of its heads'
  // keys and the values it shares; 20 heads make tiles of 16 and 4, sized for the wider.
  const auto packed = plan_tiles(attend_spec(1, 20, 0, 0, 32, 0, 0, 64, 32), rows({640}), sizeof(float));
  REQUIRE(packed);
  CHECK(packed->group_tile == 16);
  CHECK(key_span(attend_spec(1, 20, 0, 0, 32, 0, 0, 64, 32), 16, 4).lo == 0);  // values at column 0 widen the span
  CHECK(key_span(attend_spec(1, 20, 0, 0, 32, 0, 0, 64, 32), 16, 4).hi == 640);
  CHECK(packed->key_stride == 640 + 4);  // the second tile: keys [512, 640) and values [0, 64)

  // Refused: columns not on 16-byte boundaries (an offset of 3, a row of 30 or 20 halves), a key
  // row wider than the registers hold, values wider than the accumulators, a tensor that is not there.
  CHECK_FALSE(plan_tiles(attend_spec(1, 1, 0, 3, 32, 1, 0, 64), rows({40, 64}), sizeof(float)));
  CHECK_FALSE(plan_tiles(attend_spec(1, 1, 0, 0, 24, 1, 0, 24), rows({24, 30}), 2));
  CHECK(plan_tiles(attend_spec(1, 1, 0, 0, 24, 1, 0, 24), rows({24, 24}), sizeof(float)));  // 24 floats: quads of 16 bytes
  CHECK(plan_tiles(attend_spec(1, 1, 0, 0, 24, 1, 0, 24), rows({24, 24}), 2));              // 24 halves: three 16-byte copies
  CHECK_FALSE(plan_tiles(attend_spec(1, 1, 0, 0, 20, 1, 0, 20), rows({20, 20}), 2));        // 20 halves: 40 bytes
  CHECK_FALSE(plan_tiles(attend_spec(1, 1, 0, 0, 1600, 0, 0, 1024), rows({1600}), sizeof(float)));
  CHECK_FALSE(plan_tiles(attend_spec(1, 1, 0, 0, 64, 1, 0, 1100), rows({64, 1100}), sizeof(float)));
  CHECK_FALSE(plan_tiles(attend_spec(1, 1, 0, 0, 64, 5, 0, 64), rows({64, 64}), sizeof(float)));  // no such tensor
}

TEST_CASE("the simple prefill kernel takes rows in runs of one sequence, 32 a block, each block over its rows' tokens") {
  constexpr std::size_t kH100Shared = 227 << 10, kSm89Shared = 99 << 10;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  // plan_prefill with the tiled kernel not allowed: the simple kernel's blocks, or nothing.
  const auto plan_query_blocks = [](const AttendSpec& s, std::span<const DeviceJob> jobs,
                                    std::size_t max_shared) -> std::optional<std::vector<QueryBlock>> {
    auto plan = plan_prefill(s, jobs, max_shared, false);
    if (!plan) return std::nullopt;
    REQUIRE(plan->kernel == PrefillKernel::simple);
    return std::move(plan->blocks);
  };
  const AttendSpec mha = attend_spec(2, 1, 0, 0, 64, 1, 0, 64);
  // A causal chunk of 70 rows after 100 cached tokens, then 9 rows of another sequence, full.
  std::vector<DeviceJob> jobs;
  for (int i = 0; i < 70; ++i) jobs.push_back({3, 0, 100 + i + 1});
  for (int i = 0; i < 9; ++i) jobs.push_back({1, 0, 9});
  const auto blocks = plan_query_blocks(mha, jobs, kH100Shared);
  REQUIRE(blocks);
  REQUIRE(blocks->size() == 4);
  const QueryBlock expected[] = {{0, 32, 3, 0, 132}, {32, 32, 3, 0, 164}, {64, 6, 3, 0, 170}, {70, 9, 1, 0, 9}};
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    const QueryBlock& b = (*blocks)[i];
    CHECK(b.first_job == expected[i].first_job);
    CHECK(b.rows == expected[i].rows);
    CHECK(b.seq == expected[i].seq);
    CHECK(b.key_first == expected[i].key_first);
    CHECK(b.key_end == expected[i].key_end);
  }

  // A sliding window's ranges: the block spans from its first row's first token to its last row's
  // end; rows that see nothing widen nothing.
  std::vector<DeviceJob> window{{0, 0, 0}, {0, 0, 0}};
  for (int i = 0; i < 30; ++i) window.push_back({0, std::max(0, i + 1 - 8), i + 1});
  const auto windowed = plan_query_blocks(mha, window, kH100Shared);
  REQUIRE(windowed);
  REQUIRE(windowed->size() == 1);
  CHECK(windowed->front().key_first == 0);
  CHECK(windowed->front().key_end == 30);
  std::vector<DeviceJob> late{{0, 5, 5}};
  for (int i = 0; i < 10; ++i) late.push_back({0, 40 + i, 50 + i});
  REQUIRE(plan_query_blocks(mha, late, kH100Shared));
  CHECK(plan_query_blocks(mha, late, kH100Shared)->front().key_first == 40);
  CHECK(plan_query_blocks(mha, late, kH100Shared)->front().key_end == 59);

  // Refused: a decode batch (one row a sequence), fewer than 8 rows a block on average, fewer
  // than 8 rows in all, rows wider than 256 or needing more shared memory than the device has.
  std::vector<DeviceJob> decode;
  for (int s = 0; s < 64; ++s) decode.push_back({s, 0, 4096});
  CHECK_FALSE(plan_query_blocks(mha, decode, kH100Shared));
  std::vector<DeviceJob> short_runs;
  for (int s = 0; s < 16; ++s)
    for (int i = 0; i < 7; ++i) short_runs.push_back({s, 0, i + 1});
  CHECK_FALSE(plan_query_blocks(mha, short_runs, kH100Shared));
  CHECK_FALSE(plan_query_blocks(mha, std::span(jobs).first(7), kH100Shared));
  CHECK(plan_query_blocks(attend_spec(1, 1, 0, 0, 256, 1, 0, 256), jobs, kH100Shared));
  CHECK_FALSE(plan_query_blocks(attend_spec(1, 1, 0, 0, 256, 1, 0, 256), jobs, kSm89Shared));  // 100.1 KiB of shared memory
  CHECK(plan_query_blocks(attend_spec(1, 1, 0, 0, 128, 1, 0, 256), jobs, kSm89Shared));
  CHECK_FALSE(plan_query_blocks(attend_spec(1, 6, 0, 0, 384, 0, 0, 384), jobs, kH100Shared));
  CHECK_FALSE(plan_query_blocks(attend_spec(1, 1, 0, 0, 64, 1, 0, 512), jobs, kH100Shared));

  // Shared memory: 32 queries of 64, 32 key rows of 65, 32 value rows of 64, 32 x 32 weights.
  CHECK(prefill_shared_bytes(mha) == (32 * 64 + 32 * 65 + 32 * 64 + 32 * 32) * sizeof(float));
  CHECK(prefill_key_stride(45) == 49);
}

TEST_CASE("the register-tiled prefill kernel takes 64 rows a block where its shared memory fits, else the simple kernel runs") {
  constexpr std::size_t kH100Shared = 227 << 10, kSm89Shared = 99 << 10;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  const AttendSpec mha = attend_spec(2, 1, 0, 0, 64, 1, 0, 64);
  // Shared memory: queries and keys transposed (64 columns of 68 floats), 64 value rows rounded
  // up to 64, 128 or 256 columns, 64 x 68 weights.
  CHECK(tiled_prefill_shared_bytes(mha) == (2 * 64 * 68 + 64 * 64 + 64 * 68) * sizeof(float));
  CHECK(tiled_value_cols(1) == 64);
  CHECK(tiled_value_cols(64) == 64);
  CHECK(tiled_value_cols(65) == 128);
  CHECK(tiled_value_cols(129) == 256);
  CHECK(tiled_prefill_shared_bytes(attend_spec(1, 1, 0, 0, 256, 1, 0, 256)) == (2 * 256 * 68 + 64 * 256 + 64 * 68) * sizeof(float));

  // A causal chunk of 70 rows after 100 cached tokens, then 9 rows of another sequence, full.
  std::vector<DeviceJob> jobs;
  for (int i = 0; i < 70; ++i) jobs.push_back({3, 0, 100 + i + 1});
  for (int i = 0; i < 9; ++i) jobs.push_back({1, 0, 9});
  const auto plan = plan_prefill(mha, jobs, kH100Shared);
  REQUIRE(plan);
  CHECK(plan->kernel == PrefillKernel::tiled);
  REQUIRE(plan->blocks.size() == 3);
  const QueryBlock expected[] = {{0, 64, 3, 0, 164}, {64, 6, 3, 0, 170}, {70, 9, 1, 0, 9}};
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    const QueryBlock& b = plan->blocks[i];
    CHECK(b.first_job == expected[i].first_job);
    CHECK(b.rows == expected[i].rows);
    CHECK(b.seq == expected[i].seq);
    CHECK(b.key_first == expected[i].key_first);
    CHECK(b.key_end == expected[i].key_end);
  }
  // Not allowed the tiled kernel: the simple one, 32 rows a block.
  const auto simple = plan_prefill(mha, jobs, kH100Shared, false);
  REQUIRE(simple);
  CHECK(simple->kernel == PrefillKernel::simple);
  CHECK(simple->blocks.size() == 4);

  // 64-wide heads fit the tiled kernel on both devices (67 KiB); 128-wide need 117 KiB, so an
  // sm_89 runs them on the simple kernel (53 KiB); 256-wide fit the tiled kernel on an H100 only
  // (217 KiB) and neither kernel on an sm_89; wider rows, neither.
  const AttendSpec wide = attend_spec(1, 1, 0, 0, 128, 1, 0, 128), widest = attend_spec(1, 1, 0, 0, 256, 1, 0, 256);
  CHECK(choose_prefill_kernel(mha, kSm89Shared) == PrefillKernel::tiled);
  CHECK(choose_prefill_kernel(wide, kH100Shared) == PrefillKernel::tiled);
  CHECK(choose_prefill_kernel(wide, kSm89Shared) == PrefillKernel::simple);
  CHECK(choose_prefill_kernel(widest, kH100Shared) == PrefillKernel::tiled);
  CHECK_FALSE(choose_prefill_kernel(widest, kSm89Shared));
  CHECK_FALSE(choose_prefill_kernel(attend_spec(1, 6, 0, 0, 384, 0, 0, 384), kH100Shared));
  // Rows not in runs stay on the decode kernels whatever the kernel.
  std::vector<DeviceJob> decode;
  for (int s = 0; s < 64; ++s) decode.push_back({s, 0, 4096});
  CHECK_FALSE(plan_prefill(mha, decode, kH100Shared));
}

TEST_CASE("the streaming decode kernel takes MHA, GQA and MQA rows of 8, 16 or 32 lanes of 16 bytes, and only those") {
  // MHA, float, 64 wide: 16 lanes a row; 128 wide: 32; half, 64 wide: 8 lanes of 8 halves.
  const auto mha = plan_stream(attend_spec(1, 1, 0, 0, 64, 1, 0, 64), rows({64, 64}), sizeof(float));
  REQUIRE(mha);
  CHECK(mha->lanes == 16);
  CHECK(mha->group_tile == 1);
  CHECK(plan_stream(attend_spec(2, 1, 0, 0, 128, 1, 0, 128), rows({128, 128}), sizeof(float))->lanes == 32);
  CHECK(plan_stream(attend_spec(2, 1, 0, 0, 64, 1, 0, 64), rows({64, 64}), 2)->lanes == 8);
  CHECK(plan_stream(attend_spec(2, 1, 0, 0, 256, 1, 0, 256), rows({256, 256}), 2)->lanes == 32);
  // GQA and MQA: the group rounded up to a power of two, at most 8 heads a key row.
  CHECK(plan_stream(attend_spec(1, 3, 0, 0, 64, 1, 0, 64), rows({64, 64}), sizeof(float))->group_tile == 4);
  CHECK(plan_stream(attend_spec(1, 8, 0, 0, 64, 1, 0, 64), rows({64, 64}), sizeof(float))->group_tile == 8);
  CHECK_FALSE(plan_stream(attend_spec(1, 9, 0, 0, 64, 1, 0, 64), rows({64, 64}), sizeof(float)));
  // Column offsets on 16-byte boundaries inside wider rows (MLA's split key and value tensors).
  CHECK(plan_stream(attend_spec(1, 2, 0, 4, 64, 1, 8, 64), rows({72, 80}), sizeof(float)));
  // Refused: values in the key tensor (K-only caches, X-cache, MLA's latent), heads packed in one
  // row, key and value widths that differ, rows that are not 8, 16 or 32 loads, offsets or row
  // widths off 16-byte boundaries, double, a tensor that is not there.
  CHECK_FALSE(plan_stream(attend_spec(1, 16, 0, 0, 576, 0, 0, 512), rows({576}), sizeof(float)));
  CHECK_FALSE(plan_stream(attend_spec(1, 4, 0, 0, 32, 0, 0, 128, 32), rows({128}), sizeof(float)));
  CHECK_FALSE(plan_stream(attend_spec(1, 1, 0, 0, 64, 1, 0, 128), rows({64, 128}), sizeof(float)));
  CHECK_FALSE(plan_stream(attend_spec(1, 1, 0, 0, 40, 1, 0, 40), rows({40, 40}), sizeof(float)));
  CHECK_FALSE(plan_stream(attend_spec(1, 1, 0, 0, 16, 1, 0, 16), rows({16, 16}), sizeof(float)));
  CHECK_FALSE(plan_stream(attend_spec(1, 1, 0, 2, 64, 1, 0, 64), rows({66, 64}), sizeof(float)));
  CHECK_FALSE(plan_stream(attend_spec(1, 1, 0, 0, 64, 1, 0, 64), rows({64, 66}), sizeof(float)));
  CHECK_FALSE(plan_stream(attend_spec(1, 1, 0, 0, 64, 1, 0, 64), rows({64, 64}), sizeof(double)));
  CHECK_FALSE(plan_stream(attend_spec(1, 1, 0, 0, 64, 5, 0, 64), rows({64, 64}), sizeof(float)));
}
