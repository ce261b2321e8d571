// The decode step of bench_decode_variants in a program built for x86-64-v3 (no -march=native)
// on exec::DispatchCpuSimd<xsimd::avx512bw>: its AVX-512 kernels come from a shared library built
// for x86-64-v4 (decode_dispatch_avx512.cpp), its AVX2 kernels from this file. Each case runs on
// the kernels the CPU chose ("ran avx512bw" in the label) and refused ("...|refused", the AVX2
// kernels): compare with bench_decode_variants' native AVX-512 and AVX2 cases in the same hour.
#include <benchmark/benchmark.h>

#include <string>
#include <utility>

#include "support/decode_dispatch_layers.hpp"
#include "support/decode_variant_case.hpp"
#include "support/roofline.hpp"

namespace {

using polyattn::bench::BM_DecodeVariant;
using polyattn::bench::DecodeShapes;
using Chosen = polyattn::bench::DispatchExecutor;

/// The same executor held to its AVX2 kernels.
struct Refused : Chosen {
  explicit Refused(polyattn::Threads threads = {}) : Chosen(std::move(threads), false) {}
  static std::string name() { return Chosen::name() + "|refused"; }
};

}  // namespace

#define POLYATTN_DECODE_DISPATCH(V)                                                           \
  BENCHMARK(BM_DecodeVariant<V, polyattn::Hnd, float, Chosen>)->Apply(DecodeShapes);          \
  BENCHMARK(BM_DecodeVariant<V, polyattn::Hnd, float, Refused>)->Apply(DecodeShapes);

POLYATTN_DECODE_DISPATCH(polyattn::Mha)
POLYATTN_DECODE_DISPATCH(polyattn::Mqa)
POLYATTN_DECODE_DISPATCH(polyattn::SlimK2)
POLYATTN_DECODE_DISPATCH(polyattn::XCache)

int main(int argc, char** argv) { return polyattn::bench::run_roofline_benchmarks(argc, argv); }
