// One decode step (one query per sequence over L cached tokens) of every variant that reduces
// to the attend primitive with a different group shape, on Attention<V, L, exec::CpuSimd, T>:
//   V in {Mha, Gqa<2>, Mqa, SlimK2, XCache} (6 heads of 64, d = 384: Whisper tiny),
//   L in {Hnd, Nhd, Paged<16>}, T in {float, half, bfloat16}, L = 1500..65536, batch 1, 16, 64,
// against two roofs measured in the same run (support/roofline.hpp): a 2 GiB streaming-read
// probe and an FMA-throughput probe, both on every core. A case whose cache would exceed 16 GiB
// is skipped. Compare variants as ratios within one run; no time is asserted. On an AVX-512 build
// the f32 Hnd cases also run on the AVX2 kernels (BM_DecodeVariant<..., BasicCpuSimd<fma3<avx2>>>,
// labelled .../cpu/fma3+avx2): what a CPU without AVX-512 runs, on the same memory.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <random>
#include <vector>

#include <polyattn/polyattn.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/roofline.hpp"
#include "support/variant_inputs.hpp"

namespace {

using namespace polyattn;

constexpr double kMaxCacheBytes = 16.0 * (1ull << 30);

/// args: context length L, batch.
template <class V, class Layout, class T, class Executor = exec::CpuSimd>
void BM_DecodeVariant(benchmark::State& state) {
  const AttentionShape shape{6, 64};
  const int length = int(state.range(0)), batch = int(state.range(1));
  using A = Attention<V, Layout, Executor, T>;
  if (double(A::cache_bytes_per_token(shape)) * length * batch > kMaxCacheBytes) {
    state.SkipWithError("cache over 16 GiB: skipped");
    return;
  }
  std::mt19937 rng(42);
  const bench::Inputs<V> inputs(shape, rng);
  A attn(shape, {.max_sequences = batch, .capacity = length}, bench::Inputs<V>::params(shape, rng), 0);
  std::vector<int> seqs;
  for (int b = 0; b < batch; ++b) seqs.push_back(attn.open_sequence());
  bench::fill_cache(attn, seqs, length, [&](A& a, int seq, int n) { a.append(seq, inputs.rows(n)); });

  const RowMatrixXf q = bench::uniform(batch, V::query_width(shape), rng);
  RowMatrixXf out(batch, V::output_width(shape));
  bench::read_bandwidth();  // both probes run before any timing
  bench::fma_throughput();
  for (auto _ : state) {
    attn.attend(seqs, q, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  // Bytes: the cache rows the step reads. Multiply-adds: every query head scores each token
  // (key_dim) and accumulates its value row (value_dim); the variants' query and output maps
  // (a few per step, not per token) are left out.
  const AttendSpec spec = V::attend_spec(shape, attn.params());
  double bytes = 0, macs = 0;
  for (int seq : seqs) {
    bytes += double(attn.cache_bytes_used(seq));
    macs += double(attn.length(seq)) * spec.query_heads() * (spec.key_dim + spec.value_dim);
  }
  state.counters["cache_B_per_token"] = double(A::cache_bytes_per_token(shape));
  bench::report_roofline(state, bytes, macs);
  state.SetLabel(A::name());
}

void DecodeShapes(benchmark::internal::Benchmark* b) {
  for (int length : {1500, 4096, 16384, 65536})
    for (int batch : {1, 16, 64}) b->Args({length, batch});
  b->ArgNames({"L", "batch"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
}

}  // namespace

#define POLYATTN_DECODE_VARIANT(V, L)                                                  \
  BENCHMARK(BM_DecodeVariant<V, L, float>)->Apply(DecodeShapes);                       \
  BENCHMARK(BM_DecodeVariant<V, L, Eigen::half>)->Apply(DecodeShapes);                 \
  BENCHMARK(BM_DecodeVariant<V, L, Eigen::bfloat16>)->Apply(DecodeShapes);
#define POLYATTN_DECODE_VARIANT_LAYOUTS(V)       \
  POLYATTN_DECODE_VARIANT(V, polyattn::Hnd)      \
  POLYATTN_DECODE_VARIANT(V, polyattn::Nhd)      \
  POLYATTN_DECODE_VARIANT(V, polyattn::Paged<16>)

POLYATTN_DECODE_VARIANT_LAYOUTS(polyattn::Mha)
POLYATTN_DECODE_VARIANT_LAYOUTS(polyattn::Gqa<2>)
POLYATTN_DECODE_VARIANT_LAYOUTS(polyattn::Mqa)
POLYATTN_DECODE_VARIANT_LAYOUTS(polyattn::SlimK2)
POLYATTN_DECODE_VARIANT_LAYOUTS(polyattn::XCache)

#if XSIMD_WITH_AVX512F && XSIMD_WITH_FMA3_AVX2
using Avx2Kernels = polyattn::exec::BasicCpuSimd<xsimd::fma3<xsimd::avx2>>;
BENCHMARK(BM_DecodeVariant<polyattn::Mha, polyattn::Hnd, float, Avx2Kernels>)->Apply(DecodeShapes);
BENCHMARK(BM_DecodeVariant<polyattn::Gqa<2>, polyattn::Hnd, float, Avx2Kernels>)->Apply(DecodeShapes);
BENCHMARK(BM_DecodeVariant<polyattn::Mqa, polyattn::Hnd, float, Avx2Kernels>)->Apply(DecodeShapes);
BENCHMARK(BM_DecodeVariant<polyattn::SlimK2, polyattn::Hnd, float, Avx2Kernels>)->Apply(DecodeShapes);
BENCHMARK(BM_DecodeVariant<polyattn::XCache, polyattn::Hnd, float, Avx2Kernels>)->Apply(DecodeShapes);
#endif

int main(int argc, char** argv) { return polyattn::bench::run_roofline_benchmarks(argc, argv); }
