// The cache-layout trait: where rows live, page allocation and freeing, bytes per token.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include <polyattn/polyattn.hpp>

#include "support/check_throws.hpp"
#include "support/resident_memory.hpp"

using namespace polyattn;
using polyattn::testing::check_throws_with;

// Bytes per token are known at compile time: Whisper tiny's decoder (6 heads of 64).
static_assert(Attention<Mha, Nhd, exec::CpuSimd>::cache_bytes_per_token({6, 64}) == 2 * 6 * 64 * 4);
static_assert(Attention<Gqa<2>, Paged<16>, exec::CpuSimd>::cache_bytes_per_token({6, 64}) == 2 * 3 * 64 * 4);
static_assert(Attention<Mqa, Hnd, exec::Reference>::cache_bytes_per_token({8, 64}) == 2 * 1 * 64 * 4);
static_assert(Attention<Mha, Nhd, exec::Reference, double>::cache_bytes_per_token({8, 64}) == 2 * 8 * 64 * 8);

TEST_CASE("contiguous layouts place rows as NHD and HND say") {
  const TensorSpec spec{3, 4};
  const std::vector<TensorSpec> specs{spec};
  const CacheConfig config{.max_sequences = 2, .capacity = 5};
  CacheStore<Nhd, float> nhd(specs, config);
  CacheStore<Hnd, float> hnd(specs, config);
  nhd.open(), nhd.open(), hnd.open(), hnd.open();
  nhd.grow(1, 5), hnd.grow(1, 5);
  // NHD: consecutive tokens of a head are heads*dim apart; HND: dim apart.
  CHECK(nhd.row(0, 1, 3, 2) - nhd.row(0, 1, 2, 2) == 3 * 4);
  CHECK(hnd.row(0, 1, 3, 2) - hnd.row(0, 1, 2, 2) == 4);
  CHECK(nhd.run(0, 1, 2, 2).stride == 12);
  CHECK(hnd.run(0, 1, 2, 2).stride == 4);
  CHECK(nhd.run(0, 1, 2, 2).count == 3);
  CHECK(nhd.bytes_allocated() == 2 * 5 * 12 * sizeof(float));
  // Every (seq, token, head) has its own row.
  std::set<const float*> rows;
  for (int s = 0; s < 2; ++s)
    for (int t = 0; t < 5; ++t)
      for (int h = 0; h < 3; ++h) rows.insert(static_cast<const CacheStore<Hnd, float>&>(hnd).row(0, s, t, h));
  CHECK(rows.size() == 30);
}

TEST_CASE("paged layout allocates pages as sequences grow and returns them on close") {
  const std::vector<TensorSpec> specs{{2, 3}, {2, 3}};
  CacheStore<Paged<4>, float> store(specs, {.max_sequences = 3, .capacity = 10, .pool_pages = 5, .poison_unused = true});
  CHECK(store.pool_pages() == 5);
  const int a = store.open(), b = store.open();
  store.grow(a, 1);
  CHECK(store.pages_of(a).size() == 1);
  store.grow(a, 3);  // fills the first page exactly
  CHECK(store.pages_of(a).size() == 1);
  store.grow(a, 1);
  CHECK(store.pages_of(a).size() == 2);
  store.grow(b, 9);  // 3 pages
  CHECK(store.free_pages() == 0);
  // A run ends at the page boundary.
  CHECK(store.run(0, b, 5, 1).count == 3);
  // Pool exhausted: a clear error, nothing changes.
  CHECK_THROWS_AS(store.grow(a, 4), CapacityError);
  CHECK(store.length(a) == 5);
  CHECK(store.pages_of(a).size() == 2);
  // Closing returns pages, poisoned with NaN, to the pool.
  const float* first_page_row = store.row(0, b, 0, 0);
  store.close(b);
  CHECK(store.free_pages() == 3);
  CHECK(std::isnan(*first_page_row));
  store.grow(a, 4);
  CHECK(store.length(a) == 9);
}

TEST_CASE("paged layout keeps a head's rows of a page contiguous, as HND does") {
  const std::vector<TensorSpec> specs{{3, 4}};
  CacheStore<Paged<4>, float> store(specs, {.max_sequences = 2, .capacity = 8, .pool_pages = 4});
  const int a = store.open(), b = store.open();
  store.grow(a, 4), store.grow(b, 4), store.grow(a, 4);  // a holds pages 0 and 2, b page 1
  REQUIRE(store.pages_of(a).size() == 2);
  CHECK(store.pages_of(a)[1] == 2);
  // Inside a page: tokens of a head dim apart, heads page_size * dim apart.
  CHECK(store.row(0, a, 2, 1) - store.row(0, a, 1, 1) == 4);
  CHECK(store.row(0, a, 1, 2) - store.row(0, a, 1, 1) == 4 * 4);
  CHECK(store.run(0, a, 1, 2).stride == 4);
  CHECK(store.run(0, a, 1, 2).count == 3);
  // A page is one block of page_size * heads * dim elements, wherever the page table puts it.
  const float* page0 = store.row(0, a, 0, 0);
  CHECK(store.row(0, b, 0, 0) - page0 == 4 * 3 * 4);
  CHECK(store.row(0, a, 5, 1) - page0 == 2 * (4 * 3 * 4) + 1 * (4 * 4) + 1 * 4);
}

TEST_CASE("paged pool: its limit defaults to full capacity for every sequence, its memory grows a sequence's worth at a time") {
  const std::vector<TensorSpec> specs{{1, 8}, {2, 4}};
  constexpr std::size_t page_bytes = 16 * (8 + 2 * 4) * sizeof(float);  // both tensors
  CacheStore<Paged<16>, float> store(specs, {.max_sequences = 4, .capacity = 448, .poison_unused = true});
  CHECK(store.pool_pages() == 4 * 28);
  CHECK(store.free_pages() == 4 * 28);
  CHECK(store.committed_pages() == 0);
  CHECK(store.bytes_allocated() == 0);
  const int a = store.open(), b = store.open();
  store.grow(a, 1);  // the first page commits one chunk: 28 pages, one sequence at full capacity
  CHECK(store.committed_pages() == 28);
  CHECK(store.bytes_allocated() == 28 * page_bytes);
  CHECK(store.free_pages() == 4 * 28 - 1);
  const float* first = store.row(0, a, 0, 0);
  store.grow(b, 27 * 16);  // 27 more pages: the chunk is used up, nothing moves
  CHECK(store.committed_pages() == 28);
  CHECK(store.free_pages() == 4 * 28 - 28);
  store.grow(a, 16);  // a's second page needs a second chunk; the first page stays where it was
  CHECK(store.committed_pages() == 56);
  CHECK(store.bytes_allocated() == 56 * page_bytes);
  CHECK(store.row(0, a, 0, 0) == first);
  CHECK(store.pages_of(a)[1] == 28);  // the lowest page of the new chunk
  CHECK(std::isnan(*store.row(1, a, 16, 1)));  // committed pages are poisoned until written
  // Closing returns pages to the pool, not memory: the next sequence reuses them.
  store.close(b);
  CHECK(store.free_pages() == 4 * 28 - 2);
  const int c = store.open();
  store.grow(c, 448);
  CHECK(store.committed_pages() == 56);
}

TEST_CASE("paged pool: chunk size and limit are the caller's, and the limit is a clear error") {
  const std::vector<TensorSpec> specs{{1, 2}};
  CacheStore<Paged<4>, float> store(specs, {.max_sequences = 2, .capacity = 40, .pool_pages = 7, .pool_chunk_pages = 3});
  const int a = store.open(), b = store.open();
  store.grow(a, 5);  // 2 pages: one chunk of 3
  CHECK(store.committed_pages() == 3);
  store.grow(b, 8);  // 2 more: a second chunk
  CHECK(store.committed_pages() == 6);
  store.grow(a, 11);  // 2 more pages: the second chunk's last two
  CHECK(store.committed_pages() == 6);
  CHECK(store.free_pages() == 1);
  store.grow(b, 4);  // the last page: the third chunk is cut at the limit
  CHECK(store.committed_pages() == 7);
  CHECK(store.free_pages() == 0);
  CHECK_THROWS_WITH_AS(store.grow(b, 12), doctest::Contains("3 more page(s) of 4 tokens, 0 of 7 are free"), CapacityError);
  CHECK(store.length(b) == 12);
  CHECK(store.committed_pages() == 7);
  CHECK_THROWS_AS((CacheStore<Paged<4>, float>(specs, {.max_sequences = 1, .capacity = 8, .pool_chunk_pages = -1})), ShapeError);
}

TEST_CASE_TEMPLATE("every layout's rows start on a cache line where their stride is whole lines", Layout, Nhd, Hnd, Paged<16>) {
  // A mapped buffer (1 MiB) and one from malloc's heap (16 KiB, 16-byte alignment): rows of 64
  // floats are 4 lines, so each must start on a line (cache_line.hpp, zeroed_buffer.hpp).
  for (const int capacity : {16, 1 << 10}) {
    const std::vector<TensorSpec> specs{TensorSpec{2, 64}};
    CacheStore<Layout, float> store(specs, {.max_sequences = 2, .capacity = capacity});
    store.open(), store.open();
    store.grow(1, capacity);
    for (const int token : {0, 1, capacity - 1})
      for (int head = 0; head < 2; ++head) {
        INFO("capacity ", capacity, " token ", token, " head ", head);
        CHECK(reinterpret_cast<std::uintptr_t>(store.row(0, 1, token, head)) % detail::kCacheLineBytes == 0);
      }
  }
}

TEST_CASE("the CPU kernels' scratch vectors start on a cache line, however they grow") {
  // glibc's malloc aligns to 16 bytes only: among these sizes some land off a line without the
  // allocator (attend_jobs' queries and scores, attend_block's BlockScratch).
  detail::CacheLineVector<float> grown;
  for (const std::size_t n : {1, 3, 16, 17, 100, 2304, 4099, 300000}) {
    INFO("n ", n);
    const detail::CacheLineVector<float> made(n, 1.0f);
    CHECK(reinterpret_cast<std::uintptr_t>(made.data()) % detail::kCacheLineBytes == 0);
    grown.resize(n);
    CHECK(reinterpret_cast<std::uintptr_t>(grown.data()) % detail::kCacheLineBytes == 0);
  }
}

TEST_CASE("poisoned contiguous capacity is NaN until written") {
  const std::vector<TensorSpec> specs{{1, 2}};
  CacheStore<Nhd, float> store(specs, {.max_sequences = 1, .capacity = 3, .poison_unused = true});
  const int s = store.open();
  CHECK(std::isnan(*store.row(0, s, 2, 0)));
  store.grow(s, 1);
  *store.row(0, s, 0, 0) = 1.0f;
  CHECK(*store.row(0, s, 0, 0) == 1.0f);
}

TEST_CASE_TEMPLATE("a reopened slot has a new generation, a grown one keeps its own", Layout, Nhd, Hnd, Paged<4>) {
  const std::vector<TensorSpec> specs{{1, 2}};
  CacheStore<Layout, float> store(specs, {.max_sequences = 2, .capacity = 8});
  const int a = store.open(), b = store.open();
  CHECK(store.generation(a) != store.generation(b));
  const auto first = store.generation(a);
  store.grow(a, 3);
  CHECK(store.generation(a) == first);
  store.close(a);
  CHECK_THROWS_AS(store.generation(a), SequenceError);
  CHECK(store.open() == a);  // the same slot ...
  CHECK(store.generation(a) != first);  // ... opened again
}

// Issue #11, bug 6: a buffer's element count (sequences x capacity, or pages x page size, times a
// row's elements) was multiplied in size_t unchecked; 2^64 wrapped to an empty buffer that later
// writes would overrun. Now it is refused before anything is allocated.
TEST_CASE("cache buffers beyond what memory can address are refused before allocation") {
  const std::vector<TensorSpec> wide{{1 << 16, 1 << 16}};  // 2^32 elements per token
  check_throws_with<ShapeError>([&] { CacheStore<Nhd, float>(wide, {.max_sequences = 1 << 16, .capacity = 1 << 16}); },
                                "(65536 heads x 65536) for 4294967296 token slots");
  check_throws_with<ShapeError>([&] { CacheStore<Hnd, float>(wide, {.max_sequences = 1 << 16, .capacity = 1 << 16}); },
                                "for 4294967296 token slots");
  check_throws_with<ShapeError>([&] { CacheStore<Paged<256>, float>(wide, {.max_sequences = 1, .capacity = 16, .pool_pages = 1 << 24}); },
                                "for 4294967296 token slots");
}

/// The memory tests' tensors: 2 of 8 heads of 64 floats, 4 KiB a token.
const std::vector<TensorSpec> kFourKiBPerToken{TensorSpec{8, 64}, TensorSpec{8, 64}};

/// Fills every row of tokens [first, first + n) of `seq` (a store of kFourKiBPerToken) with value(t).
template <class Store, class Value>
void write_tokens(Store& store, int seq, int first, int n, Value value) {
  for (int t = 0; t < n; ++t)
    for (int tensor = 0; tensor < 2; ++tensor)
      for (int h = 0; h < 8; ++h) std::fill_n(store.row(tensor, seq, first + t, h), 64, value(t));
}
const auto kOnes = [](int) { return 1.0f; };

using polyattn::testing::resident_bytes;
using polyattn::testing::resident_memory_unmeasurable;

// A contiguous layout reserves every sequence's capacity up front, but as address space: the
// buffers are zeros the OS commits as rows are written (cache/zeroed_buffer.hpp), so a store sized
// for many sequences (beams, a batch) costs resident memory for the rows it holds. The control: a
// poisoned store writes NaN everywhere and so commits all it allocates, which the probe must see.
TEST_CASE("a contiguous layout's capacity is resident only where rows are written") {
  if (const char* why = resident_memory_unmeasurable()) {
    MESSAGE("skipped: ", why);
    return;
  }
  const std::vector<TensorSpec>& specs = kFourKiBPerToken;
  constexpr long long kMiB = 1 << 20;
  const long long before = resident_bytes();
  CacheStore<Nhd, float> store(specs, {.max_sequences = 64, .capacity = 4096});
  REQUIRE(store.bytes_allocated() == std::size_t(1024 * kMiB));
  const int seq = store.open();
  write_tokens(store, seq, store.grow(seq, 256), 256, kOnes);  // 1 MiB of rows written
  const long long unpoisoned = resident_bytes() - before;
  MESSAGE("1 GiB contiguous store with 1 MiB of rows written: ", unpoisoned / kMiB, " MiB resident");
  CHECK(unpoisoned < 64 * kMiB);
  const long long before_control = resident_bytes();
  CacheStore<Hnd, float> poisoned(specs, {.max_sequences = 16, .capacity = 4096, .poison_unused = true});  // 256 MiB
  const long long control = resident_bytes() - before_control;
  MESSAGE("256 MiB poisoned store: ", control / kMiB, " MiB resident");
  CHECK(control >= 240 * kMiB);
}

// The same promise for a store made after others were freed, as a server or the Whisper example
// makes one per request. glibc raises its mapping threshold to the size of any mapped block it
// frees (up to 32 MiB); a later calloc below it then reuses freed heap memory, which it must clear
// with memset, committing all of it. So buffers from 128 KiB up come from mmap directly.
TEST_CASE("a contiguous store made after a freed one is still resident only where rows are written") {
  if (const char* why = resident_memory_unmeasurable()) {
    MESSAGE("skipped: ", why);
    return;
  }
  constexpr long long kMiB = 1 << 20;
  {  // a 24 MiB block the allocator maps, written and freed: the threshold is now 24 MiB or more
    auto* block = static_cast<char*>(std::malloc(24 * kMiB));
    REQUIRE(block != nullptr);
    std::memset(block, 1, 24 * kMiB);
    asm volatile("" : : "r"(block) : "memory");  // keep the write and the free
    std::free(block);
  }
  const auto written_resident = [&] {
    const long long before = resident_bytes();
    CacheStore<Hnd, float> store(kFourKiBPerToken, {.max_sequences = 4, .capacity = 1024});  // 2 x 8 MiB
    const int seq = store.open();
    write_tokens(store, seq, store.grow(seq, 64), 64, kOnes);
    return resident_bytes() - before;
  };
  for (int round = 0; round < 3; ++round) {  // each store reuses what the one before freed
    const long long resident = written_resident();
    MESSAGE("16 MiB store with 256 KiB of rows written, round ", round, ": ", resident / 1024, " KiB resident");
    CHECK(resident < 4 * kMiB);
  }
}

using polyattn::testing::huge_page_bytes;
using polyattn::testing::huge_page_mode;

// CacheConfig::huge_pages: the rows a store commits come as 2 MiB pages where the system's
// transparent huge pages allow it; without it, in "madvise" mode, they stay 4 KiB pages. 16 MiB
// of rows are written, so at least the 2 MiB pages wholly inside them (12 MiB) can be huge.
template <class Layout>
long long huge_bytes_after_writing(bool huge_pages) {
  const long long before = huge_page_bytes();
  CacheStore<Layout, float> store(kFourKiBPerToken, {.max_sequences = 4, .capacity = 2048, .huge_pages = huge_pages});
  const int seq = store.open();
  const int first = store.grow(seq, 2048);  // 8 MiB of rows per sequence
  const int other = store.open();
  store.grow(other, 2048);
  for (int s : {seq, other}) write_tokens(store, s, first, 2048, [](int t) { return float(t); });
  CHECK(store.row(1, other, first + 2047, 7)[63] == 2047.0f);
  return huge_page_bytes() - before;
}

// (No skip under the sanitizers: with GCC 12's ASan+UBSan and TSan, and Clang 14's ASan+UBSan, it
// ran and passed, 16 MiB of huge pages with huge_pages and none without, on Debian 12, 2026-12-07.)
TEST_CASE_TEMPLATE("huge_pages backs a store's rows with 2 MiB pages where the system allows", Layout, Hnd, Nhd, Paged<16>) {
  const std::string mode = huge_page_mode();
  if (mode.empty() || mode == "never" || huge_page_bytes() < 0) {
    MESSAGE("skipped: transparent huge pages are off or not visible (mode '", mode, "')");
    return;
  }
  constexpr long long kMiB = 1 << 20;
  const long long huge = huge_bytes_after_writing<Layout>(true);
  MESSAGE("16 MiB of rows with huge_pages (THP mode ", mode, "): ", huge / kMiB, " MiB in huge pages");
  CHECK(huge >= 12 * kMiB);
  if (mode == "madvise") {  // only asked-for memory gets huge pages
    const long long plain = huge_bytes_after_writing<Layout>(false);
    MESSAGE("without huge_pages: ", plain / kMiB, " MiB in huge pages");
    CHECK(plain < 2 * kMiB);
  }
}
