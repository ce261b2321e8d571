// The AVX-512 kernels of test_dispatch_cpu's Attention types (support/dispatch_layers.hpp):
// compiled for x86-64-v4 into a shared library that exports only them (cmake/cpu_kernels.map).
#include "support/dispatch_layers.hpp"

#if !XSIMD_WITH_AVX512BW
#error "dispatch_kernels_avx512.cpp is built for AVX-512 (-march=x86-64-v4): tests/CMakeLists.txt"
#endif

#define POLYATTN_DISPATCH_TEST_KERNELS(layer) POLYATTN_CPU_KERNELS(xsimd::avx512bw, polyattn::testing::dispatch::layer)
POLYATTN_DISPATCH_TEST_LAYERS(POLYATTN_DISPATCH_TEST_KERNELS)
#define POLYATTN_DISPATCH_POLICY_KERNELS(layer) \
  POLYATTN_CPU_KERNELS(::polyattn::exec::cpu::avx512bf16_scores, polyattn::testing::dispatch::layer)
POLYATTN_DISPATCH_POLICY_LAYERS(POLYATTN_DISPATCH_POLICY_KERNELS)
