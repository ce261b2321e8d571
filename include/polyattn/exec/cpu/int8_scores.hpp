// A named reduced-precision policy for the CPU executor: avx512vnni_scores, the AVX-512 kernels
// (xsimd::avx512bw) with one change, in decode's score pass over int8 keys wider than 64 elements
// or not a whole number of 16 (int8_dot_key; at Whisper tiny's shapes XCache's shared rows of
// 384; Mha, Gqa, Mqa and SlimK2 wherever their heads' keys have such widths). There each head's
// query, already scaled, is rounded to int8 codes with a step of its own (QueryCodes below; kept
// from tile to tile while the query is the same), and the dot products with the key codes are
// taken by AVX512-VNNI's vpdpbusd: 64 byte products per instruction, summed exactly into 16 int32
// lanes (score_rows_int8_dot in decode_tile.hpp). vpdpbusd multiplies unsigned by signed bytes, so the key codes are offset by
// 128 (an xor of their sign bits) and 128 times the sum of the query's codes is taken off once
// per head. Everything else is the default kernels': the key and value scales, the value pass, the
// softmax, and prefill's block kernel (which decodes int8 rows to fp32 and keeps the fp32 query):
// avx512bw's instances themselves (default_kernels in decode_tile.hpp).
//
// What it changes, and the bound the tests check (tests/test_int8_scores.cpp):
//  - The query of one head (the key_dim elements it dots with one key segment): a = max_i |q_i|,
//    sigma = a / 127, codes c_i = nearest integer to q_i (127 / a), ties to even; the policy
//    scores with q~ = sigma c. So |q~_i - q_i| <= sigma (1/2 + 2^-15): half a step, and 127 times
//    the three fp32 roundings of sigma, 127 / a and q_i (127 / a). Unlike bfloat16's, the error is relative to the head's
//    largest element, not to each element's own.
//  - The products c_i k_i and their sums are exact integers. The partial sums are converted to
//    fp32 and summed (sum_each); those stay exact while 127 * 255 * key_dim < 2^24 (key_dim up to
//    518: Whisper tiny's XCache rows are 384), and cost fp32 rounding beyond. Then one fp32
//    product by sigma, and the caller's by the key's scale.
//  - So a score moves by at most sigma (1/2 + 2^-15) sum_i |k_i| <= (a / 254) (1 + 2^-14)
//    sqrt(key_dim) |k|_2 beyond the fp32 error, and the attended row by at most (exp(2 d) - 1) max_t |v_t|
//    for a largest score error d.
// Default stays fp32: a program asks for this policy by name (CpuSimdInt8Scores, or
// DispatchCpuSimd<cpu::avx512vnni_scores>, which runs it where the CPU has AVX512-VNNI: Intel
// Cascade Lake and later, AMD Zen 4 and later).
//
// Why only the scores: there the query is one vector per head for the whole step, so one rounding
// turns the pass's conversions and multiply-adds (three instructions per 16 codes) into one
// vpdpbusd and one xor per 64. The value pass would have to round every softmax weight. Measured
// on an AMD EPYC Zen 4 VM (2 threads, L 65536, batch 16, bench_decode_variants, 5 repetitions;
// the decode log, bench/results/cpu_decode_variants/README.md): XCache int8's decode step took
// 0.82x the default's time on Hnd and 0.85x on Paged<16> (ratios of medians).
//
// The kernels are compiled with a target attribute ("avx512vnni"), so any translation unit built
// for AVX-512 (x86-64-v4) holds them; they run only where cpu_runs_avx512vnni() says the CPU has
// the instructions (DispatchCpuSimd checks it; BasicCpuSimd<avx512vnni_scores> trusts the caller).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

/// Whether this translation unit can hold the policy's kernels: AVX-512 BW and a host compiler
/// (nvcc's front end is not given the target attribute).
#if XSIMD_WITH_AVX512BW && defined(__GNUC__) && !defined(__CUDACC__)
#define POLYATTN_HAS_INT8_SCORES 1
#else
#define POLYATTN_HAS_INT8_SCORES 0
#endif

namespace polyattn::exec::cpu {

/// The AVX-512 kernels with decode's int8 scores by vpdpbusd (see above): an xsimd architecture
/// of its own, as avx512bf16_scores is (exec/cpu/bf16_scores.hpp), declared in every translation
/// unit; its vectors exist only where POLYATTN_HAS_INT8_SCORES.
struct avx512vnni_scores : xsimd::avx512bw {
  static constexpr char const* name() noexcept { return "avx512bw+vnni_scores"; }
};

}  // namespace polyattn::exec::cpu

#if POLYATTN_HAS_INT8_SCORES
namespace xsimd::types {
template <class T>
struct get_bool_simd_register<T, ::polyattn::exec::cpu::avx512vnni_scores> {
  using type = simd_avx512_bool_register<T>;
};
XSIMD_DECLARE_SIMD_REGISTER_ALIAS(::polyattn::exec::cpu::avx512vnni_scores, avx512bw);
}  // namespace xsimd::types
#endif

namespace polyattn::exec::cpu {

/// Whether Arch's decode scores int8 keys T by vpdpbusd against a query rounded to int8.
template <class Arch, class T>
constexpr bool int8_dot_scores() {
  return std::is_same_v<T, std::int8_t> && std::is_base_of_v<avx512vnni_scores, Arch>;
}

/// Whether the policy scores a key of `key_dim` elements (one head's: a shared key, or a head's
/// slice) by vpdpbusd: every key but those of 1-4 whole vectors of 16, which the default pass
/// scores with its queries held in registers (score_slices), and which keep it, unrounded, as the
/// bfloat16 policy's do (bf16_dot_key). Over a tile in L1 (one core, 3 alternated runs) the int8
/// pass took 0.65-1.27x the default's time at 64 elements (MHA, GQA's 3 heads and MQA's 6 on a
/// shared key, SlimK2's 6 slices), where the same code on both sides read 0.73-1.26x; at 384
/// (XCache) 0.49-0.71x, at 20 (6 slices) 0.46-0.68x. Wider keys only: no gain past the noise.
constexpr bool int8_dot_key(int key_dim) { return !(key_dim % 16 == 0 && key_dim / 16 <= 4); }

/// How the policy rounds one head's query (its key_dim elements): codes c_i = q_i * inverse to the
/// nearest integer (ties to even), |c_i| <= 127, and q~_i = step * c_i. From the largest |q_i|:
/// step = a / 127 and inverse = 127 / a, each one fp32 division; a = 0 gives codes of 0. (The
/// kernel computes these in vectors with the same operations: the tests round a query with them to
/// give exec::Reference what the policy scores with.)
struct QueryCodes {
  float step = 0, inverse = 0;
  static QueryCodes of(float largest) { return largest > 0 ? QueryCodes{largest / 127.0f, 127.0f / largest} : QueryCodes{largest, 0.0f}; }
  float code(float x) const { return std::nearbyint(x * inverse); }
  float rounded(float x) const { return step * code(x); }
};

/// Whether the CPU has AVX512-VNNI and the AVX-512 state is saved by the OS (GCC and clang check
/// XCR0 for the avx512 names).
inline bool cpu_runs_avx512vnni() {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

}  // namespace polyattn::exec::cpu
