// Decode attention per KV-sharing variant (MHA, GQA<2>, MQA) at Whisper tiny/base shapes,
// context lengths 448..16384 and batch 1..64, on the CpuSimd executor with every core, in the
// Nhd and Hnd layouts, plus Paged<16> at one shape. Compare variants as ratios within one run.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include <polyattn/polyattn.hpp>

#include "support/decode_step.hpp"
#include "support/read_bandwidth.hpp"

namespace {

using namespace polyattn;

/// args: n_heads (head_dim 64: 6 = Whisper tiny, 8 = base), context length, batch.
template <class Variant, class Layout>
void BM_Decode(benchmark::State& state) {
  const AttentionShape shape{int(state.range(0)), 64};
  const int length = int(state.range(1)), batch = int(state.range(2));
  using A = Attention<Variant, Layout, exec::CpuSimd>;
  A attn(shape, {.max_sequences = batch, .capacity = length, .huge_pages = true}, {}, 0);
  std::vector<int> seqs;
  for (int b = 0; b < batch; ++b) seqs.push_back(attn.open_sequence());

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const int kv_width = Variant::kv_heads(shape) * shape.head_dim;
  RowMatrixXf k = RowMatrixXf::NullaryExpr(bench::kFillBlock, kv_width, [&] { return dist(rng); });
  RowMatrixXf v = RowMatrixXf::NullaryExpr(bench::kFillBlock, kv_width, [&] { return dist(rng); });
  bench::fill_cache(attn, seqs, length, [&](A& a, int seq, int n) { a.append(seq, {k.topRows(n), v.topRows(n)}); });

  RowMatrixXf q = RowMatrixXf::NullaryExpr(batch, shape.query_width(), [&] { return dist(rng); });
  RowMatrixXf out(batch, shape.query_width());
  bench::time_attend_steps(state, attn, seqs, q, out);
}

void WhisperShapes(benchmark::internal::Benchmark* b) {
  for (int heads : {6, 8})
    for (int length : {448, 1500, 4096, 16384})
      for (int batch : {1, 16, 64}) b->Args({heads, length, batch});
  b->ArgNames({"heads", "L", "batch"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
}

void LayoutShape(benchmark::internal::Benchmark* b) {
  b->Args({6, 4096, 16})->ArgNames({"heads", "L", "batch"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
}


}  // namespace

using polyattn::bench::BM_ReadBandwidth;
BENCHMARK(BM_ReadBandwidth)->Iterations(1);
BENCHMARK(BM_Decode<polyattn::Mha, polyattn::Nhd>)->Apply(WhisperShapes);
BENCHMARK(BM_Decode<polyattn::Gqa<2>, polyattn::Nhd>)->Apply(WhisperShapes);
BENCHMARK(BM_Decode<polyattn::Mqa, polyattn::Nhd>)->Apply(WhisperShapes);
// Hnd streams each (sequence, head) contiguously: the decode-friendly layout.
BENCHMARK(BM_Decode<polyattn::Mha, polyattn::Hnd>)->Apply(WhisperShapes);
BENCHMARK(BM_Decode<polyattn::Gqa<2>, polyattn::Hnd>)->Apply(WhisperShapes);
BENCHMARK(BM_Decode<polyattn::Mqa, polyattn::Hnd>)->Apply(WhisperShapes);
BENCHMARK(BM_Decode<polyattn::Mha, polyattn::Paged<16>>)->Apply(LayoutShape);
BENCHMARK(BM_Decode<polyattn::Gqa<2>, polyattn::Paged<16>>)->Apply(LayoutShape);

BENCHMARK_MAIN();
