// The tile kernels support/tile_kernels.hpp declares, compiled once for all the tests.
#include "support/tile_kernels.hpp"

#if XSIMD_WITH_AVX512BW
POLYATTN_CPU_TILE_KERNELS(xsimd::avx512bw)
#endif
#if XSIMD_WITH_FMA3_AVX2
POLYATTN_CPU_TILE_KERNELS(xsimd::fma3<xsimd::avx2>)
#endif
