// The Attention types of test_dispatch_cpu: KV-sharing variants x layouts on
// exec::DispatchCpuSimd<xsimd::avx512bw> (and two on the bfloat16 scores policy,
// DispatchCpuSimd<cpu::avx512bf16_scores>), whose AVX-512 kernels support/dispatch_kernels_avx512.cpp
// compiles (a translation unit built for x86-64-v4, in a shared library) and which every other
// file declares here. The test itself is built for x86-64-v3: one program, as a user would ship
// it, that runs the AVX-512 kernels where the CPU has them and the AVX2 ones elsewhere.
#pragma once

#include <string>

#include <polyattn/attention.hpp>
#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/exec/cpu/dispatch_cpu_simd.hpp>
#include <polyattn/variants/mha_gqa.hpp>

namespace polyattn::testing::dispatch {

using Executor = exec::DispatchCpuSimd<xsimd::avx512bw>;

/// The same executor kept on its fallback kernels (constructed with use_arch = false): the
/// (mask, store) pairs are those of Executor, so it needs no kernels of its own.
struct FallbackExecutor : Executor {
  explicit FallbackExecutor(Threads threads = {}) : Executor(std::move(threads), false) {}
  static std::string name() { return "cpu/dispatch refused"; }
};

// One Attention type per (key mask, cache store) pair the test gives the executor: the float
// stores of support/combos.hpp's layouts (every variant there shares them) and the
// two 16-bit caches.
using MhaNhd = Attention<Mha, Nhd, Executor, float>;
using MhaHnd = Attention<Mha, Hnd, Executor, float>;
using MhaPaged16 = Attention<Mha, Paged<16>, Executor, float>;
using MhaPaged7 = Attention<Mha, Paged<7>, Executor, float>;
using MhaHndHalf = Attention<Mha, Hnd, Executor, Eigen::half>;
using Gqa4NhdBf16 = Attention<Gqa<4>, Nhd, Executor, Eigen::bfloat16>;

/// The bfloat16 scores policy (exec/cpu/bf16_scores.hpp) named by a program built for x86-64-v3:
/// it runs where the CPU has AVX512-BF16, the AVX2 kernels elsewhere.
using PolicyExecutor = exec::DispatchCpuSimd<exec::cpu::avx512bf16_scores>;
using MhaHndBf16Scores = Attention<Mha, Hnd, PolicyExecutor, Eigen::bfloat16>;
using Gqa2Paged16Bf16Scores = Attention<Gqa<2>, Paged<16>, PolicyExecutor, Eigen::bfloat16>;

}  // namespace polyattn::testing::dispatch

// X(layer) for each type above: dispatch_kernels_avx512.cpp instantiates their kernels, every
// other file declares them.
#define POLYATTN_DISPATCH_TEST_LAYERS(X) X(MhaNhd) X(MhaHnd) X(MhaPaged16) X(MhaPaged7) X(MhaHndHalf) X(Gqa4NhdBf16)
/// The same for the policy's types, whose kernels are those of avx512bf16_scores.
#define POLYATTN_DISPATCH_POLICY_LAYERS(X) X(MhaHndBf16Scores) X(Gqa2Paged16Bf16Scores)

#define POLYATTN_DISPATCH_TEST_EXTERN(layer) POLYATTN_EXTERN_CPU_KERNELS(xsimd::avx512bw, polyattn::testing::dispatch::layer)
POLYATTN_DISPATCH_TEST_LAYERS(POLYATTN_DISPATCH_TEST_EXTERN)
#undef POLYATTN_DISPATCH_TEST_EXTERN
#define POLYATTN_DISPATCH_POLICY_EXTERN(layer) \
  POLYATTN_EXTERN_CPU_KERNELS(::polyattn::exec::cpu::avx512bf16_scores, polyattn::testing::dispatch::layer)
POLYATTN_DISPATCH_POLICY_LAYERS(POLYATTN_DISPATCH_POLICY_EXTERN)
#undef POLYATTN_DISPATCH_POLICY_EXTERN
