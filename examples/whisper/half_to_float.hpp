// dst[0, n) = src[0, n) converted from float16 to float, by the CPU's conversion instruction
// (AVX-512F or F16C: 16 or 8 values per instruction) where the example is compiled for one
// (-march=native, POLYATTN_NATIVE), else by Eigen's cast. Exact either way: every float16 value
// is a float.
//
// Why not Eigen's cast: Eigen 3.4 converts Eigen::half one bit pattern at a time with integer
// operations, whatever the ISA. The float16 panels of WeightMatrix::project are converted at
// every decoding step; on the Xeon that conversion was most of project()'s time.
#pragma once

#include <Eigen/Core>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

namespace polyattn::whisper {

inline void half_to_float(const Eigen::half* src, Eigen::Index n, float* dst) {
  Eigen::Index i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

}  // namespace polyattn::whisper
