// Loading cache elements into fp32 registers: float as is, Eigen::half through F16C /
// AVX-512 (vcvtph2ps), Eigen::bfloat16 by widening to 32 bits and shifting left by 16 (a
// bfloat16 is the top half of a float), int8 codes by sign extension to 32 bits and an exact
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
    if constexpr (std::is_base_of_v<xsimd::avx2, Arch> && B::size == 8)
      return B(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(raw)))));  // 8 x 8 bits
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

}  // namespace polyattn::exec::cpu
