// CpuSimd's tile kernels for the architectures the tests run (the machine's, and AVX2 where the
// tests force it on an AVX-512 machine), declared here and compiled once in
// support/tile_kernels.cpp instead of in each test (exec/cpu/tile_instances.hpp). In the
// precompiled header, so that every test sees them before its first use.
#pragma once

#include <xsimd/xsimd.hpp>

#include <polyattn/exec/cpu/tile_instances.hpp>

#if XSIMD_WITH_AVX512BW
POLYATTN_EXTERN_CPU_TILE_KERNELS(xsimd::avx512bw)
#endif
#if XSIMD_WITH_FMA3_AVX2
POLYATTN_EXTERN_CPU_TILE_KERNELS(xsimd::fma3<xsimd::avx2>)
#endif
