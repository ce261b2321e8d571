// One decode step (one query per sequence over L cached tokens) of every variant that reduces
// to the attend primitive with a different group shape, on Attention<V, L, exec::CpuSimd, T>:
//   V in {Mha, Gqa<2>, Mqa, SlimK2, XCache} (6 heads of 64, d = 384: Whisper tiny),
//   L in {Hnd, Nhd, Paged<16>}, T in {float, half, bfloat16, int8 (codes + a float scale per
//   segment)}, L = 1500..65536, batch 1, 16, 64,
// against two roofs measured in the same run (support/roofline.hpp): a 2 GiB streaming-read
// probe and an FMA-throughput probe, both on every core. A case whose cache would exceed 16 GiB
// is skipped. Compare variants as ratios within one run; no time is asserted. On an AVX-512 build
// the f32 Hnd cases also run on the AVX2 kernels (BM_DecodeVariant<..., BasicCpuSimd<fma3<avx2>>>,
// labelled .../cpu/fma3+avx2): what a CPU without AVX-512 runs, on the same memory, XCache's
// bfloat16 cases under the bfloat16 scores policy and every variant's int8 cases under the int8
// scores policy (below).
#include <benchmark/benchmark.h>

#include <polyattn/exec/cpu/dispatch_cpu_simd.hpp>
#include <polyattn/polyattn.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/decode_variant_case.hpp"
#include "support/roofline.hpp"

namespace {

using polyattn::bench::BM_DecodeVariant;
using polyattn::bench::DecodeShapes;

}  // namespace

#define POLYATTN_DECODE_VARIANT(V, L)                                                  \
  BENCHMARK(BM_DecodeVariant<V, L, float>)->Apply(DecodeShapes);                       \
  BENCHMARK(BM_DecodeVariant<V, L, Eigen::half>)->Apply(DecodeShapes);                 \
  BENCHMARK(BM_DecodeVariant<V, L, Eigen::bfloat16>)->Apply(DecodeShapes);           \
  BENCHMARK(BM_DecodeVariant<V, L, std::int8_t>)->Apply(DecodeShapes);
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

#if POLYATTN_HAS_BF16_SCORES
// XCache's bfloat16 cases again under the named reduced-precision policy (exec/cpu/bf16_scores.hpp:
// decode's scores by vdpbf16ps against the query rounded to bfloat16), labelled
// .../cpu/avx512bw+bf16_scores|... ran <kernels>: where the CPU has no AVX512-BF16 the dispatch runs
// the default kernels and the label says so. Its multiply-adds are counted as the default's. The
// other variants' keys here are of 64 elements, which the policy leaves to the default pass.
using Bf16Scores = polyattn::exec::DispatchCpuSimd<polyattn::exec::cpu::avx512bf16_scores>;
BENCHMARK(BM_DecodeVariant<polyattn::XCache, polyattn::Hnd, Eigen::bfloat16, Bf16Scores>)->Apply(DecodeShapes);
BENCHMARK(BM_DecodeVariant<polyattn::XCache, polyattn::Nhd, Eigen::bfloat16, Bf16Scores>)->Apply(DecodeShapes);
BENCHMARK(BM_DecodeVariant<polyattn::XCache, polyattn::Paged<16>, Eigen::bfloat16, Bf16Scores>)->Apply(DecodeShapes);
#endif

#if POLYATTN_HAS_INT8_SCORES
// Every variant's int8 cases on Hnd and Paged<16> again under the int8 scores policy
// (exec/cpu/int8_scores.hpp: decode's scores by vpdpbusd against each head's query rounded to int8
// codes), labelled .../cpu/avx512bw+vnni_scores|... ran <kernels>, as above. Its multiply-adds are
// counted as the default's.
using Int8Scores = polyattn::exec::DispatchCpuSimd<polyattn::exec::cpu::avx512vnni_scores>;
#define POLYATTN_DECODE_INT8_SCORES(V)                                                                  \
  BENCHMARK(BM_DecodeVariant<V, polyattn::Hnd, std::int8_t, Int8Scores>)->Apply(DecodeShapes); \
  BENCHMARK(BM_DecodeVariant<V, polyattn::Paged<16>, std::int8_t, Int8Scores>)->Apply(DecodeShapes);
POLYATTN_DECODE_INT8_SCORES(polyattn::Mha)
POLYATTN_DECODE_INT8_SCORES(polyattn::Gqa<2>)
POLYATTN_DECODE_INT8_SCORES(polyattn::Mqa)
POLYATTN_DECODE_INT8_SCORES(polyattn::SlimK2)
POLYATTN_DECODE_INT8_SCORES(polyattn::XCache)
#endif

int main(int argc, char** argv) { return polyattn::bench::run_roofline_benchmarks(argc, argv); }
