// Bad input gets a clear error naming the value, and a failed call leaves the cache as it was.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include <polyattn/polyattn.hpp>

#include "support/dense_oracle.hpp"
#include "support/check_throws.hpp"

using namespace polyattn;
using polyattn::testing::check_throws_with;
using polyattn::testing::random_matrix;

TEST_CASE("mismatched shapes are rejected with the offending numbers") {
  Attention<Gqa<2>, Nhd, exec::CpuSimd> attn({6, 16}, {.max_sequences = 2, .capacity = 8}, {}, 1);
  const int s = attn.open_sequence();
  std::mt19937 rng(1);
  RowMatrixXf q = random_matrix(2, 96, rng), k = random_matrix(2, 48, rng), v = random_matrix(2, 48, rng), out(2, 96);
  RowMatrixXf k_bad = random_matrix(2, 96, rng), q_bad = random_matrix(2, 95, rng), out_bad(3, 96);
  check_throws_with<ShapeError>([&] { attn.prefill(s, q, {k_bad, v}, Mask::causal, out); }, "k has 96 columns, expected");
  check_throws_with<ShapeError>([&] { attn.prefill(s, q_bad, {k, v}, Mask::causal, out); }, "95 columns, expected 96");
  check_throws_with<ShapeError>([&] { attn.prefill(s, q, {k, v}, Mask::causal, out_bad); }, "out has 3 rows");
  check_throws_with<ShapeError>([&] { attn.prefill(s, q, {k.topRows(1), v.topRows(1)}, Mask::causal, out); },
                                "q has 2 rows but there are 1 cache rows");
  CHECK(attn.length(s) == 0);  // nothing was written by the failed calls
}

TEST_CASE("a group size that does not divide the heads is rejected") {
  using A = Attention<Gqa<4>, Nhd, exec::Reference>;
  check_throws_with<ShapeError>([] { A({6, 64}, {}); }, "n_heads = 6 is not a multiple of the group size 4");
  check_throws_with<ShapeError>([] { Attention<Mha, Nhd, exec::Reference>({0, 64}, {}); }, "must be >= 1");
}

TEST_CASE("decode on an unknown or duplicated sequence is rejected") {
  Attention<Mha, Hnd, exec::CpuSimd> attn({2, 4}, {.max_sequences = 2, .capacity = 8}, {}, 1);
  const int s = attn.open_sequence();
  RowMatrixXf q = RowMatrixXf::Zero(1, 8), k = RowMatrixXf::Zero(1, 8), v = RowMatrixXf::Zero(1, 8), out(1, 8);
  const int unknown[] = {1};
  check_throws_with<SequenceError>([&] { attn.decode(unknown, q, {k, v}, out); }, "sequence 1 is not open");
  const int out_of_range[] = {7};
  check_throws_with<SequenceError>([&] { attn.decode(out_of_range, q, {k, v}, out); }, "sequence 7 is not open");
  RowMatrixXf q2 = RowMatrixXf::Zero(2, 8), k2 = RowMatrixXf::Zero(2, 8), v2 = RowMatrixXf::Zero(2, 8), out2(2, 8);
  const int twice[] = {s, s};
  check_throws_with<ShapeError>([&] { attn.decode(twice, q2, {k2, v2}, out2); }, "appears twice");
  check_throws_with<ShapeError>([&] { attn.attend(std::span<const int>(twice, 1), q, out); }, "no cached tokens");
  attn.close_sequence(s);
  check_throws_with<SequenceError>([&] { attn.close_sequence(s); }, "is not open");
  CHECK(attn.open_sequence() == s);
  CHECK(attn.open_sequence() == 1);
  check_throws_with<CapacityError>([&] { attn.open_sequence(); }, "all 2 sequence slots are open");
}

TEST_CASE_TEMPLATE("overflow is a clear error and loses nothing", L, Nhd, Hnd, Paged<3>) {
  Attention<Mha, L, exec::CpuSimd> attn({2, 4}, {.max_sequences = 2, .capacity = 5, .poison_unused = true}, {}, 1);
  const int a = attn.open_sequence(), b = attn.open_sequence();
  std::mt19937 rng(3);
  RowMatrixXf q = random_matrix(5, 8, rng), k = random_matrix(5, 8, rng), v = random_matrix(5, 8, rng), out(5, 8);
  attn.prefill(a, q, {k, v}, Mask::causal, out);
  attn.prefill(b, q.topRows(2), {k.topRows(2), v.topRows(2)}, Mask::causal, out.topRows(2));
  const int ab[] = {b, a};
  RowMatrixXf q2 = random_matrix(2, 8, rng), out2(2, 8), before(2, 8);
  attn.attend(ab, q2, before);
  // Decode would overflow sequence a: the whole batch is refused, b included.
  check_throws_with<CapacityError>([&] { attn.decode(ab, q2, {k.topRows(2), v.topRows(2)}, out2); },
                                   "holds 5 of 5 tokens; appending 1 would overflow");
  check_throws_with<CapacityError>([&] { attn.append(b, {k.topRows(4), v.topRows(4)}); }, "holds 2 of 5");
  CHECK(attn.length(a) == 5);
  CHECK(attn.length(b) == 2);
  attn.attend(ab, q2, out2);
  CHECK(out2 == before);  // bit-identical: the cache is as it was
}

// Issue #11, bug 1: decode checked each sequence against the free pages on its own and then grew
// them one after another, so a batch that needed more pages than were free wrote its first
// sequences and threw on a later one. Each sequence here fills one page exactly; the pool has
// one page left, and the batch needs two.
TEST_CASE_TEMPLATE("page-pool exhaustion part-way through a batch is refused before anything is written", L, Paged<2>, Paged<5>) {
  constexpr int P = L::page_size;
  Attention<Mha, L, exec::Reference> attn({2, 4}, {.max_sequences = 2, .capacity = 4 * P, .pool_pages = 3, .poison_unused = true});
  const int a = attn.open_sequence(), b = attn.open_sequence();
  std::mt19937 rng(4);
  RowMatrixXf q = random_matrix(P + 1, 8, rng), k = random_matrix(P + 1, 8, rng), v = random_matrix(P + 1, 8, rng), out(P + 1, 8);
  attn.prefill(a, q.topRows(P), {k.topRows(P), v.topRows(P)}, Mask::causal, out.topRows(P));
  attn.prefill(b, q.topRows(P), {k.topRows(P), v.topRows(P)}, Mask::causal, out.topRows(P));
  REQUIRE(attn.cache().free_pages() == 1);
  const int ab[] = {a, b};
  RowMatrixXf q2 = random_matrix(2, 8, rng), out2(2, 8), before(2, 8);
  attn.attend(ab, q2, before);
  const auto unchanged = [&] {
    CHECK(attn.length(a) == P);
    CHECK(attn.length(b) == P);
    CHECK(attn.cache().free_pages() == 1);
    attn.attend(ab, q2, out2);
    CHECK(out2 == before);  // bit-identical: the cache is as it was
  };
  check_throws_with<CapacityError>([&] { attn.decode(ab, q2, {k.topRows(2), v.topRows(2)}, out2); },
                                   "page pool exhausted: the 2 sequences of this call need 2 more page(s)");
  unchanged();
  // Single-sequence calls that need two pages with one free.
  check_throws_with<CapacityError>([&] { attn.prefill(a, q, {k, v}, Mask::causal, out); }, "needs 2 more page(s)");
  unchanged();
  check_throws_with<CapacityError>([&] { attn.append(b, {k, v}); }, "needs 2 more page(s)");
  unchanged();
  // What fits still goes through: one sequence's decode takes the last page.
  const int only_b[] = {b};
  attn.decode(only_b, q2.topRows(1), {k.topRows(1), v.topRows(1)}, out2.topRows(1));
  CHECK(attn.length(b) == P + 1);
  CHECK(attn.cache().free_pages() == 0);
}

// The contiguous layouts give every sequence its own capacity: a batch in which a later sequence
// is full is refused whole, the earlier ones included.
TEST_CASE_TEMPLATE("capacity overflow part-way through a batch is refused before anything is written", L, Nhd, Hnd) {
  Attention<Mha, L, exec::Reference> attn({2, 4}, {.max_sequences = 3, .capacity = 4, .poison_unused = true});
  const int a = attn.open_sequence(), b = attn.open_sequence(), c = attn.open_sequence();
  std::mt19937 rng(6);
  RowMatrixXf q = random_matrix(4, 8, rng), k = random_matrix(4, 8, rng), v = random_matrix(4, 8, rng), out(4, 8);
  attn.prefill(a, q.topRows(1), {k.topRows(1), v.topRows(1)}, Mask::causal, out.topRows(1));
  attn.prefill(b, q.topRows(2), {k.topRows(2), v.topRows(2)}, Mask::causal, out.topRows(2));
  attn.prefill(c, q, {k, v}, Mask::causal, out);  // full
  const int abc[] = {a, b, c};
  RowMatrixXf q3 = random_matrix(3, 8, rng), out3(3, 8), before(3, 8);
  attn.attend(abc, q3, before);
  check_throws_with<CapacityError>([&] { attn.decode(abc, q3, {k.topRows(3), v.topRows(3)}, out3); },
                                   "sequence 2 holds 4 of 4 tokens; appending 1 would overflow");
  CHECK(attn.length(a) == 1);
  CHECK(attn.length(b) == 2);
  CHECK(attn.length(c) == 4);
  attn.attend(abc, q3, out3);
  CHECK(out3 == before);
}

TEST_CASE("row counts that do not match the batch are rejected and change nothing") {
  Attention<Mha, Paged<4>, exec::CpuSimd> attn({2, 4}, {.max_sequences = 2, .capacity = 8, .poison_unused = true}, {}, 1);
  const int a = attn.open_sequence(), b = attn.open_sequence();
  std::mt19937 rng(9);
  RowMatrixXf q = random_matrix(2, 8, rng), k = random_matrix(2, 8, rng), v = random_matrix(2, 8, rng), out(2, 8);
  attn.append(a, {k, v});
  attn.append(b, {k, v});
  const int ab[] = {a, b};
  RowMatrixXf before(2, 8);
  attn.attend(ab, q, before);
  check_throws_with<ShapeError>([&] { attn.decode(ab, q, {k.topRows(1), v.topRows(1)}, out); },
                                "decode: 2 sequences but 1 cache rows (one new token per sequence)");
  check_throws_with<ShapeError>([&] { attn.decode(ab, q.topRows(1), {k, v}, out); }, "decode: 2 sequences but q has 1 rows");
  check_throws_with<ShapeError>([&] { attn.decode(ab, q, {k, v}, out.topRows(1)); }, "decode: 2 sequences but out has 1 rows");
  check_throws_with<ShapeError>([&] { attn.attend(ab, q.topRows(1), out); }, "attend: 2 sequences but q has 1 rows");
  check_throws_with<ShapeError>([&] { attn.append(a, {k, v.topRows(1)}); }, "k has 2 rows but v has 1");
  CHECK(attn.length(a) == 2);
  CHECK(attn.length(b) == 2);
  attn.attend(ab, q, out);
  CHECK(out == before);
}

// A call with no rows (an empty batch, a prefill or append of no tokens) is valid and does nothing.
TEST_CASE_TEMPLATE("calls with zero rows change nothing", L, Nhd, Paged<4>) {
  Attention<Gqa<2>, L, exec::CpuSimd> attn({4, 4}, {.max_sequences = 2, .capacity = 8, .poison_unused = true}, {}, 2);
  const int a = attn.open_sequence();
  std::mt19937 rng(10);
  RowMatrixXf q = random_matrix(3, 16, rng), k = random_matrix(3, 8, rng), v = random_matrix(3, 8, rng), out(3, 16);
  attn.prefill(a, q, {k, v}, Mask::causal, out);
  const std::size_t allocated = attn.cache_bytes_allocated();
  RowMatrixXf none_q(0, 16), none_kv(0, 8), none_out(0, 16);
  attn.prefill(a, none_q, {none_kv, none_kv}, Mask::causal, none_out);
  attn.prefill(a, none_q, {none_kv, none_kv}, Mask::full, none_out);
  attn.append(a, {none_kv, none_kv});
  const std::span<const int> no_sequences;
  attn.decode(no_sequences, none_q, {none_kv, none_kv}, none_out);
  attn.attend(no_sequences, none_q, none_out);
  CHECK(attn.length(a) == 3);
  CHECK(attn.cache_bytes_allocated() == allocated);
  // The zero-row calls also run on a sequence that holds nothing yet.
  const int b = attn.open_sequence();
  attn.prefill(b, none_q, {none_kv, none_kv}, Mask::causal, none_out);
  CHECK(attn.length(b) == 0);
  const int one[] = {a};
  RowMatrixXf y(1, 16), y_again(1, 16);
  attn.attend(one, q.bottomRows(1), y);
  attn.decode(one, q.bottomRows(1), {k.bottomRows(1), v.bottomRows(1)}, y_again);  // still works after them
  CHECK(attn.length(a) == 4);
}

TEST_CASE("a cache configuration out of range is rejected naming the value") {
  using A = Attention<Mha, Nhd, exec::Reference>;
  using P = Attention<Mha, Paged<16>, exec::Reference>;
  check_throws_with<ShapeError>([] { A({2, 4}, {.max_sequences = 1, .capacity = 0}); }, "CacheConfig.capacity must be >= 1, got 0");
  check_throws_with<ShapeError>([] { P({2, 4}, {.max_sequences = 1, .capacity = -5}); }, "CacheConfig.capacity must be >= 1, got -5");
  check_throws_with<ShapeError>([] { A({2, 4}, {.max_sequences = 0}); }, "CacheConfig.max_sequences must be >= 1, got 0");
  // A negative count used to size the store's tables before it was checked (std::length_error).
  check_throws_with<ShapeError>([] { A({2, 4}, {.max_sequences = -1}); }, "CacheConfig.max_sequences must be >= 1, got -1");
  check_throws_with<ShapeError>([] { P({2, 4}, {.max_sequences = -3}); }, "CacheConfig.max_sequences must be >= 1, got -3");
  check_throws_with<ShapeError>([] { P({2, 4}, {.max_sequences = 1, .capacity = 8, .pool_pages = -1}); },
                                "CacheConfig.pool_pages must be >= 0, got -1");
}

// Issue #11, bug 6: Paged<P> sized its default pool as int arithmetic (capacity + P - 1, then
// max_sequences * pages_per_seq), which overflowed before anything checked it.
TEST_CASE("a default page pool beyond int range is a clear error") {
  using P = Attention<Mha, Paged<16>, exec::Reference>;
  check_throws_with<ShapeError>([] { P({1, 1}, {.max_sequences = 16, .capacity = 2147483647}); },
                                "16 sequences x 134217728 pages of 16 tokens (capacity 2147483647) = 2147483648 pages, more than 2147483647");
  check_throws_with<ShapeError>([] { P({1, 1}, {.max_sequences = 40000, .capacity = 1 << 20}); },
                                "40000 sequences x 65536 pages of 16 tokens (capacity 1048576) = 2621440000 pages, more than 2147483647");
}

TEST_CASE("the dispatcher maps names to types and refuses anything else") {
  std::string picked;
  dispatch(PolicyChoice{"gqa", 2, "paged16", "reference"}, [&](auto type) { picked = decltype(type)::type::name(); });
  CHECK(picked == "gqa2/paged16/reference");
  dispatch(PolicyChoice{"mqa", 1, "hnd", "cpu"}, [&](auto type) { picked = decltype(type)::type::name(); });
  CHECK(picked == "mqa/hnd/cpu");
  check_throws_with<ShapeError>([] { dispatch(PolicyChoice{"gqa", 3, "nhd", "cpu"}, [](auto) {}); },
                                "gqa with group size 3 is not instantiated; available: mha, mqa, gqa2, gqa4, gqa8");
  check_throws_with<ShapeError>([] { dispatch(PolicyChoice{"mla", 1, "nhd", "cpu"}, [](auto) {}); }, "'mla' is not instantiated");
  check_throws_with<ShapeError>([] { dispatch(PolicyChoice{"mha", 1, "paged8", "cpu"}, [](auto) {}); },
                                "unknown cache layout 'paged8'; available: nhd, hnd, paged16");
  check_throws_with<ShapeError>([] { dispatch(PolicyChoice{"mha", 1, "nhd", "gpu"}, [](auto) {}); },
                                "unknown executor 'gpu'; available: reference, cpu");
}
