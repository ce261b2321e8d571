// Loading cache elements into fp32 registers: float as is, Eigen::half through F16C /
// AVX-512 (vcvtph2ps), Eigen::bfloat16 by widening to 32 bits and shifting left by 16 (a
// bfloat16 is the top half of a float; decode reads its rows two vectors a load instead, in pair
// order: load_vector_pair), int8 codes by sign extension to 32 bits and an exact
// integer-to-float conversion (the kernels apply the scales: kernels.hpp, int8_tile.hpp). The
// conversion happens right after the load; all arithmetic after it is fp32. Architectures without
// a conversion instruction go through a scalar conversion (slow, but correct). Scalar tails use
// element_value (core/row_codec.hpp's decode_element, or an int8 code's value), which these loads
// agree with.
#pragma once

#include <cstdint>
#include <type_traits>

#include <Eigen/Core>
#include <xsimd/xsimd.hpp>

#include "polyattn/core/row_codec.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace polyattn::exec::cpu {

/// One element as load_floats gives it: decode_element's value, or an int8 code's own value (its
/// row's scale is applied by the kernel, to the score or the weight).
template <class T>
inline float element_value(T x) {
  if constexpr (is_scaled_int8<T>)
    return float(x);
  else
    return decode_element(x);
}

/// batch<float, Arch>::size consecutive elements of `p` as floats.
template <class Arch, class T>
inline xsimd::batch<float, Arch> load_floats(const T* p) {
  using B = xsimd::batch<float, Arch>;
  if constexpr (std::is_same_v<T, float>) {
    return B::load_unaligned(p);
  } else if constexpr (std::is_same_v<T, std::int8_t>) {  // the codes, without their scale
    [[maybe_unused]] const void* raw = p;
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>)
      return B(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(raw)))));  // 16 x 8 bits
#endif
#if defined(__AVX2__)
    if constexpr (std::is_base_of_v<xsimd::avx2, Arch> && B::size == 8) {
      // Intrinsics, which GCC folds into one vpmovsxbd from memory. (An asm statement that loaded
      // and widened, tried for MHA's score pass, made GCC 12 store all 12 of the 6-head value
      // pass's sums to the stack after every row where it compiled that pass out of line, its
      // memory operand being a possible reader of them: in bench_decode_tile the int8 value pass
      // ran at 0.31 of one core's multiply-add peak, against 0.82 for half, on an AMD EPYC Zen 3.
      // Inlined into accumulate_int8_tile, as in the decode steps, the sums stayed in registers.)
      return B(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(raw)))));  // 8 x 8 bits
    }
#endif
    alignas(64) float converted[B::size];
    for (std::size_t i = 0; i < B::size; ++i) converted[i] = float(p[i]);
    return B::load_aligned(converted);
  } else {
    static_assert(std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>,
                  "polyattn: CpuSimd reads float, Eigen::half and Eigen::bfloat16 caches");
    [[maybe_unused]] const void* raw = p;
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
      const __m256i bits = _mm256_loadu_si256(static_cast<const __m256i*>(raw));  // 16 x 16 bits
      if constexpr (std::is_same_v<T, Eigen::half>)
        return B(_mm512_cvtph_ps(bits));
      else
        return B(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)));
    }
#endif
#if defined(__AVX2__) && defined(__F16C__)
    if constexpr (std::is_base_of_v<xsimd::avx2, Arch> && B::size == 8) {
      const __m128i bits = _mm_loadu_si128(static_cast<const __m128i*>(raw));  // 8 x 16 bits
      if constexpr (std::is_same_v<T, Eigen::half>)
        return B(_mm256_cvtph_ps(bits));
      else
        return B(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16)));
    }
#endif
    alignas(64) float converted[B::size];
    for (std::size_t i = 0; i < B::size; ++i) converted[i] = decode_element(p[i]);
    return B::load_aligned(converted);
  }
}

/// Whether the decode kernels read T two vectors at a time (load_vector_pair): bfloat16 on
/// AVX-512 and AVX2. A bfloat16 is the top half of a float, so the 32-bit lane that holds elements
/// 2i (its low half) and 2i + 1 (its high half) gives element 2i as lane << 16 and element 2i + 1
/// as lane & 0xffff0000: one instruction per vector of floats and one load per two, where
/// load_floats widens each vector's elements to 32 bits (a lane-crossing shuffle) and then shifts.
/// The pair's vectors then hold the even and the odd elements ("pair order"): a kernel that reads
/// rows so puts the vectors it multiplies them by in that order too (to_pair_order), and its
/// results back (to_element_order). Exact: the same products and sums, in other lanes.
/// Measured on an AMD EPYC Zen 4 (bench_decode_tile, one core, 4 alternated runs of each side):
/// with its tile near, MHA's value pass took 0.78x the time and its score pass 0.76x (half's,
/// the same code on both sides, 1.01x and 0.85x); MQA's, SlimK2's and XCache's passes, bound
/// there by their multiply-adds (one 512-bit FMA a cycle), 0.94-1.04x. Whole decode steps (L
/// 65536, batch 16, 2 threads, bench/ab) took 0.95-1.03x, the controls 0.98-1.00x: within that
/// VM's noise. Where the conversions share ports with the multiply-adds (Intel: vpmovzxwd on
/// port 5, vpslld on port 0), these passes issue half as many (2 per 32 elements, not 4) and
/// half the loads; unmeasured there yet. (XCache's score pass, score_rows, holds 4 rows' keys for
/// 6 heads in 29 of 32 registers, with no room for a second vector per row: it keeps load_floats.)
template <class Arch, class T>
constexpr bool pair_loads() {
  [[maybe_unused]] bool wide = false;  // whether Arch has the instructions below
#if defined(__AVX512F__)
  wide = wide || std::is_base_of_v<xsimd::avx512f, Arch>;
#endif
#if defined(__AVX2__)
  wide = wide || (std::is_base_of_v<xsimd::avx2, Arch> && xsimd::batch<float, Arch>::size == 8);
#endif
  return std::is_same_v<T, Eigen::bfloat16> && wide;
}

/// The 2W bfloat16 at p as two vectors of floats in pair order: even = p[0], p[2], ..., odd =
/// p[1], p[3], ... (pair_loads<Arch, T>() only).
template <class Arch, class T>
[[gnu::always_inline]] inline void load_vector_pair(const T* p, [[maybe_unused]] xsimd::batch<float, Arch>& even,
                                                    [[maybe_unused]] xsimd::batch<float, Arch>& odd) {
  static_assert(pair_loads<Arch, T>(), "polyattn: load_vector_pair reads bfloat16 on AVX-512 and AVX2");
  using B [[maybe_unused]] = xsimd::batch<float, Arch>;  // unused (and the arguments) where neither AVX2 nor AVX-512 is compiled for
  [[maybe_unused]] const void* raw = p;
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    const __m512i bits = _mm512_loadu_si512(raw);  // 32 x 16 bits
    even = B(_mm512_castsi512_ps(_mm512_slli_epi32(bits, 16)));
    odd = B(_mm512_castsi512_ps(_mm512_and_si512(bits, _mm512_set1_epi32(int(0xffff0000u)))));
    return;
  }
#endif
#if defined(__AVX2__)
  if constexpr (B::size == 8) {
    const __m256i bits = _mm256_loadu_si256(static_cast<const __m256i*>(raw));  // 16 x 16 bits
    even = B(_mm256_castsi256_ps(_mm256_slli_epi32(bits, 16)));
    odd = B(_mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(int(0xffff0000u)))));
  }
#endif
}

/// 2W consecutive floats (lo = x[0, W), hi = x[W, 2W)) into pair order: lo = x[0], x[2], ...,
/// hi = x[1], x[3], ... (pair_loads architectures only).
template <class Arch>
[[gnu::always_inline]] inline void to_pair_order([[maybe_unused]] xsimd::batch<float, Arch>& lo, [[maybe_unused]] xsimd::batch<float, Arch>& hi) {
  using B [[maybe_unused]] = xsimd::batch<float, Arch>;  // unused (and the arguments) where neither AVX2 nor AVX-512 is compiled for
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);  // >= 16: from hi
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 e = _mm512_permutex2var_ps(lo, even, hi), o = _mm512_permutex2var_ps(lo, odd, hi);
    lo = B(e), hi = B(o);
    return;
  }
#endif
#if defined(__AVX2__)
  if constexpr (B::size == 8) {
    // Per 128-bit lane, x[4k], x[4k + 2] of lo, then of hi; then the 64-bit quarters reordered.
    const __m256 e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)), o = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
    lo = B(_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))));
    hi = B(_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0))));
  }
#endif
}

/// The inverse of to_pair_order: even = x[0], x[2], ..., odd = x[1], x[3], ... into lo = x[0, W),
/// hi = x[W, 2W).
template <class Arch>
[[gnu::always_inline]] inline void to_element_order([[maybe_unused]] xsimd::batch<float, Arch>& even, [[maybe_unused]] xsimd::batch<float, Arch>& odd) {
  using B [[maybe_unused]] = xsimd::batch<float, Arch>;  // unused (and the arguments) where neither AVX2 nor AVX-512 is compiled for
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);  // >= 16: from odd
    const __m512i high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const __m512 lo = _mm512_permutex2var_ps(even, low, odd), hi = _mm512_permutex2var_ps(even, high, odd);
    even = B(lo), odd = B(hi);
    return;
  }
#endif
#if defined(__AVX2__)
  if constexpr (B::size == 8) {
    const __m256 u = _mm256_unpacklo_ps(even, odd), v = _mm256_unpackhi_ps(even, odd);  // x[0..3] | x[8..11], x[4..7] | x[12..15]
    even = B(_mm256_permute2f128_ps(u, v, 0x20));
    odd = B(_mm256_permute2f128_ps(u, v, 0x31));
  }
#endif
}

/// v[0, N) = the N vectors at p as the decode kernels hold a row's: each pair of vectors in pair
/// order where pair_loads<Arch, T>() (an odd last vector as it is), else load_floats' vectors.
template <class Arch, int N, class T>
[[gnu::always_inline]] inline void load_row_vectors(const T* p, xsimd::batch<float, Arch>* v) {
  constexpr int W = int(xsimd::batch<float, Arch>::size);
  if constexpr (pair_loads<Arch, T>()) {
    for (int i = 0; i + 1 < N; i += 2) load_vector_pair<Arch>(p + i * W, v[i], v[i + 1]);
    if constexpr (N % 2 == 1) v[N - 1] = load_floats<Arch>(p + (N - 1) * W);
  } else {
    for (int i = 0; i < N; ++i) v[i] = load_floats<Arch>(p + i * W);
  }
}

/// N vectors of floats (in element order) into the order load_row_vectors gives T's rows, and back.
template <class Arch, class T, int N>
[[gnu::always_inline]] inline void to_row_order(xsimd::batch<float, Arch>* v) {
  if constexpr (pair_loads<Arch, T>())
    for (int i = 0; i + 1 < N; i += 2) to_pair_order<Arch>(v[i], v[i + 1]);
}
template <class Arch, class T, int N>
[[gnu::always_inline]] inline void from_row_order(xsimd::batch<float, Arch>* v) {
  if constexpr (pair_loads<Arch, T>())
    for (int i = 0; i + 1 < N; i += 2) to_element_order<Arch>(v[i], v[i + 1]);
}

}  // namespace polyattn::exec::cpu
