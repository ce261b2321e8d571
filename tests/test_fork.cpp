// Attention::fork: a child sequence holds its parent's tokens and goes on independently (a beam).
// Checked against a replay: the same tokens written into a fresh sequence give bit-identical
// outputs on the same executor, for the child and for the parent, after either is closed, with
// unused capacity NaN (a shared page freed too early, or a row written into a page the other
// sequence still reads, shows). Paged<P> shares full pages and copies only the last one.
#include <doctest/doctest.h>

#include <random>
#include <set>
#include <vector>

#include <polyattn/convert/x_cache.hpp>
#include <polyattn/polyattn.hpp>

#include "support/check_throws.hpp"
#include "support/combos.hpp"
#include "support/fork_scenarios.hpp"

using namespace polyattn;
using polyattn::testing::fork_equals_replay;
using polyattn::testing::random_matrix;
using polyattn::testing::RandomRows;

namespace {

using polyattn::testing::check_throws_with;

}  // namespace

// Paged<4> (support/combos.hpp): the scenario's 10-token prefix fills two pages and part of a
// third (Mtla<16, 3, 4>: 4 rows, one full page and an open row, so the fork copies that page
// although it is full).
using ForkMtla = Mtla<16, 3, 4>;  // aliases: a macro argument may not hold a comma
using ForkMlaPreserved = Mla<12, 4, MlaKeyPart::preserved>;
using ForkMlaRope = Mla<12, 4, MlaKeyPart::decoupled_rope>;
TEST_CASE_TEMPLATE("fork: the child and the parent go on as if each had been written afresh", C,
                   POLYATTN_ON_CPU_EXECUTORS(POLYATTN_FORK_COMBOS, Mha), POLYATTN_ON_CPU_EXECUTORS(POLYATTN_FORK_COMBOS, Gqa<2>),
                   POLYATTN_ON_CPU_EXECUTORS(POLYATTN_FORK_COMBOS, Mqa), POLYATTN_ON_CPU_EXECUTORS(POLYATTN_FORK_COMBOS, SlimK2),
                   POLYATTN_ON_CPU_EXECUTORS(POLYATTN_FORK_COMBOS, XCache), POLYATTN_ON_CPU_EXECUTORS(POLYATTN_FORK_COMBOS, ForkMtla),
                   POLYATTN_ON_CPU_EXECUTORS(POLYATTN_FORK_COMBOS, ForkMlaPreserved),
                   POLYATTN_ON_CPU_EXECUTORS(POLYATTN_FORK_COMBOS, ForkMlaRope)) {
  fork_equals_replay<typename C::type>();
}

TEST_CASE("fork on Paged<P> shares the full pages and copies the partly filled last one") {
  const AttentionShape s{2, 8};
  std::mt19937 rng(5);
  Attention<Mha, Paged<4>, exec::Reference> attn(s, {.max_sequences = 3, .capacity = 16, .pool_pages = 7, .poison_unused = true});
  const int parent = attn.open_sequence();
  attn.append(parent, RandomRows<Mha>(s, 10, rng).view());  // pages: 2 full + 1 holding 2 tokens
  const auto& store = attn.cache();
  REQUIRE(store.free_pages() == 4);
  const int child = attn.fork(parent);
  CHECK(store.free_pages() == 3);  // only the last page was copied
  for (int i = 0; i < 2; ++i) {
    CHECK(store.pages_of(child)[std::size_t(i)] == store.pages_of(parent)[std::size_t(i)]);
    CHECK(store.references(store.pages_of(parent)[std::size_t(i)]) == 2);
  }
  CHECK(store.pages_of(child)[2] != store.pages_of(parent)[2]);
  CHECK(store.references(store.pages_of(child)[2]) == 1);
  // Memory: 4 pages held (2 shared, 2 last pages), each counted once; 2 x 10 rows without sharing.
  const std::size_t page_bytes = 4 * 2 * (2 * 8) * sizeof(float);  // 4 tokens x (K, V) x (2 heads x 8)
  const CacheMemory memory = attn.cache_memory();
  CHECK(memory.held == 4 * page_bytes);
  CHECK(memory.shared == 2 * page_bytes);
  CHECK(memory.unshared == 6 * page_bytes);  // each of the two sequences with its own 3 pages
  CHECK(memory.allocated == 4 * page_bytes);  // one chunk committed: a sequence at full capacity (16 tokens)
  CHECK(attn.cache_bytes_used(parent) + attn.cache_bytes_used(child) == 20 * page_bytes / 4);
  // A fork of a sequence that ends on a page boundary copies nothing.
  attn.append(parent, RandomRows<Mha>(s, 2, rng).view());
  const int free_before = store.free_pages();
  const int twin = attn.fork(parent);
  CHECK(store.free_pages() == free_before);
  CHECK(store.references(store.pages_of(parent)[0]) == 3);
  // Closing returns a page to the pool only when its last holder lets go.
  attn.close_sequence(parent);
  CHECK(store.free_pages() == free_before + 0);  // every page of the parent is still held by the twin
  attn.close_sequence(twin);
  CHECK(store.references(store.pages_of(child)[0]) == 1);
  attn.close_sequence(child);
  CHECK(store.free_pages() == 7);
  CHECK(attn.cache_memory().held == 0);
  CHECK(attn.cache_memory().shared == 0);
}

TEST_CASE_TEMPLATE("contiguous layouts: a fork copies its rows, so memory holds both and shares none", L, Nhd, Hnd) {
  const AttentionShape s{2, 8};
  std::mt19937 rng(6);
  Attention<Mha, L, exec::Reference> attn(s, {.max_sequences = 3, .capacity = 16});
  const int parent = attn.open_sequence();
  attn.append(parent, RandomRows<Mha>(s, 10, rng).view());
  attn.fork(parent);
  const std::size_t row_bytes = 2 * (2 * 8) * sizeof(float);
  CHECK(attn.cache_memory().held == 20 * row_bytes);
  CHECK(attn.cache_memory().shared == 0);
  CHECK(attn.cache_memory().allocated == 3 * 16 * row_bytes);
}

TEST_CASE("a fork that cannot be made changes nothing") {
  const AttentionShape s{2, 8};
  std::mt19937 rng(6);
  SUBCASE("no free sequence slot") {
    Attention<Mha, Nhd, exec::Reference> attn(s, {.max_sequences = 2, .capacity = 8});
    const int a = attn.open_sequence(), b = attn.open_sequence();
    attn.append(a, RandomRows<Mha>(s, 3, rng).view());
    check_throws_with<CapacityError>([&] { attn.fork(a); }, "sequence slots are open");
    CHECK(attn.length(a) == 3);
    CHECK(attn.length(b) == 0);
  }
  SUBCASE("no free page for the partly filled last page") {
    Attention<Mha, Paged<4>, exec::Reference> attn(s, {.max_sequences = 3, .capacity = 8, .pool_pages = 2});
    const int a = attn.open_sequence();
    attn.append(a, RandomRows<Mha>(s, 6, rng).view());  // both pages held
    check_throws_with<CapacityError>([&] { attn.fork(a); }, "page pool exhausted");
    CHECK(attn.length(a) == 6);
    CHECK(attn.cache().free_pages() == 0);
    CHECK(attn.open_sequence() == 1);  // the slot the failed fork would have taken is still free
  }
  SUBCASE("a closed parent") {
    Attention<Mha, Hnd, exec::Reference> attn(s, {.max_sequences = 2, .capacity = 8});
    check_throws_with<SequenceError>([&] { attn.fork(1); }, "not open");
  }
}

TEST_CASE("a beam step keeps, forks and drops sequences by index") {
  const AttentionShape s{2, 8};
  std::mt19937 rng(9);
  // Three beams of 6 tokens on Paged<4> (a full page and a partly filled one each): 6 of 7 pages.
  Attention<Mha, Paged<4>, exec::Reference> attn(s, {.max_sequences = 6, .capacity = 16, .pool_pages = 7, .poison_unused = true});
  std::vector<int> beams;
  for (int b = 0; b < 3; ++b) {
    beams.push_back(attn.open_sequence());
    attn.append(beams.back(), RandomRows<Mha>(s, 6, rng).view());
  }
  const auto& store = attn.cache();
  REQUIRE(store.free_pages() == 1);
  const int parents_ok[] = {0, 0, 0, 2};  // beam 0 three times (two forks, two pages), beam 1 dropped
  SUBCASE("a step that fits once the dropped beam's pages are back") {
    const std::vector<int> next = attn.reorder(beams, parents_ok);
    REQUIRE(next.size() == 4);
    CHECK(next[0] == beams[0]);
    CHECK(next[3] == beams[2]);
    CHECK(store.free_slots() == 6 - 4);  // beam 1 was closed (its slot may hold a fork now)
    CHECK(std::set<int>(next.begin(), next.end()).size() == 4);
    for (int seq : next) CHECK(attn.length(seq) == 6);
    CHECK(store.pages_of(next[1])[0] == store.pages_of(beams[0])[0]);  // the full page is shared
    CHECK(store.free_pages() == 1 + 2 - 2);
  }
  SUBCASE("a step that does not fit changes nothing") {
    const int parents_too_many[] = {0, 0, 0, 1, 2};  // two forks need two pages, one is free and none is dropped
    check_throws_with<CapacityError>([&] { attn.reorder(beams, parents_too_many); }, "page(s)");
    for (int seq : beams) CHECK(attn.length(seq) == 6);
    CHECK(store.free_pages() == 1);
    const int bad_index[] = {0, 3};
    check_throws_with<ShapeError>([&] { attn.reorder(beams, bad_index); }, "parent index 3");
    const int twice[] = {beams[0], beams[0]};
    const int first[] = {0};
    check_throws_with<ShapeError>([&] { attn.reorder(twice, first); }, "appears twice");
    for (int seq : beams) CHECK(store.is_open(seq));
  }
}
