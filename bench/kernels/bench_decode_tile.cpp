// A decode tile's two passes on one thread, without the executor around them: score_tile and
// accumulate_tile (exec/cpu/decode_tile.hpp) over every tile of a buffer that stays in L1, in
// L2, or in DRAM, for the group shapes of bench_decode_variants (6 heads of 64, d = 384; GQA<2>'s
// tile is one key head and its 2 query heads). It says how far each pass is from one core's
// multiply-add peak when its rows are near, and what the next tile's asks (NextTile, as
// attend_chunk sets them) win when they are not. No time is asserted; compare the cases of one
// run.
//
//   bench_decode_tile --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// Cases: BM_DecodeTile<Shape, T>/resident_KiB:R/pass:P (R rounded down to whole tiles, one at
// least), P 0: score pass, 1: value pass, 2: both, with the asks for the next tile. T is float,
// half, bfloat16 or int8; int8 rows are codes and then a scale per segment, as the variants store
// them, and their passes apply the scales as attend_chunk does (scale_scores_by_segment on the
// scores, accumulate_int8_tile). Counters: ns_per_row; of_fma_peak, the shape's multiply-adds per
// row (score G x key_dim, value G x value_dim) over one thread's FMA probe; GB_per_s of rows read
// (key and value rows, with their scales; once where the values live in the key rows).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <benchmark/benchmark.h>

#include <polyattn/cache/zeroed_buffer.hpp>
#include <polyattn/exec/cpu/decode_tile.hpp>
#include <polyattn/exec/cpu/dispatch_cpu_simd.hpp>
#include <polyattn/exec/cpu/scratch_floats.hpp>

#include "support/roofline.hpp"

namespace {

using polyattn::exec::cpu::kTile;
using polyattn::exec::cpu::ScratchFloats;
using Arch = xsimd::default_arch;

/// A group of query heads and the cache rows it reads (attend_chunk's AttendSpec, in short).
struct TileShape {
  int group;               // query heads reading one row
  int key_dim;             // per head
  int group_stride;        // 0: the group shares the key; else head g's slice at g * group_stride (SlimK2)
  int row;                 // elements per cached row
  int value_dim;           // per head
  bool values_in_key_rows; // SlimK2, XCache: the value pass reads the key rows again
};

struct Mha {
  static constexpr TileShape shape{1, 64, 0, 64, 64, false};
};
struct Gqa2 {
  static constexpr TileShape shape{2, 64, 0, 64, 64, false};
};
struct Mqa {
  static constexpr TileShape shape{6, 64, 0, 64, 64, false};
};
struct SlimK2 {
  static constexpr TileShape shape{6, 64, 64, 384, 384, true};
};
struct XCache {
  static constexpr TileShape shape{6, 384, 0, 384, 384, true};
};

/// One core's multiply-adds per second (the FMA probe on 1 thread), measured once.
double one_core_fma_rate() {
  static const double rate = polyattn::bench::measure_fma_throughput(1);
  return rate;
}

/// The rows every case reads, written once (small values: no denormals, no infinities). int8
/// codes are 16..56: any 4 of them, read as a row's scale (which every row stride places
/// elsewhere in the shared buffer), are a normal float of 2^-95..2^-14, and so are the products
/// the passes form from them.
template <class T>
const polyattn::detail::ZeroedBuffer<T>& row_buffer(std::size_t elements) {
  static const auto buffer = [elements] {
    polyattn::detail::ZeroedBuffer<T> b(elements, /*huge_pages=*/true);
    for (std::size_t i = 0; i < b.size(); ++i)
      b.data()[i] = std::is_same_v<T, std::int8_t> ? T(16 + int(i % 41)) : T(float(int(i % 61) - 30) * 0.01f);
    return b;
  }();
  return buffer;
}

template <class Shape, class T, class TileArch = Arch>
void BM_DecodeTile(benchmark::State& state) {
  if constexpr (!std::is_same_v<TileArch, Arch>)
    if (!polyattn::exec::cpu::cpu_runs<TileArch>()) return state.SkipWithError("this CPU does not run these kernels");
  constexpr TileShape s = Shape::shape;
  const std::size_t resident = std::size_t(state.range(0)) * 1024;
  const int pass = int(state.range(1));
  // An int8 row's codes are followed by a scale per segment (core/row_scales.hpp), as the
  // variants store them: a segment is what one head reads (SlimK2's slice, else the whole row).
  constexpr bool int8 = std::is_same_v<T, std::int8_t>;
  constexpr polyattn::RowScales scales{int8 ? s.row : 0, s.group_stride ? s.group_stride : s.row};
  constexpr int stride = int8 ? scales.stored_elements() : s.row;  // elements from one row to the next
  const std::size_t row_bytes = std::size_t(stride) * sizeof(T) * (s.values_in_key_rows ? 1 : 2);
  const int tiles = int(std::max<std::size_t>(1, resident / (row_bytes * kTile)));
  // Key rows of tile t at t * kTile rows; value rows of their own after all key rows.
  const std::size_t key_elements = std::size_t(tiles) * kTile * std::size_t(stride);
  const auto& buffer = row_buffer<T>((std::size_t(1) << 30) / sizeof(T));  // 1 GiB, shared by every case of T
  const T* keys = buffer.data();
  const T* values = s.values_in_key_rows ? keys : keys + key_elements;
  // On a cache line, as attend_jobs holds them: from 16 bytes past a line XCache's score pass took
  // 1.1x as long in L2.
  const ScratchFloats queries(std::size_t(s.group) * std::size_t(s.key_dim), 0.01f);
  ScratchFloats scores(std::size_t(s.group) * kTile + 64, 0.0f), acc(std::size_t(s.group) * std::size_t(s.value_dim), 0.0f);
  ScratchFloats weights(std::size_t(s.group) * kTile, 0.0f);  // int8: the weights times the scales
  for (auto _ : state) {
    for (int t = 0; t < tiles; ++t) {
      const std::ptrdiff_t first = std::ptrdiff_t(t) * kTile * stride;
      polyattn::exec::cpu::NextTile<> next;
      if (pass == 2 && t + 1 < tiles) {  // the next tile's rows, asked for as attend_chunk asks (Hnd)
        const std::ptrdiff_t bytes = std::ptrdiff_t(stride) * std::ptrdiff_t(sizeof(T));
        const polyattn::exec::cpu::NextTile<>::Lines next_keys{reinterpret_cast<const char*>(keys + first + std::ptrdiff_t(kTile) * stride),
                                                             bytes, stride * int(sizeof(T))};
        polyattn::exec::cpu::NextTile<>::Lines next_values;
        if (!s.values_in_key_rows)
          next_values = {reinterpret_cast<const char*>(values + first + std::ptrdiff_t(kTile) * stride), bytes, stride * int(sizeof(T))};
        next.add(next_keys, next_values, kTile);
        next.pace(polyattn::exec::cpu::score_loads_per_row<TileArch, T>(s.group, s.key_dim, s.group_stride == 0) +
                  polyattn::exec::cpu::value_loads_per_row<TileArch>(s.group, s.value_dim));
      }
      polyattn::exec::cpu::NextTile<>* asks = next.count ? &next : nullptr;
      if (pass != 1) {
        const polyattn::exec::cpu::KeyTile<T> tile{{keys + first, stride}, s.group_stride, s.key_dim, kTile, asks};
        polyattn::exec::cpu::score_tile<TileArch>(queries.data(), s.group, tile, scores.data());
        if constexpr (int8)  // the scores times their segment's scales, as attend_chunk applies them
          polyattn::exec::cpu::scale_scores_by_segment<TileArch>(scores.data(), s.group, tile.rows, kTile, scales, 0, s.group_stride);
      }
      const polyattn::exec::cpu::TileRows<T> value_rows{values + first, stride};
      if constexpr (int8) {
        if (pass != 0)
          polyattn::exec::cpu::accumulate_int8_tile<TileArch>(scores.data(), s.group, value_rows, kTile, scales, weights.data(), acc.data(),
                                                          next.paced() ? asks : nullptr);
      } else if (pass != 0) {
        polyattn::exec::cpu::accumulate_tile<TileArch>(scores.data(), s.group, value_rows, kTile, acc.data(), s.value_dim,
                                                   next.paced() ? asks : nullptr);
      }
      next.ask_rest();
    }
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  const double rows = double(tiles) * kTile;
  const double macs = double(s.group) * ((pass != 1 ? s.key_dim : 0) + (pass != 0 ? s.value_dim : 0));
  const double bytes = double(stride) * double(sizeof(T)) * (s.values_in_key_rows ? 1.0 : double((pass != 1) + (pass != 0)));
  using benchmark::Counter;
  state.counters["ns_per_row"] = Counter(rows * 1e-9, Counter::kIsIterationInvariantRate | Counter::kInvert);
  state.counters["of_fma_peak"] = Counter(rows * macs / one_core_fma_rate(), Counter::kIsIterationInvariantRate);
  state.counters["GB_per_s"] = Counter(rows * bytes * 1e-9, Counter::kIsIterationInvariantRate);
}

/// {32 KiB (one tile at least: L1, or L2 for XCache's and SlimK2's 96 KiB of float rows), 1 MiB: L2,
/// 1 GiB: DRAM} x {score, value, both with asks}
void TileCases(benchmark::internal::Benchmark* b) {
  b->ArgNames({"resident_KiB", "pass"});
  for (const int kib : {32, 1024, 1 << 20})
    for (const int pass : {0, 1, 2}) b->Args({kib, pass});
  b->MinTime(0.2)->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(BM_DecodeTile<Mha, float>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<Mha, Eigen::half>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<Mha, Eigen::bfloat16>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<Gqa2, float>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<Gqa2, Eigen::half>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<Gqa2, Eigen::bfloat16>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<Mqa, float>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<Mqa, Eigen::half>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<Mqa, Eigen::bfloat16>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<SlimK2, float>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<SlimK2, Eigen::half>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<SlimK2, Eigen::bfloat16>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<XCache, float>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<XCache, Eigen::half>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<XCache, Eigen::bfloat16>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<Mha, std::int8_t>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<Gqa2, std::int8_t>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<Mqa, std::int8_t>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<SlimK2, std::int8_t>)->Apply(TileCases);
BENCHMARK(BM_DecodeTile<XCache, std::int8_t>)->Apply(TileCases);
#if POLYATTN_HAS_BF16_SCORES
// XCache's bfloat16 under the bfloat16 scores policy (exec/cpu/bf16_scores.hpp), whose score pass
// is its own (the other shapes' keys of 64 keep the default pass there).
using Bf16Scores = polyattn::exec::cpu::avx512bf16_scores;
BENCHMARK(BM_DecodeTile<XCache, Eigen::bfloat16, Bf16Scores>)->Apply(TileCases);
#endif

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("cpu_model", polyattn::bench::cpu_model_name());
  benchmark::AddCustomContext("one_core_fma_probe_GFMA_per_s", std::to_string(one_core_fma_rate() * 1e-9));
  benchmark::AddCustomContext("one_core_read_probe_GB_per_s",
                              std::to_string(polyattn::bench::measure_read_bandwidth(std::size_t(2) << 30, 1) * 1e-9));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
