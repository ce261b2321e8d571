// bench_decode_dispatch's AVX-512 kernels: built for x86-64-v4 into a shared library that
// exports only them (cmake/cpu_kernels.map).
#include "support/decode_dispatch_layers.hpp"

POLYATTN_CPU_KERNELS(xsimd::avx512bw, polyattn::bench::DispatchHndFloat)
