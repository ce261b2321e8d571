// Every KV-sharing variant (Mha, Gqa<2>, Gqa<4>, Gqa<8>, Mqa) x layout on the CpuSimd executor
// (two threads; long sequences split into chunks across them) against an independent dense oracle
// (double, no cache), through the scenarios in support/equivalence_scenarios.hpp. On a build for
// AVX-512 the same again with the AVX2 kernels (BasicCpuSimd<fma3<avx2>>, exec/cpu/cpu_simd.hpp):
// what a CPU without AVX-512 runs, with its own vector width and register blocks.
#include <polyattn/exec/cpu/cpu_simd.hpp>

#include "support/combos.hpp"
#include "support/equivalence_scenarios.hpp"

TEST_CASE_TEMPLATE("cpu: the equivalence scenarios match the dense oracle", C, POLYATTN_EQUIVALENCE_COMBOS(polyattn::exec::CpuSimd)) {
  polyattn::testing::run_equivalence_scenarios<typename C::type>();
}

#if XSIMD_WITH_AVX512F && XSIMD_WITH_FMA3_AVX2
TEST_CASE_TEMPLATE("cpu, AVX2 kernels: the equivalence scenarios match the dense oracle", C,
                   POLYATTN_EQUIVALENCE_COMBOS(polyattn::exec::BasicCpuSimd<xsimd::fma3<xsimd::avx2>>)) {
  static_assert(!std::is_same_v<xsimd::default_arch, xsimd::fma3<xsimd::avx2>>);
  CHECK(C::type::executor_type::name() == "cpu/fma3+avx2");
  polyattn::testing::run_equivalence_scenarios<typename C::type>();
}
#endif
