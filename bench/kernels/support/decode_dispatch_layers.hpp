// bench_decode_dispatch's executor and the one (key mask, cache store) pair its cases give it
// (Hnd, float: every variant's cache there), whose AVX-512 kernels decode_dispatch_avx512.cpp
// compiles and every other file declares.
#pragma once

#include <polyattn/attention.hpp>
#include <polyattn/cache/contiguous.hpp>
#include <polyattn/exec/cpu/dispatch_cpu_simd.hpp>
#include <polyattn/variants/mha_gqa.hpp>

namespace polyattn::bench {

using DispatchExecutor = exec::DispatchCpuSimd<xsimd::avx512bw>;
using DispatchHndFloat = Attention<Mha, Hnd, DispatchExecutor, float>;

}  // namespace polyattn::bench

POLYATTN_EXTERN_CPU_KERNELS(xsimd::avx512bw, polyattn::bench::DispatchHndFloat)
