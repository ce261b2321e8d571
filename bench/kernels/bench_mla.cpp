// Cache bytes per token and decode-step time for the latent variants against MHA/GQA/MQA, in one
// run so ratios are comparable:
//   MTLA-paper shape (8 heads x 64, d_model 512): Mha, Gqa<2>, Mqa, Mla (r = 4 d_h = 256, RoPE
//   d_h / 2 = 32), Mtla with the same latent and s = 2, 3, 4;
//   Whisper-small shape (12 heads x 64, d_model 768): Mha and Whisper-MLA (latent 96 + 48 kept
//   key dims, i.e. 2 frequency pairs per head).
// L = 1500, 4096, 16384 cached tokens, batch 1, 16, 64; CpuSimd with every core. One step is
// `attend` over the whole cache (the per-token cache write is left out, as in bench_decode).
// Also MTLA's causal prefill of T fresh tokens (paper shape) both ways: through Attention, which
// runs it one token at a time so each query sees its slot as decode would, and as the parallel
// form (mtla_parallel.hpp), one uncached attention over a key per token under the stride mask.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include <polyattn/polyattn.hpp>

#include "support/decode_step.hpp"
#include "support/read_bandwidth.hpp"
#include "support/variant_inputs.hpp"

namespace {

using namespace polyattn;

using MlaPaper = Mla<256, 32, MlaKeyPart::decoupled_rope>;
using WhisperMla = Mla<96, 4, MlaKeyPart::preserved>;
template <int S>
using MtlaPaper = Mtla<256, S, 32>;

using bench::Inputs;
using bench::uniform;

/// args: n_heads (head_dim 64), cached tokens L, batch.
template <class Variant>
void BM_LatentDecode(benchmark::State& state) {
  const AttentionShape shape{int(state.range(0)), 64};
  const int length = int(state.range(1)), batch = int(state.range(2));
  using A = Attention<Variant, Nhd, exec::CpuSimd>;
  std::mt19937 rng(42);
  A attn(shape, {.max_sequences = batch, .capacity = A::cache_rows_for(length), .huge_pages = true}, Inputs<Variant>::params(shape, rng), 0);
  std::vector<int> seqs;
  for (int b = 0; b < batch; ++b) seqs.push_back(attn.open_sequence());
  const Inputs<Variant> block(shape, rng);
  bench::fill_cache(attn, seqs, length, [&](A& a, int seq, int n) { a.append(seq, block.rows(n)); });

  const RowMatrixXf q = uniform(batch, Variant::query_width(shape), rng);
  RowMatrixXf out(batch, Variant::output_width(shape));
  bench::time_attend_steps(state, attn, seqs, q, out);
  state.counters["cache_B_per_row"] = double(A::cache_bytes_per_row(shape));
}

/// args: T tokens, prefilled from position 0 (8 heads x 64, Mtla<256, S, 32>).
template <int S, bool Parallel>
void BM_MtlaPrefill(benchmark::State& state) {
  using V = MtlaPaper<S>;
  using A = Attention<V, Nhd, exec::CpuSimd>;
  const AttentionShape shape{8, 64};
  const int tokens = int(state.range(0));
  std::mt19937 rng(42);
  const auto params = Inputs<V>::params(shape, rng);
  const RowMatrixXf q = uniform(tokens, V::query_width(shape), rng), latent = uniform(tokens, V::rank, rng);
  const RowMatrixXf rope = uniform(tokens, V::rope_dim, rng);
  RowMatrixXf out(tokens, V::output_width(shape));
  exec::CpuSimd cpu;
  A attn(shape, {.max_sequences = 1, .capacity = A::cache_rows_for(tokens)}, params, 0);
  for (auto _ : state) {
    if constexpr (Parallel) {
      mtla_parallel_attention<V>(cpu, shape, params, q, {latent, rope}, out);
    } else {
      const int seq = attn.open_sequence();
      attn.prefill(seq, q, {latent, rope}, Mask::causal, out);
      attn.close_sequence(seq);
    }
    benchmark::DoNotOptimize(out.data());
  }
}
void PrefillLengths(benchmark::internal::Benchmark* b) {
  b->Arg(448)->Arg(1500)->ArgName("T")->UseRealTime()->Unit(benchmark::kMillisecond);
}

void Shapes(benchmark::internal::Benchmark* b, int heads) {
  for (int length : {1500, 4096, 16384})
    for (int batch : {1, 16, 64}) b->Args({heads, length, batch});
  b->ArgNames({"heads", "L", "batch"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.1);
}
void PaperShape(benchmark::internal::Benchmark* b) { Shapes(b, 8); }
void WhisperSmallShape(benchmark::internal::Benchmark* b) { Shapes(b, 12); }


}  // namespace

using polyattn::bench::BM_ReadBandwidth;
BENCHMARK(BM_ReadBandwidth)->Iterations(1);
BENCHMARK(BM_LatentDecode<polyattn::Mha>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<polyattn::Gqa<2>>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<polyattn::Mqa>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<MlaPaper>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<MtlaPaper<2>>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<MtlaPaper<3>>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<MtlaPaper<4>>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<polyattn::Mha>)->Apply(WhisperSmallShape);
BENCHMARK(BM_LatentDecode<WhisperMla>)->Apply(WhisperSmallShape);
BENCHMARK(BM_MtlaPrefill<2, false>)->Apply(PrefillLengths);
BENCHMARK(BM_MtlaPrefill<2, true>)->Apply(PrefillLengths);
BENCHMARK(BM_MtlaPrefill<4, false>)->Apply(PrefillLengths);
BENCHMARK(BM_MtlaPrefill<4, true>)->Apply(PrefillLengths);

BENCHMARK_MAIN();
