// The decode tile's score pass (exec/cpu/decode_tile.hpp) scores R rows at a time for a group of
// heads, whether they share a key or each reads its own slice of the row (SlimK2). A row's scores
// must not depend on which rows share its block: each is checked bit for bit against the same
// row scored alone, and against a double dot product within the float bound dim * u * sum |q k|. Group sizes 1-12 (two head blocks past 8), widths with a
// scalar tail, tiles not a multiple of R; float and half keys; AVX2 and, where built, AVX-512.
// And the next tile's paced asks (NextTile) cover every line of its rows and reach all of them
// within a tile's vector loads, whose counts per row (score_loads_per_row, value_loads_per_row)
// are the passes' own.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include <Eigen/Core>
#include <xsimd/xsimd.hpp>

#include <polyattn/exec/cpu/decode_tile.hpp>

namespace {

using polyattn::exec::cpu::KeyTile;
using polyattn::exec::cpu::kTile;

template <class Arch, class T>
void check_scores(int group, int dim, int count, bool shared) {
  std::mt19937 rng(std::uint32_t(group * 1000 + dim * 10 + count));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int width = shared ? dim : group * dim;  // SlimK2-like rows hold one slice per head
  std::vector<T> rows(std::size_t(count) * width);
  for (T& x : rows) x = T(u(rng));
  std::vector<float> q(std::size_t(group) * dim);
  for (float& x : q) x = u(rng);
  const std::ptrdiff_t group_stride = shared ? 0 : dim;
  std::vector<float> scores(std::size_t(group) * kTile + 64), alone(std::size_t(group) * kTile + 64);
  polyattn::exec::cpu::score_tile<Arch>(q.data(), group, KeyTile<T>{rows.data(), width, group_stride, dim, count}, scores.data());
  int differing = 0, outside = 0;
  for (int j = 0; j < count; ++j) {
    const T* row = rows.data() + std::ptrdiff_t(j) * width;
    polyattn::exec::cpu::score_tile<Arch>(q.data(), group, KeyTile<T>{row, width, group_stride, dim, 1}, alone.data());
    for (int g = 0; g < group; ++g) {
      const float ours = scores[std::size_t(g) * kTile + j];
      differing += std::memcmp(&ours, &alone[std::size_t(g) * kTile], sizeof(float)) != 0;
      double exact = 0, magnitude = 0;
      for (int c = 0; c < dim; ++c) {
        const double p = double(q[std::size_t(g) * dim + c]) * double(float(row[g * group_stride + c]));
        exact += p;
        magnitude += std::abs(p);
      }
      outside += std::abs(double(ours) - exact) > dim * 0x1p-24 * magnitude;
    }
  }
  INFO("group ", group, ", dim ", dim, ", rows ", count, shared ? ", shared key" : ", a slice per head");
  CHECK(differing == 0);
  CHECK(outside == 0);
}

template <class Arch>
void check_arch() {
  for (const bool shared : {true, false})
    for (const int group : {1, 2, 3, 4, 5, 6, 8, 12})
      for (const int dim : {16, 32, 64, 72, 384})  // slices of 1-4 whole vectors in registers (score_slices), wider, a tail
        for (const int count : {1, 3, 17, kTile}) {
          check_scores<Arch, float>(group, dim, count, shared);
          check_scores<Arch, Eigen::half>(group, dim, count, shared);
        }
}

}  // namespace

TEST_CASE("the decode score pass: each row's scores are the row's own, whatever rows share its block") {
#if defined(__AVX2__) && defined(__FMA__)
  SUBCASE("AVX2") { check_arch<xsimd::fma3<xsimd::avx2>>(); }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
  SUBCASE("AVX-512") { check_arch<xsimd::avx512bw>(); }
#endif
}

TEST_CASE("the next tile's paced asks reach every line of its rows within the tile's loads") {
  using polyattn::exec::cpu::NextTile;
  alignas(64) static char keys[20 * 1536], values[20 * 1536];
  // Rows that follow one another (stride == bytes), key rows alone or with value rows, lines
  // per row of 1-24, a row from a line's start or not, one head's passes or six heads'.
  for (const int bytes : {64, 68, 130, 256, 1536})
    for (const int offset : {0, 4})
      for (const bool with_values : {false, true})
        for (const int loads : {4, 8, 48})
          for (const int heads : {1, 6}) {
            NextTile next{{keys + offset, bytes, bytes}, {}, 10};
            if (with_values) next.values = {values + offset, bytes, bytes};
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
  NextTile apart{{keys, 256, 128}, {}, 10};
  apart.pace(8);
  CHECK_FALSE(apart.paced());
  apart.score_step(3);
  apart.ask_rest();
  CHECK(apart.asked == 0);
  NextTile whole{{keys, 1536, 1536}, {}, 10};
  whole.pace(0);  // unpaced: row j whole as row j is scored, no sequence
  CHECK_FALSE(whole.paced());
  CHECK(whole.line_count == 0);
}

namespace {

/// A NextTile that asks for a line at every tick, from a sequence longer than any test's ticks:
/// `asked` counts the ticks.
polyattn::exec::cpu::NextTile tick_counter() {
  alignas(64) static char lines[1 << 22];
  polyattn::exec::cpu::NextTile counter;
  counter.count = 1;
  counter.spacing = counter.countdown = 1;
  counter.key_lines = counter.value_lines = reinterpret_cast<std::uintptr_t>(lines);
  counter.key_line_count = counter.line_count = int(sizeof lines / 64);
  return counter;
}

/// Each pass ticks its NextTile once per vector load of a row: score_loads_per_row and
/// value_loads_per_row, the counts NextTile::pace spreads the asks over.
template <class Arch>
void check_ticks() {
  for (const int group : {1, 2, 6, 7, 12})
    for (const int dim : {16, 32, 64, 72, 384}) {
      std::vector<float> p(std::size_t(group) * kTile, 0.5f), acc(std::size_t(group) * dim);
      std::vector<float> rows(std::size_t(kTile) * group * dim, 0.25f), q(std::size_t(group) * dim, 1.0f), scores(std::size_t(group) * kTile);
      INFO("group ", group, ", dim ", dim);
      for (const int n : {5, kTile}) {
        auto counter = tick_counter();
        polyattn::exec::cpu::accumulate_tile<Arch>(p.data(), group, rows.data(), dim, n, acc.data(), dim, &counter);
        CHECK(counter.asked == n * polyattn::exec::cpu::value_loads_per_row<Arch>(group, dim));
      }
      for (const bool shared : {true, false}) {  // the score pass over a whole tile (blocks of W rows)
        auto counter = tick_counter();
        const KeyTile<float> tile{rows.data(), shared ? dim : group * dim, shared ? 0 : dim, dim, kTile, &counter};
        polyattn::exec::cpu::score_tile<Arch>(q.data(), group, tile, scores.data());
        INFO((shared ? "shared key" : "a slice per head"));
        CHECK(counter.asked == kTile * polyattn::exec::cpu::score_loads_per_row<Arch>(group, dim, shared));
      }
    }
}

}  // namespace

TEST_CASE("each pass ticks the next tile's asks once per vector load of a row") {
#if defined(__AVX2__) && defined(__FMA__)
  SUBCASE("AVX2") { check_ticks<xsimd::fma3<xsimd::avx2>>(); }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
  SUBCASE("AVX-512") { check_ticks<xsimd::avx512bw>(); }
#endif
}
