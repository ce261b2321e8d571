// A named reduced-precision policy for the CPU executor: avx512bf16_scores, the AVX-512 kernels
// (xsimd::avx512bw) with one change, in decode's score pass over bfloat16 keys wider than 64
// elements or not a whole number of 16 (bf16_dot_key; at Whisper tiny's shapes XCache's shared
// rows of 384). Tested for every variant it can run: Mha, Gqa, Mqa, SlimK2, XCache, Mla and Mtla.
// There the query, already scaled, is rounded to bfloat16 (vcvtne2ps2bf16, as the pass packs it: the same rounding
// in every tile) and the dot products with the key rows are taken by AVX512-BF16's vdpbf16ps, 32
// products per instruction, straight from the cached bits (score_rows_bf16_dot in
// decode_tile.hpp). Everything else is the default kernels': fp32 products and sums, the value
// pass, the softmax, and the block kernel of prefill (runs of kMinBlockRows rows of one sequence,
// attend_block.hpp), which keeps the fp32 query: avx512bw's instances themselves (default_kernels
// in decode_tile.hpp).
//
// What it changes, and the bound the tests check (tests/test_bf16_scores.cpp):
//  - The query: q~ = bfloat16(q), |q~_i - q_i| <= 2^-8 |q_i| (round to nearest even, 8 significant
//    bits; bfloat16 has fp32's exponent range, so no overflow; an element under 2^-126 is
//    flushed to 0 by the conversion and by vdpbf16ps, an error under 2^-126 times the key's;
//    vdpbf16ps flushes subnormal key elements and partial sums too, errors under 2^-126 each).
//  - The products q~_i k_i of two bfloat16 are exact in fp32 (8 x 8 significant bits); vdpbf16ps
//    adds them into fp32 lanes, two a lane per instruction, rounding each sum: the same fp32
//    summation error as the default kernels, over a different order.
//  - So a score moves by at most 2^-8 sum_i |q_i k_i| <= 2^-8 |q|_2 |k|_2 beyond the fp32 error,
//    and the attended row (a convex combination of value rows) by at most
//    (exp(2 d) - 1) max_t |v_t| for a largest score error d.
// Default stays fp32: a program asks for this policy by name (CpuSimdBf16Scores, or
// DispatchCpuSimd<cpu::avx512bf16_scores>, which runs it where the CPU has AVX512-BF16: AMD Zen 4
// and later, Intel Cooper Lake and Sapphire Rapids and later).
//
// Why only the scores: there the query is one vector for the whole step, so one rounding halves
// the score pass's multiply-add instructions and drops its conversions. The value pass would have
// to round every weight and interleave two rows' elements per instruction. Measured on an AMD
// EPYC Zen 4 VM (2 threads, L 65536, batch 16, bench_decode_variants, 3 repetitions each; the
// decode log, bench/results/cpu_decode_variants/README.md): XCache's decode step took 0.77-0.85x
// the default's time on Hnd, Nhd and Paged<16>. Keys of 64 (MHA, GQA<2>, MQA, SlimK2's slices)
// took 0.92-1.29x, mostly over 1.1 (SlimK2 0.86-1.04x), before bf16_dot_key left them to the
// default pass.
//
// The kernels are compiled with a target attribute ("avx512bf16"), so any translation unit built
// for AVX-512 (x86-64-v4) holds them; they run only where cpu_runs_avx512bf16() says the CPU has
// the instructions (DispatchCpuSimd checks it; BasicCpuSimd<avx512bf16_scores> trusts the caller).
#pragma once

#include <cstdint>
#include <type_traits>

#include <Eigen/Core>
#include <xsimd/xsimd.hpp>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#endif

/// Whether this translation unit can hold the policy's kernels: AVX-512 BW and a host compiler
/// (nvcc's front end is not given the target attribute).
#if XSIMD_WITH_AVX512BW && defined(__GNUC__) && !defined(__CUDACC__)
#define POLYATTN_HAS_BF16_SCORES 1
#else
#define POLYATTN_HAS_BF16_SCORES 0
#endif

namespace polyattn::exec::cpu {

/// The AVX-512 kernels with decode's bfloat16 scores by vdpbf16ps (see above): an xsimd
/// architecture of its own, so that every kernel templated on the architecture takes it, and its
/// instances are apart from avx512bw's. Declared in every translation unit, as xsimd declares
/// avx512bw, so that a program built for x86-64-v3 can name it (DispatchCpuSimd<avx512bf16_scores>
/// with the kernels from a unit built for x86-64-v4); its vectors exist only where
/// POLYATTN_HAS_BF16_SCORES.
struct avx512bf16_scores : xsimd::avx512bw {
  static constexpr char const* name() noexcept { return "avx512bw+bf16_scores"; }
};

}  // namespace polyattn::exec::cpu

#if POLYATTN_HAS_BF16_SCORES
namespace xsimd::types {
template <class T>
struct get_bool_simd_register<T, ::polyattn::exec::cpu::avx512bf16_scores> {
  using type = simd_avx512_bool_register<T>;
};
XSIMD_DECLARE_SIMD_REGISTER_ALIAS(::polyattn::exec::cpu::avx512bf16_scores, avx512bw);
}  // namespace xsimd::types
#endif

namespace polyattn::exec::cpu {

/// Whether Arch's decode scores bfloat16 keys T by vdpbf16ps against a bfloat16 query.
template <class Arch, class T>
constexpr bool bf16_dot_scores() {
  return std::is_same_v<T, Eigen::bfloat16> && std::is_base_of_v<avx512bf16_scores, Arch>;
}

/// Whether the policy scores a key of `key_dim` elements (one head's: a shared key, or a head's
/// slice) by vdpbf16ps: every key but those of 1-4 whole vectors of 16, which the default pass
/// scores with its queries held in registers (score_slices), and which keep it, unrounded. The
/// bfloat16 pass loads its query chunks for every block of rows; at 64 elements (MHA, GQA<2>, MQA:
/// 6 heads of 64) it took 0.92-1.29x the default's time per decode step, 1.10 or more in 8 of 9
/// cases (Zen 4, L 65536, batch 16).
constexpr bool bf16_dot_key(int key_dim) { return !(key_dim % 16 == 0 && key_dim / 16 <= 4); }

/// x rounded to the nearest bfloat16 (ties to even), as a float: the query the policy scores with
/// (what the tests give exec::Reference to compare).
inline float round_to_bfloat16(float x) { return float(Eigen::bfloat16(x)); }

/// Whether the CPU has AVX512-BF16 (CPUID leaf 7, subleaf 1, EAX bit 5) and the AVX-512 state is
/// saved by the OS (the avx512f check, which GCC and clang make through XCR0 too).
inline bool cpu_runs_avx512bf16() {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return (eax >> 5 & 1u) != 0 && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

}  // namespace polyattn::exec::cpu
