// The decode tile's score pass (exec/cpu/decode_tile.hpp) scores R rows at a time for a group of
// heads, whether they share a key or each reads its own slice of the row (SlimK2). A row's scores
// must not depend on which rows share its block: each is checked bit for bit against the same
// row scored alone, and against a double dot product within the float bound dim * u * sum |q k|. Group sizes 1-12 (two head blocks past 8), widths with a
// scalar tail, tiles not a multiple of R; float, half and bfloat16 keys; AVX2 and, where built,
// AVX-512. The value pass over bfloat16 rows, which it reads two vectors a load into other lanes,
// gives the bits of the same values in float.
// A tile gathered from several runs of the store (a table of rows: the pages of Paged<P>) is
// scored and accumulated bit for bit as the same rows in one run.
// And the next tile's paced asks (NextTile) cover every line of its rows, run by run, and reach
// all of them within a tile's vector loads, whose counts per row (score_loads_per_row,
// value_loads_per_row) are the passes' own. And attend_chunk's tiles over pages whose heads are
// not at the same distances in every page (a store unlike Paged<P>) give the bits of Paged<P>'s,
// int8 through row tables of each head's own, float page by page, and ask for no run past the
// sequence's end.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <xsimd/xsimd.hpp>

#include <polyattn/cache/paged.hpp>
#include <polyattn/core/row_codec.hpp>
#include <polyattn/exec/cpu/decode_tile.hpp>
#include <polyattn/exec/cpu/kernels.hpp>

namespace {

using polyattn::AttendSpec;
using polyattn::CacheRun;
using polyattn::CacheStore;
using polyattn::Paged;
using polyattn::QueryJob;
using polyattn::RowScales;
using polyattn::SoftmaxState;
using polyattn::TensorSpec;
using polyattn::encode_row;
using polyattn::int8_row;
using polyattn::exec::cpu::KeyTile;
using polyattn::exec::cpu::kTile;
using polyattn::exec::cpu::TileRows;

/// The rows as a gathered tile sees them: each copied to a place of its own, in reverse order
/// (`copies`), and reached through a table (`table`).
template <class T>
TileRows<T> gathered(const std::vector<T>& rows, int width, int count, std::vector<T>& copies, std::vector<const T*>& table) {
  copies.assign(std::size_t(count) * width, T(0.0f));
  table.resize(std::size_t(count));
  for (int j = 0; j < count; ++j) {
    T* copy = copies.data() + std::ptrdiff_t(count - 1 - j) * width;
    std::copy_n(rows.data() + std::ptrdiff_t(j) * width, width, copy);
    table[std::size_t(j)] = copy;
  }
  return {nullptr, 0, table.data()};
}

template <class Arch, class T>
void check_scores(int group, int dim, int count, bool shared) {
  std::mt19937 rng(std::uint32_t(group * 1000 + dim * 10 + count));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int width = shared ? dim : group * dim;  // SlimK2-like rows hold one slice per head
  std::vector<T> rows(std::size_t(count) * width);
  for (T& x : rows) x = std::is_same_v<T, std::int8_t> ? T(std::nearbyint(127 * u(rng))) : T(u(rng));  // int8: codes
  std::vector<float> q(std::size_t(group) * dim);
  for (float& x : q) x = u(rng);
  // Where a policy scores with the query rounded, the exact sums below are of its products: `q`
  // as score_tile is given it, `qe` as the policy rounds it (bfloat16; int8 codes times the step
  // of each head, QueryCodes).
  std::vector<float> qe = q;
  if constexpr (polyattn::exec::cpu::bf16_dot_scores<Arch, T>())
    if (polyattn::exec::cpu::bf16_dot_key(dim))
      for (float& x : qe) x = polyattn::exec::cpu::round_to_bfloat16(x);
  if constexpr (polyattn::exec::cpu::int8_dot_scores<Arch, T>())
    for (int g = 0; g < group && polyattn::exec::cpu::int8_dot_key(dim); ++g) {
      float* head = qe.data() + std::ptrdiff_t(g) * dim;
      float largest = 0;
      for (int c = 0; c < dim; ++c) largest = std::max(largest, std::abs(head[c]));
      const auto codes = polyattn::exec::cpu::QueryCodes::of(largest);
      for (int c = 0; c < dim; ++c) head[c] = codes.rounded(head[c]);
    }
  const std::ptrdiff_t group_stride = shared ? 0 : dim;
  std::vector<float> scores(std::size_t(group) * kTile + 64), alone(std::size_t(group) * kTile + 64);
  polyattn::exec::cpu::score_tile<Arch>(q.data(), group, KeyTile<T>{{rows.data(), width}, group_stride, dim, count}, scores.data());
  // The same rows gathered through a table: the same scores, bit for bit.
  std::vector<T> copies;
  std::vector<const T*> table;
  std::vector<float> through_table(scores.size());
  polyattn::exec::cpu::score_tile<Arch>(q.data(), group, KeyTile<T>{gathered(rows, width, count, copies, table), group_stride, dim, count},
                                        through_table.data());
  int differing = 0, outside = 0, differing_gathered = 0;
  for (int j = 0; j < count; ++j) {
    const T* row = rows.data() + std::ptrdiff_t(j) * width;
    for (int g = 0; g < group; ++g)
      differing_gathered += std::memcmp(&scores[std::size_t(g) * kTile + j], &through_table[std::size_t(g) * kTile + j], sizeof(float)) != 0;
    polyattn::exec::cpu::score_tile<Arch>(q.data(), group, KeyTile<T>{{row, width}, group_stride, dim, 1}, alone.data());
    for (int g = 0; g < group; ++g) {
      const float ours = scores[std::size_t(g) * kTile + j];
      differing += std::memcmp(&ours, &alone[std::size_t(g) * kTile], sizeof(float)) != 0;
      double exact = 0, magnitude = 0;
      for (int c = 0; c < dim; ++c) {
        const double p = double(qe[std::size_t(g) * dim + c]) * double(float(row[g * group_stride + c]));
        exact += p;
        magnitude += std::abs(p);
      }
      outside += std::abs(double(ours) - exact) > dim * 0x1p-24 * magnitude;
    }
  }
  INFO("group ", group, ", dim ", dim, ", rows ", count, shared ? ", shared key" : ", a slice per head");
  CHECK(differing == 0);
  CHECK(differing_gathered == 0);
  CHECK(outside == 0);
}

/// The value pass over gathered rows adds what it adds over the same rows in one run, bit for bit.
template <class Arch, class T>
void check_gathered_values(int group, int dim, int count) {
  std::mt19937 rng(std::uint32_t(group * 1000 + dim * 10 + count));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<T> rows(std::size_t(count) * dim);
  for (T& x : rows) x = T(u(rng));
  std::vector<float> p(std::size_t(group) * kTile);
  for (float& x : p) x = u(rng);
  std::vector<float> strided(std::size_t(group) * dim, 0.5f), through_table = strided;
  polyattn::exec::cpu::accumulate_tile<Arch>(p.data(), group, TileRows<T>{rows.data(), dim}, count, strided.data(), dim);
  std::vector<T> copies;
  std::vector<const T*> table;
  polyattn::exec::cpu::accumulate_tile<Arch>(p.data(), group, gathered(rows, dim, count, copies, table), count, through_table.data(), dim);
  INFO("group ", group, ", dim ", dim, ", rows ", count);
  CHECK(std::memcmp(strided.data(), through_table.data(), strided.size() * sizeof(float)) == 0);
}

template <class Arch>
void check_arch() {
  for (const bool shared : {true, false})
    for (const int group : {1, 2, 3, 4, 5, 6, 8, 12})
      for (const int dim : {16, 32, 64, 72, 384})  // slices of 1-4 whole vectors in registers (score_slices; one head's key of 8 AVX2 vectors too: kLoneKeyVectors), wider, a tail
        for (const int count : {1, 3, 17, kTile}) {
          check_scores<Arch, float>(group, dim, count, shared);
          check_scores<Arch, Eigen::half>(group, dim, count, shared);
          check_scores<Arch, Eigen::bfloat16>(group, dim, count, shared);  // rows read two vectors a load (pair_loads)
          check_scores<Arch, std::int8_t>(group, dim, count, shared);       // codes (their scales are the caller's)
          if (shared)
            check_gathered_values<Arch, float>(group, dim, count), check_gathered_values<Arch, Eigen::half>(group, dim, count),
                check_gathered_values<Arch, Eigen::bfloat16>(group, dim, count);
        }
}

#if POLYATTN_HAS_BF16_SCORES
/// The bfloat16 scores policy's score pass (score_rows_bf16_dot: 32-element chunks, a masked tail,
/// R rows at a time) over bfloat16 keys: the same checks, its queries rounded first where it
/// takes the key (bf16_dot_key: 20, 72, 120, 384; 16, 32 and 64 keep the default pass). Its
/// products are exact and each lane adds 2 ceil(dim / 32) of them before sum_each's 4 levels,
/// inside dim u sum|q k| for every dim checked.
void check_bf16_scores_arch() {
  using Arch = polyattn::exec::cpu::avx512bf16_scores;
  for (const bool shared : {true, false})
    for (const int group : {1, 2, 3, 4, 5, 6, 8, 12})
      for (const int dim : {16, 20, 32, 64, 72, 120, 384})
        for (const int count : {1, 3, 17, kTile}) check_scores<Arch, Eigen::bfloat16>(group, dim, count, shared);
}
#endif

#if POLYATTN_HAS_INT8_SCORES
/// The int8 scores policy's score pass (score_rows_int8_dot: each head's query rounded to int8
/// codes, 64-code chunks by vpdpbusd, a masked tail, R rows at a time) over int8 key codes in
/// [-127, 127]: the same checks, against the exact sums of the rounded query's products where it
/// takes the key (int8_dot_key: 20, 72, 120, 384; its integer sums are exact, the step's product
/// rounds once; 16 and 64 keep the default pass).
void check_int8_scores_arch() {
  using Arch = polyattn::exec::cpu::avx512vnni_scores;
  for (const bool shared : {true, false})
    for (const int group : {1, 2, 3, 4, 5, 6, 8, 12})
      for (const int dim : {16, 20, 64, 72, 120, 384})
        for (const int count : {1, 3, 17, kTile}) check_scores<Arch, std::int8_t>(group, dim, count, shared);
}
#endif

/// The value pass over 16-bit and int8 rows (int8: the codes, as accumulate_int8_tile reads them
/// once the weights carry the scales) adds to each accumulator what the pass over the same values
/// stored as float adds, bit for bit: the same products in the same order for every element,
/// whatever lanes held them and however many column vectors a step took. bfloat16 rows are read
/// two vectors a load into other lanes (pair_loads); a lone head's 16-bit and int8 rows in blocks
/// of kLoneValueVectors column vectors (8 on AVX2), where float's take 4. Widths of an odd count of
/// vectors (a pair and one more), of a lone head's block and more, and with a scalar tail included.
template <class Arch, class T>
void check_narrow_values() {
  constexpr int W = int(xsimd::batch<float, Arch>::size);
  for (const int group : {1, 2, 5, 6, 7, 12})
    for (const int dim : {W, 2 * W, 3 * W, 4 * W, 5 * W + 3, 6 * W, 8 * W, 9 * W + 3, 384})
      for (const int count : {1, 17, kTile}) {
        std::mt19937 rng(std::uint32_t(group * 1000 + dim * 10 + count));
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::uniform_int_distribution<int> code(-127, 127);
        std::vector<T> rows(std::size_t(count) * dim);
        std::vector<float> as_float(rows.size());
        for (std::size_t i = 0; i < rows.size(); ++i) {
          if constexpr (std::is_same_v<T, std::int8_t>)
            rows[i] = T(code(rng));
          else
            rows[i] = T(u(rng));
          as_float[i] = float(rows[i]);
        }
        std::vector<float> p(std::size_t(group) * kTile);
        for (float& x : p) x = u(rng);
        std::vector<float> from_narrow(std::size_t(group) * dim), from_32;
        for (float& x : from_narrow) x = u(rng);
        from_32 = from_narrow;
        polyattn::exec::cpu::accumulate_tile<Arch>(p.data(), group, TileRows<T>{rows.data(), dim}, count, from_narrow.data(), dim);
        polyattn::exec::cpu::accumulate_tile<Arch>(p.data(), group, TileRows<float>{as_float.data(), dim}, count, from_32.data(), dim);
        INFO("group ", group, ", dim ", dim, ", rows ", count);
        CHECK(std::memcmp(from_narrow.data(), from_32.data(), from_narrow.size() * sizeof(float)) == 0);
      }
}

}  // namespace

TEST_CASE("the decode passes: each row's scores are the row's own, whatever rows share its block, and gathered rows count as strided ones") {
#if defined(__AVX2__) && defined(__FMA__)
  SUBCASE("AVX2") { check_arch<xsimd::fma3<xsimd::avx2>>(); }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
  SUBCASE("AVX-512") { check_arch<xsimd::avx512bw>(); }
#endif
#if POLYATTN_HAS_BF16_SCORES
  SUBCASE("AVX-512, bfloat16 scores") {
    if (polyattn::exec::cpu::cpu_runs_avx512bf16())
      check_bf16_scores_arch();
    else
      MESSAGE("this CPU has no AVX512-BF16: the bfloat16 scores policy is not run");
  }
#endif
#if POLYATTN_HAS_INT8_SCORES
  SUBCASE("AVX-512, int8 scores") {
    if (polyattn::exec::cpu::cpu_runs_avx512vnni())
      check_int8_scores_arch();
    else
      MESSAGE("this CPU has no AVX512-VNNI: the int8 scores policy is not run");
  }
#endif
}

TEST_CASE("the value pass over 16-bit and int8 rows (bfloat16 read two vectors a load) adds the bits of the same values in float") {
#if defined(__AVX2__) && defined(__FMA__)
  SUBCASE("AVX2") {
    using Avx2 = xsimd::fma3<xsimd::avx2>;
    check_narrow_values<Avx2, Eigen::bfloat16>(), check_narrow_values<Avx2, Eigen::half>(), check_narrow_values<Avx2, std::int8_t>();
  }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
  SUBCASE("AVX-512") { check_narrow_values<xsimd::avx512bw, Eigen::bfloat16>(), check_narrow_values<xsimd::avx512bw, std::int8_t>(); }
#endif
}

TEST_CASE("the next tile's paced asks reach every line of its rows within the tile's loads") {
  using NextTile = polyattn::exec::cpu::NextTile<>;
  alignas(64) static char keys[20 * 1536], values[20 * 1536];
  // Rows that follow one another (stride == bytes), key rows alone or with value rows, lines
  // per row of 1-24, a row from a line's start or not, one head's passes or six heads'.
  for (const int bytes : {64, 68, 130, 256, 1536})
    for (const int offset : {0, 4})
      for (const bool with_values : {false, true})
        for (const int loads : {4, 8, 48})
          for (const int heads : {1, 6}) {
            NextTile next;
            next.add({keys + offset, bytes, bytes}, with_values ? NextTile::Lines{values + offset, bytes, bytes} : NextTile::Lines{}, 10);
            next.pace(loads, heads);
            INFO("bytes ", bytes, ", offset ", offset, ", values ", with_values, ", loads per row ", loads, ", heads ", heads);
            REQUIRE(next.paced());
            // Every line a row's bytes touch is in the sequence, and nothing else.
            std::set<std::uintptr_t> lines, wanted;
            for (int k = 0; k < next.line_count; ++k) lines.insert(next.line(k));
            for (const char* base : {keys + offset, with_values ? values + offset : nullptr})
              for (int j = 0; base && j < next.count; ++j)
                for (int b = 0; b < bytes; ++b)
                  wanted.insert(reinterpret_cast<std::uintptr_t>(base + j * bytes + b) / 64 * 64);
            CHECK(lines == wanted);
            CHECK(int(lines.size()) == next.line_count);
            // The tile's loads: one tick each, over every head's passes.
            const int ticks = heads * next.count * loads;
            int left = polyattn::exec::cpu::asks_left(&next);
            for (int t = 0; t < ticks; ++t) polyattn::exec::cpu::tick_asks(&next, left);
            polyattn::exec::cpu::keep_asks_left(&next, left);
            if (ticks >= next.line_count)  // a line every `spacing` loads: all of them by the tile's end
              CHECK(next.asked == next.line_count);
            else  // more lines than loads: one a load, the rest at the tile's end
              CHECK(next.asked == ticks);
            next.ask_rest();
            CHECK(next.asked == next.line_count);
          }
  // Rows with gaps between them (a head's part of Nhd rows): not paced, asked row by row.
  NextTile apart;
  apart.add({keys, 256, 128}, {}, 10);
  apart.pace(8);
  CHECK_FALSE(apart.paced());
  apart.score_step(3);
  apart.ask_rest();
  CHECK(apart.asked == 0);
  NextTile whole;
  whole.add({keys, 1536, 1536}, {}, 10);
  whole.pace(0);  // unpaced: row j whole as row j is scored, no sequence
  CHECK_FALSE(whole.paced());
  CHECK(whole.line_count == 0);
  // One run at most (NextTile<1>, the contiguous layouts' tiles): a second run is left out, not
  // asked for in place of the first or beside it.
  NextTile one;
  one.add({keys, 256, 256}, {}, 10);
  one.add({values, 256, 256}, {}, 6);
  CHECK(one.run_count == 1);
  CHECK(one.count == 10);
  one.pace(8);
  REQUIRE(one.paced());
  CHECK(one.line_count == 10 * 256 / 64);
  for (int k = 0; k < one.line_count; ++k) CHECK(one.line(k) == reinterpret_cast<std::uintptr_t>(keys) + std::uintptr_t(k) * 64);
}

TEST_CASE("the next tile's paced asks over several runs (pages): every run's key lines, then every run's value lines") {
  using NextTile = polyattn::exec::cpu::NextTile<polyattn::exec::cpu::kTileRuns>;
  alignas(64) static char keys[8 * 4096], values[8 * 4096];
  for (const int bytes : {64, 130, 768})
    for (const int runs : {1, 2, 4, 8})
      for (const bool with_values : {false, true}) {
        INFO("bytes ", bytes, ", runs ", runs, ", values ", with_values);
        // Run r: 16 rows (the last one 5) at page r of the reverse order, 4 bytes into it.
        NextTile next;
        const auto page = [&](char* base, int r) { return base + (runs - 1 - r) * 4096 + 4; };
        const auto rows_of = [&](int r) { return r + 1 < runs ? 16 : 5; };
        for (int r = 0; r < runs; ++r) {
          const int rows = std::min(rows_of(r), 4096 / bytes - 1);
          next.add({page(keys, r), bytes, bytes}, with_values ? NextTile::Lines{page(values, r), bytes, bytes} : NextTile::Lines{}, rows);
        }
        next.pace(8);
        REQUIRE(next.paced());
        std::vector<std::uintptr_t> wanted;  // in order, each line once
        for (char* base : {keys, with_values ? values : nullptr})
          for (int r = 0; base && r < runs; ++r)
            for (int b = 0; b < next.runs[r].count * bytes; ++b) {
              const auto line = reinterpret_cast<std::uintptr_t>(page(base, r) + b) / 64 * 64;
              if (wanted.empty() || wanted.back() != line) wanted.push_back(line);
            }
        std::vector<std::uintptr_t> lines;
        for (int k = 0; k < next.line_count; ++k) lines.push_back(next.line(k));
        CHECK(lines == wanted);
        // ask_one walks the same sequence; the tile's ticks reach all of it.
        int left = polyattn::exec::cpu::asks_left(&next);
        const int ticks = next.count * 8;
        for (int t = 0; t < ticks; ++t) polyattn::exec::cpu::tick_asks(&next, left);
        CHECK(next.asked == std::min(ticks, next.line_count));  // more lines than loads: one a load
        next.ask_rest();
        CHECK(next.asked == next.line_count);
        // Unpaced, row j of the tile asks for row j of the next: every row of every run is reachable.
        next.pace(0);
        for (int j = 0; j < next.count + 3; ++j) next.score_step(j);
        CHECK(next.asked == 0);
      }
}

namespace {

/// A NextTile that asks for a line at every tick, from a sequence longer than any test's ticks:
/// `asked` counts the ticks.
polyattn::exec::cpu::NextTile<> tick_counter() {
  alignas(64) static char lines[1 << 22];
  polyattn::exec::cpu::NextTile<> counter;
  counter.add({lines, 64, 64}, {}, int(sizeof lines / 64));
  counter.pace(1);
  counter.spacing = counter.countdown = 1;
  return counter;
}

/// Each pass ticks its NextTile once per vector load of a row: score_loads_per_row and
/// value_loads_per_row, the counts NextTile::pace spreads the asks over (a vector of floats
/// counts as a load where bfloat16 rows are read two vectors a load).
template <class Arch, class T>
void check_ticks() {
  for (const int group : {1, 2, 6, 7, 12})
    for (const int dim : {16, 32, 64, 72, 384}) {
      std::vector<float> p(std::size_t(group) * kTile, 0.5f), acc(std::size_t(group) * dim);
      std::vector<T> rows(std::size_t(kTile) * group * dim, T(0.25f));
      std::vector<float> q(std::size_t(group) * dim, 1.0f), scores(std::size_t(group) * kTile);
      INFO("group ", group, ", dim ", dim, ", ", sizeof(T), "-byte elements");
      if constexpr (!std::is_same_v<T, std::int8_t>)  // (int8 rows have a value pass of their own: accumulate_int8_tile)
        for (const int n : {5, kTile}) {
          auto counter = tick_counter();
          polyattn::exec::cpu::accumulate_tile<Arch>(p.data(), group, TileRows<T>{rows.data(), dim}, n, acc.data(), dim, &counter);
          CHECK(counter.asked == n * polyattn::exec::cpu::value_loads_per_row<Arch>(group, dim));
        }
      for (const bool shared : {true, false}) {  // the score pass over a whole tile (blocks of W rows)
        auto counter = tick_counter();
        const KeyTile<T> tile{{rows.data(), shared ? dim : group * dim}, shared ? 0 : dim, dim, kTile, &counter};
        polyattn::exec::cpu::score_tile<Arch>(q.data(), group, tile, scores.data());
        INFO((shared ? "shared key" : "a slice per head"));
        CHECK(counter.asked == kTile * polyattn::exec::cpu::score_loads_per_row<Arch, T>(group, dim, shared));
      }
    }
}

}  // namespace

TEST_CASE("each pass ticks the next tile's asks once per vector load of a row") {
#if defined(__AVX2__) && defined(__FMA__)
  SUBCASE("AVX2") {
    check_ticks<xsimd::fma3<xsimd::avx2>, float>(), check_ticks<xsimd::fma3<xsimd::avx2>, Eigen::bfloat16>();
    check_ticks<xsimd::fma3<xsimd::avx2>, Eigen::half>();  // (a lone head's value pass in 8 column vectors: kLoneValueVectors)
  }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
  SUBCASE("AVX-512") { check_ticks<xsimd::avx512bw, float>(), check_ticks<xsimd::avx512bw, Eigen::bfloat16>(); }
#endif
#if POLYATTN_HAS_BF16_SCORES
  SUBCASE("AVX-512, bfloat16 scores") {  // its own score pass at dim 72 and 384 (bf16_dot_key)
    if (polyattn::exec::cpu::cpu_runs_avx512bf16()) check_ticks<polyattn::exec::cpu::avx512bf16_scores, Eigen::bfloat16>();
  }
#endif
#if POLYATTN_HAS_INT8_SCORES
  SUBCASE("AVX-512, int8 scores") {  // its own score pass at dim 72 and 384 (int8_dot_key)
    if (polyattn::exec::cpu::cpu_runs_avx512vnni()) check_ticks<polyattn::exec::cpu::avx512vnni_scores, std::int8_t>();
  }
#endif
}

namespace {

/// A Paged<16> store whose head blocks are each copied to a place of their own, heads in reverse
/// order on odd pages: a page's heads are then not at the same distances in every page, so a
/// tile's heads cannot share its row tables, and attend_chunk builds them for each head. It counts
/// the runs asked for past the sequence's end (`past_end`), which a kernel must not ask for (a
/// Paged<P> store has no page there).
template <class Store>
struct ScatteredHeads {
  using T = std::remove_cvref_t<decltype(*std::declval<const Store&>().row(0, 0, 0, 0))>;
  static constexpr bool heads_adjacent = false;
  static constexpr bool heads_paged = true;
  static constexpr int kPage = 16;

  const Store& store;
  int heads = 0, length = 0;
  std::vector<T> copies;
  mutable int past_end = 0;

  ScatteredHeads(const Store& s, int seq, int length) : store(s), heads(s.tensors()[0].heads), length(length) {
    copies.resize(std::size_t(2) * pages() * heads * block());
    for (int tensor = 0; tensor < 2; ++tensor)
      for (int page = 0; page < pages(); ++page)
        for (int h = 0; h < heads; ++h) {
          const CacheRun<T> run = store.run(tensor, seq, page * kPage, h);
          for (int j = 0; j < kPage && page * kPage + j < length; ++j)
            std::copy_n(run.data + j * run.stride, dim(), copies.data() + place(tensor, page, h) + j * dim());
        }
  }
  int dim() const { return store.tensors()[0].dim; }
  int pages() const { return (length + kPage - 1) / kPage; }
  std::ptrdiff_t block() const { return std::ptrdiff_t(kPage) * dim(); }
  /// Where head h's block of a page lies in `copies`: the heads in reverse order on odd pages.
  std::ptrdiff_t place(int tensor, int page, int h) const {
    const int slot = page % 2 ? heads - 1 - h : h;
    return ((std::ptrdiff_t(tensor) * pages() + page) * heads + slot) * block();
  }
  std::span<const TensorSpec> tensors() const { return store.tensors(); }
  const T* row(int tensor, int seq, int token, int head) const { return run(tensor, seq, token, head).data; }
  CacheRun<T> run(int tensor, int /*seq: the one copied*/, int token, int head) const {
    if (token >= length) return ++past_end, CacheRun<T>{copies.data(), dim(), 0};
    return {copies.data() + place(tensor, token / kPage, head) + std::ptrdiff_t(token % kPage) * dim(), dim(), kPage - token % kPage};
  }
};

/// attend_chunk over all of sequence `seq`: every head's accumulator, then its softmax states.
template <class Arch, class Store>
std::vector<float> attend_whole_sequence(const Store& store, const AttendSpec& spec, int seq, int length, const std::vector<float>& q) {
  std::vector<SoftmaxState<float>> states(std::size_t(spec.query_heads()));
  std::vector<float> acc(std::size_t(spec.query_heads()) * spec.value_dim);
  std::vector<float> scores(polyattn::exec::cpu::chunk_score_floats(spec.cache_heads, spec.group));
  const QueryJob job{seq, length, q.data(), nullptr};
  polyattn::exec::cpu::attend_chunk<Arch>(store, spec, job, 0, spec.cache_heads, 0, length, q.data(), {states.data(), acc.data()},
                                          scores.data());
  for (const auto& s : states) acc.push_back(s.max), acc.push_back(s.sum);
  return acc;
}

template <class Arch, class T>
void check_scattered_heads() {
  // MHA on Paged<16>, 6 heads of 64. int8 rows: tiles of 4 pages, and a tile's first head builds
  // the row tables the others share where the heads keep their distances. Float rows: the tiles'
  // passes go page by page, head after head, each asking for its block of the next tile.
  constexpr int kHeads = 6, kDim = 64;
  constexpr bool int8 = std::is_same_v<T, std::int8_t>;
  const RowScales scales = int8_row(kDim);
  const int stored = int8 ? scales.stored_elements() : kDim;
  const std::vector<TensorSpec> tensors{{kHeads, stored}, {kHeads, stored}};
  for (const int length : {37, 64, 70, 200}) {
    INFO("length ", length);
    CacheStore<Paged<16>, T> store(tensors, {.max_sequences = 1, .capacity = 256});
    const int seq = store.open();
    store.grow(seq, length);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> row(kDim);
    for (int tensor = 0; tensor < 2; ++tensor)
      for (int t = 0; t < length; ++t)
        for (int h = 0; h < kHeads; ++h) {
          for (float& x : row) x = uniform(rng);
          encode_row(store.row(tensor, seq, t, h), row.data(), kDim);
        }
    std::vector<float> q(std::size_t(kHeads) * kDim);
    for (float& x : q) x = uniform(rng);
    AttendSpec spec{.cache_heads = kHeads, .group = 1, .key_dim = kDim, .value_dim = kDim, .value_tensor = 1};
    if constexpr (int8) spec.key_scales = spec.value_scales = scales;
    const ScatteredHeads scattered(store, seq, length);
    // The same rows in the same order: the same bits, whichever tables the tiles read through.
    CHECK(attend_whole_sequence<Arch>(scattered, spec, seq, length, q) == attend_whole_sequence<Arch>(store, spec, seq, length, q));
    CHECK(scattered.past_end == 0);
  }
}

}  // namespace

TEST_CASE("pages whose heads lie at other distances in each page: the same bits, and nothing asked for past the end") {
#if defined(__AVX2__) && defined(__FMA__)
  SUBCASE("AVX2") {
    check_scattered_heads<xsimd::fma3<xsimd::avx2>, std::int8_t>();
    check_scattered_heads<xsimd::fma3<xsimd::avx2>, float>();
  }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
  SUBCASE("AVX-512") {
    check_scattered_heads<xsimd::avx512bw, std::int8_t>();
    check_scattered_heads<xsimd::avx512bw, float>();
  }
#endif
}
