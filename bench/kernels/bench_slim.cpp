// Slim attention and X-cache decode against MHA, in one run (compare as ratios):
//   BM_SelfDecode<V>: one decode step (one query per sequence over L cached tokens) for MHA,
//     SlimK option 2, SlimK option 1 and XCache, at Whisper tiny/base shapes (d = 384: 6 x 64;
//     d = 512: 8 x 64), L = 1500, 4096, 16384, batch 1, 16, 64. Option 1 derives V = K W_kv for
//     every cached token at every step (n e^2 multiply-adds per sequence): it is run only where
//     that stays under a second per step.
//   BM_CrossStep<Option>: Whisper cross-attention of every decoder layer for one generated token
//     at batch 64 over p = 1500 encoder tokens, per cache option; counters give the bytes the
//     seed's memory-read model counts (cache + cross W_k/W_v where the option reads them).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include <polyattn/convert/x_cache.hpp>
#include <polyattn/layers/cross_cache.hpp>
#include <polyattn/polyattn.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/decode_step.hpp"
#include "support/read_bandwidth.hpp"
#include "support/variant_inputs.hpp"

namespace {

using namespace polyattn;

MhaWeights random_weights(int d, std::mt19937& rng) {
  const float r = 1.f / std::sqrt(float(d));
  MhaWeights w;
  w.w_q = bench::uniform(d, d, rng, r);
  w.w_k = bench::uniform(d, d, rng, r);
  w.w_v = bench::uniform(d, d, rng, r);
  w.w_o = bench::uniform(d, d, rng, r);
  w.b_q = bench::uniform(1, d, rng, 0.1f);
  w.b_k = bench::uniform(1, d, rng, 0.1f);
  w.b_v = bench::uniform(1, d, rng, 0.1f);
  w.b_o = bench::uniform(1, d, rng, 0.1f);
  return w;
}

template <class V>
typename V::Params params_for(const MhaWeights& w, AttentionShape shape) {
  if constexpr (std::is_same_v<V, XCache>) return make_x_cache_params(w, shape);
  else if constexpr (std::is_same_v<V, Mha>) return {};
  else return {convert_to_slim_k(w).w_kv};
}

/// args: n_heads (head_dim 64, d = 64 n_heads), context length L, batch.
template <class V>
void BM_SelfDecode(benchmark::State& state) {
  const int heads = int(state.range(0)), length = int(state.range(1)), batch = int(state.range(2));
  const AttentionShape shape{heads, 64, heads * 64};
  const int d = shape.input_width();
  std::mt19937 rng(42);
  const MhaWeights w = random_weights(d, rng);
  using A = Attention<V, Nhd, exec::CpuSimd>;
  A attn(shape, {.max_sequences = batch, .capacity = length, .huge_pages = true}, params_for<V>(w, shape), 0);
  std::vector<int> seqs;
  for (int b = 0; b < batch; ++b) seqs.push_back(attn.open_sequence());

  // Cached rows: what each variant stores for x in [-1, 1]: K, V = x W_k, x W_v; K; or x.
  const RowMatrixXf x = bench::uniform(bench::kFillBlock, d, rng);
  const RowMatrixXf k = x * w.w_k, v = x * w.w_v;
  bench::fill_cache(attn, seqs, length, [&](A& a, int seq, int n) {
    if constexpr (std::is_same_v<V, Mha>) a.append(seq, {k.topRows(n), v.topRows(n)});
    else if constexpr (std::is_same_v<V, XCache>) a.append(seq, {x.topRows(n)});
    else a.append(seq, {k.topRows(n)});
  });

  const RowMatrixXf q = bench::uniform(batch, V::query_width(shape), rng);
  RowMatrixXf out(batch, V::output_width(shape));
  bench::time_attend_steps(state, attn, seqs, q, out);
}

void SelfShapes(benchmark::internal::Benchmark* b) {
  for (int heads : {6, 8})
    for (int length : {1500, 4096, 16384})
      for (int batch : {1, 16, 64}) b->Args({heads, length, batch});
  b->ArgNames({"heads", "L", "batch"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.1);
}

/// Option 1 costs batch * L * e^2 multiply-adds per step: keep it to the smaller cases.
void OptionOneShapes(benchmark::internal::Benchmark* b) {
  for (int heads : {6, 8})
    for (int length : {1500, 4096})
      for (int batch : {1, 16}) b->Args({heads, length, batch});
  b->ArgNames({"heads", "L", "batch"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.1);
}

/// args: n_heads (6: Whisper tiny, 4 layers; 8: base, 6 layers), batch.
template <class Option>
void BM_CrossStep(benchmark::State& state) {
  const int heads = int(state.range(0)), batch = int(state.range(1));
  const int n_layers = heads == 6 ? 4 : 6, p = 1500;
  const AttentionShape shape{heads, 64, heads * 64};
  const int d = shape.input_width();
  std::mt19937 rng(7);
  std::vector<MhaWeights> layers;
  for (int l = 0; l < n_layers; ++l) layers.push_back(random_weights(d, rng));
  CrossAttention<Option, Nhd, exec::CpuSimd> cross(shape, layers, {.max_sequences = batch, .capacity = p}, 0);
  std::vector<int> seqs;
  const RowMatrixXf e = bench::uniform(p, d, rng);
  for (int b = 0; b < batch; ++b) {
    seqs.push_back(cross.open_sequence());
    cross.set_encoder_output(seqs.back(), e);
  }
  const RowMatrixXf x = bench::uniform(batch, d, rng);
  RowMatrixXf y(batch, d);
  for (int l = 0; l < n_layers; ++l) cross.attend(l, seqs, x, y);  // the cross phase (first step), untimed
  bench::read_bandwidth();
  for (auto _ : state) {
    for (int l = 0; l < n_layers; ++l) cross.attend(l, seqs, x, y);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  // The seed's read model for the cross part of one step (fp32): the cache of every sequence,
  // re-read by each layer that reads it, plus the cross W_k / W_v (or W_kv) the option needs.
  const double cache = double(cross.cache_bytes(seqs[0])) * batch;
  const double dd = double(d) * d * sizeof(float);
  double bytes = cache;  // baseline, K-only: each layer reads its own cache once
  if constexpr (std::is_same_v<Option, cross::KOnly>) bytes += n_layers * dd;
  if constexpr (std::is_same_v<Option, cross::SharedE>) bytes = cache * n_layers + 2 * n_layers * dd;
  if constexpr (std::is_same_v<Option, cross::Hybrid>) bytes = cache * n_layers + (2 * n_layers - 1) * dd;
  state.counters["cache_MB_per_seq"] = double(cross.cache_bytes(seqs[0])) * 1e-6;
  state.counters["model_MB_per_step"] = bytes * 1e-6;
  state.counters["model_MB_if_on_chip"] = (std::is_same_v<Option, cross::SharedE> || std::is_same_v<Option, cross::Hybrid>)
                                              ? (cache + (bytes - cache * n_layers)) * 1e-6
                                              : bytes * 1e-6;
  state.counters["GB_per_s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["of_read_bw"] = benchmark::Counter(bytes / bench::read_bandwidth(), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(decltype(cross)::name());
}

void CrossShapes(benchmark::internal::Benchmark* b) {
  for (int heads : {6, 8}) b->Args({heads, 64});
  b->ArgNames({"heads", "batch"})->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
}


}  // namespace

using polyattn::bench::BM_ReadBandwidth;
BENCHMARK(BM_ReadBandwidth)->Iterations(1);
BENCHMARK(BM_SelfDecode<polyattn::Mha>)->Apply(SelfShapes);
BENCHMARK(BM_SelfDecode<polyattn::SlimK2>)->Apply(SelfShapes);
BENCHMARK(BM_SelfDecode<polyattn::XCache>)->Apply(SelfShapes);
BENCHMARK(BM_SelfDecode<polyattn::SlimK1>)->Apply(OptionOneShapes);
BENCHMARK(BM_CrossStep<polyattn::cross::Baseline>)->Apply(CrossShapes);
BENCHMARK(BM_CrossStep<polyattn::cross::KOnly>)->Apply(CrossShapes);
BENCHMARK(BM_CrossStep<polyattn::cross::SharedE>)->Apply(CrossShapes);
BENCHMARK(BM_CrossStep<polyattn::cross::Hybrid>)->Apply(CrossShapes);

BENCHMARK_MAIN();
