// y (n, rows) = x (n, cols) W^T for a few rows of x (a decoding step's logits: one row per sequence),
// in one pass over W that converts each float16 row in registers as it is loaded (F16C or
// AVX-512) and accumulates in float.
//
// Decoding reads every weight once per token, so these products are bound by memory: the tied
// logits alone are 40 MB of float16 in tiny.en. Converting W into a float scratch panel first and
// then calling a GEMV wrote and re-read every element, and ran at 2.8-3.1 ms for the logits on 2
// threads of an AMD EPYC (Zen 4); streaming them row by row takes 1.3-1.6 ms with W cold in DRAM
// (25-31 GB/s, against a read probe's 29-31 in the same run).
//
// A float W takes the same loop with plain loads, so a float16 W and a float W of the same values
// give the same sums, bit for bit. The ISA is the one the example is compiled for (-march=native,
// POLYATTN_NATIVE); without AVX2 + F16C + FMA, or when cols is not a multiple of the vector width,
// stream_available() is false and the caller takes its panel product instead.
#pragma once

#include <Eigen/Core>

#include <algorithm>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__) && defined(__FMA__))
#include <immintrin.h>
#define POLYATTN_WHISPER_STREAM_PRODUCT 1
#endif

#include "matrix.hpp"

namespace polyattn::whisper {

/// Rows of x that one pass over W serves (accumulators: 2 chains x 4 rows of x); more rows
/// take ceil(n / 4) passes, up to kStreamMaxRows, beyond which a panel GEMM reads W less often
/// than it costs to convert.
inline constexpr Eigen::Index kStreamRowsPerPass = 4;
inline constexpr Eigen::Index kStreamMaxRows = 8;

namespace detail {

#if defined(__AVX512F__)
struct StreamLanes {
  using V = __m512;
  static constexpr int kWidth = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const Eigen::half* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static float sum(V a) { return _mm512_reduce_add_ps(a); }
};
#elif defined(POLYATTN_WHISPER_STREAM_PRODUCT)
struct StreamLanes {
  using V = __m256;
  static constexpr int kWidth = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load(const Eigen::half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static float sum(V a) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
  }
};
#endif

#ifdef POLYATTN_WHISPER_STREAM_PRODUCT
// y(i, r) = x(i, :) . w(r, :) for rows [first, last) of W and N rows of x; cols a multiple of
// kWidth. Each row of W is read front to back before the next: on a Zen 4 EPYC, interleaving the
// loads of 4 rows (768 B apart) held one thread to 7-9 GB/s from DRAM, reading one row at a time
// reaches 16-18 (the read probe's 20; tiny's logits on 2 threads 3.2 -> 1.3-1.6 ms). Two chains
// of partial sums, alternating by vector, keep two FMAs in flight; a tail vector goes to chain 0,
// and the chains are added before the horizontal sum. The order depends on cols alone, never on
// N, so a row of x gets the same sums whatever rows share its pass.
template <int N, class T>
inline void stream_rows(const float* x, Eigen::Index x_stride, const T* w, Eigen::Index cols, Eigen::Index first,
                        Eigen::Index last, float* y, Eigen::Index y_stride) {
  using L = StreamLanes;
  constexpr int kChains = 2;
  constexpr Eigen::Index kStep = kChains * L::kWidth;
  for (Eigen::Index r = first; r < last; ++r) {
    const T* row = w + r * cols;
    typename L::V acc[N][kChains];
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < kChains; ++j) acc[i][j] = L::zero();
    Eigen::Index c = 0;
    for (; c + kStep <= cols; c += kStep)
      for (int j = 0; j < kChains; ++j) {
        const typename L::V wv = L::load(row + c + j * L::kWidth);
        for (int i = 0; i < N; ++i) acc[i][j] = L::fma(wv, L::load(x + i * x_stride + c + j * L::kWidth), acc[i][j]);
      }
    for (; c < cols; c += L::kWidth) {
      const typename L::V wv = L::load(row + c);
      for (int i = 0; i < N; ++i) acc[i][0] = L::fma(wv, L::load(x + i * x_stride + c), acc[i][0]);
    }
    for (int i = 0; i < N; ++i) y[i * y_stride + r] = L::sum(L::add(acc[i][0], acc[i][1]));
  }
}
#endif

}  // namespace detail

/// Whether stream_project can take x (n, cols).
inline bool stream_available(Eigen::Index n, Eigen::Index cols) {
#ifdef POLYATTN_WHISPER_STREAM_PRODUCT
  return n >= 1 && n <= kStreamMaxRows && cols % detail::StreamLanes::kWidth == 0;
#else
  (void)n, (void)cols;
  return false;
#endif
}

/// y (n, rows) = x (n, cols) W^T, W (rows, cols) row-major float or Eigen::half; requires
/// stream_available(n, cols) and shapes checked by the caller. W's rows are split among
/// `threads` OpenMP threads in blocks of 64; each y value is one thread's sum, so the thread count
/// never changes a result.
template <class T>
inline void stream_project(ConstMatrixRef x, const T* w, Eigen::Index rows, Eigen::Index cols, MatrixRef y, int threads) {
#ifdef POLYATTN_WHISPER_STREAM_PRODUCT
  constexpr Eigen::Index kBlock = 64;
  const Eigen::Index blocks = (rows + kBlock - 1) / kBlock;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#else
  (void)threads;  // a build without OpenMP: one thread
#endif
  for (Eigen::Index b = 0; b < blocks; ++b) {
    const Eigen::Index first = b * kBlock, last = std::min(rows, first + kBlock);
    for (Eigen::Index i0 = 0; i0 < x.rows(); i0 += kStreamRowsPerPass) {
      const float* xi = x.data() + i0 * x.outerStride();
      float* yi = y.data() + i0 * y.outerStride();
      switch (std::min(kStreamRowsPerPass, x.rows() - i0)) {
        case 1: detail::stream_rows<1>(xi, x.outerStride(), w, cols, first, last, yi, y.outerStride()); break;
        case 2: detail::stream_rows<2>(xi, x.outerStride(), w, cols, first, last, yi, y.outerStride()); break;
        case 3: detail::stream_rows<3>(xi, x.outerStride(), w, cols, first, last, yi, y.outerStride()); break;
        default: detail::stream_rows<4>(xi, x.outerStride(), w, cols, first, last, yi, y.outerStride()); break;
      }
    }
  }
#else
  (void)x, (void)w, (void)rows, (void)cols, (void)y, (void)threads;
#endif
}

}  // namespace polyattn::whisper
