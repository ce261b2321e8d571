// The decode tile's score pass (exec/cpu/decode_tile.hpp) scores R rows at a time for a group of
// heads, whether they share a key or each reads its own slice of the row (SlimK2). A row's scores
// must not depend on which rows share its block: each is checked bit for bit against the same
// row scored alone, and against a double dot product within the float bound dim * u * sum |q k|. Group sizes 1-12 (two head blocks past 8), widths with a
// scalar tail, tiles not a multiple of R; float and half keys; AVX2 and, where built, AVX-512.
// And the paced prefetch cursor (NextTile) reaches every line of the next tile within a tile's
// steps, whose count (value_steps_per_row) is the value pass's own, value rows, several heads'
// passes and score steps weighted as several value steps included.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
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

TEST_CASE("the next tile's paced asks reach every line within the tile's steps") {
  alignas(64) static char rows[10 * 2048];
  for (const int bytes : {130, 256, 1536})
    for (const int value_steps : {1, 6, 24})
      for (const int score_weight : {1, 6}) {  // a scored row as 1 or 6 value steps' work (score_steps_per_row)
        polyattn::exec::cpu::NextTile next{{rows, 2048, bytes}, {}, 10};
        next.pace(value_steps, 1, score_weight);
        INFO("bytes ", bytes, ", value steps per row ", value_steps, ", score weight ", score_weight);
        REQUIRE(next.per_step > 0);
        CHECK(next.score_lines == score_weight * next.per_step);
        const int per_row = (bytes + 63) / 64;
        int steps = 0;
        for (int j = 0; j < next.count; ++j) {  // as attend_chunk: a score step per row, then the value steps
          next.score_step(j), ++steps;
          if (j == 0)  // a score step asks for its weight's lines, or all there are
            CHECK(next.keys.row * per_row + next.keys.offset / 64 == std::min(next.score_lines, next.count * per_row));
        }
        while (next.keys.row < next.count && steps < next.count * (1 + value_steps)) next.value_step(), ++steps;
        CHECK(next.keys.row == next.count);
        CHECK(next.keys.offset == 0);
      }
  // Adjacent heads with value rows of their own (Nhd MHA/GQA): the key rows, then the value rows,
  // over the steps of every head's passes.
  alignas(64) static char values[10 * 2048];
  for (const int heads : {2, 6})
    for (const int value_steps : {1, 2}) {
      polyattn::exec::cpu::NextTile next{{rows, 2048, heads * 256}, {}, 10};
      next.values = {values, 2048, heads * 256 - 64};
      next.pace(value_steps, heads);
      INFO("heads ", heads, ", value steps per row ", value_steps);
      int steps = 0;
      for (int h = 0; h < heads; ++h)
        for (int j = 0; j < next.count; ++j) {
          next.score_step(j), ++steps;
          for (int v = 0; v < value_steps; ++v) next.value_step(), ++steps;
        }
      CHECK(steps == heads * next.count * (1 + value_steps));
      CHECK(next.keys.row == next.count);
      CHECK(next.values.row == next.count);
      CHECK(next.values.offset == 0);
    }
  polyattn::exec::cpu::NextTile whole{{rows, 2048, 1536}, {}, 10};
  whole.pace(0);  // unpaced: row j whole as row j is scored, no cursor
  CHECK(whole.per_step == 0);
  whole.score_step(3);
  whole.value_step();
  whole.ask_rest();
  CHECK(whole.keys.row == 0);
}

namespace {

/// accumulate_tile calls value_step value_steps_per_row times per row (the pacing's step count).
template <class Arch>
void check_value_steps() {
  alignas(64) static char lines[1 << 20];
  for (const int group : {1, 2, 6, 7, 12})
    for (const int dim : {64, 72, 384}) {
      const int n = 5;
      std::vector<float> p(std::size_t(group) * kTile, 0.5f), rows(std::size_t(n) * dim, 1.0f), acc(std::size_t(group) * dim);
      polyattn::exec::cpu::NextTile cursor{{lines, 64, 64}, {}, int(sizeof lines / 64)};  // a line per row: row = lines asked
      cursor.per_step = 1;
      polyattn::exec::cpu::accumulate_tile<Arch>(p.data(), group, rows.data(), dim, n, acc.data(), dim, &cursor);
      INFO("group ", group, ", dim ", dim);
      CHECK(cursor.keys.row == n * polyattn::exec::cpu::value_steps_per_row<Arch>(group, dim));
    }
}

}  // namespace

TEST_CASE("the value pass takes value_steps_per_row steps per row") {
#if defined(__AVX2__) && defined(__FMA__)
  SUBCASE("AVX2") { check_value_steps<xsimd::fma3<xsimd::avx2>>(); }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
  SUBCASE("AVX-512") { check_value_steps<xsimd::avx512bw>(); }
#endif
}
