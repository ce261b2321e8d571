// The Attention types of test_dispatch_cpu: KV-sharing variants x layouts on
// exec::DispatchCpuSimd<xsimd::avx512bw>, whose AVX-512 kernels support/dispatch_kernels_avx512.cpp
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
  explicit FallbackExecutor(int threads = 0) : Executor(threads, false) {}
  static std::string name() { return "cpu/dispatch refused"; }
};

using MhaNhd = Attention<Mha, Nhd, Executor, float>;
using MhaHnd = Attention<Mha, Hnd, Executor, float>;
using MhaPaged = Attention<Mha, Paged<16>, Executor, float>;
using Gqa4Nhd = Attention<Gqa<4>, Nhd, Executor, float>;
using Gqa4Hnd = Attention<Gqa<4>, Hnd, Executor, float>;
using Gqa4Paged = Attention<Gqa<4>, Paged<7>, Executor, float>;
using MqaNhd = Attention<Mqa, Nhd, Executor, float>;
using MqaHnd = Attention<Mqa, Hnd, Executor, float>;
using MqaPaged = Attention<Mqa, Paged<16>, Executor, float>;
using MhaHndHalf = Attention<Mha, Hnd, Executor, Eigen::half>;
using Gqa4NhdBf16 = Attention<Gqa<4>, Nhd, Executor, Eigen::bfloat16>;

}  // namespace polyattn::testing::dispatch

// X(layer) for one type of each (key mask, cache store) pair above (the variants share them):
// dispatch_kernels_avx512.cpp instantiates their kernels, every other file declares them.
#define POLYATTN_DISPATCH_TEST_LAYERS(X) X(MhaNhd) X(MhaHnd) X(MhaPaged) X(Gqa4Paged) X(MhaHndHalf) X(Gqa4NhdBf16)

#define POLYATTN_DISPATCH_TEST_EXTERN(layer) POLYATTN_EXTERN_CPU_KERNELS(xsimd::avx512bw, polyattn::testing::dispatch::layer)
POLYATTN_DISPATCH_TEST_LAYERS(POLYATTN_DISPATCH_TEST_EXTERN)
#undef POLYATTN_DISPATCH_TEST_EXTERN
