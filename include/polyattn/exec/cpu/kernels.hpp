// xsimd kernels for one (query row, cache head, token chunk) of the attend primitive.
// The architecture is xsimd's default for the flags the including translation unit is built
// with (AVX-512 with -march=native on the development machines); a scalar tail handles
// dimensions that are not a multiple of the SIMD width.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "polyattn/cache/layout_traits.hpp"
#include "polyattn/core/attend.hpp"
#include "polyattn/core/online_softmax.hpp"

namespace polyattn::exec::cpu {

using Batch = xsimd::batch<float>;
inline constexpr int kWidth = int(Batch::size);

/// sum_i a[i] * b[i]
inline float dot(const float* a, const float* b, int n) {
  int i = 0;
  Batch acc0(0.0f), acc1(0.0f);
  for (; i + 2 * kWidth <= n; i += 2 * kWidth) {
    acc0 = xsimd::fma(Batch::load_unaligned(a + i), Batch::load_unaligned(b + i), acc0);
    acc1 = xsimd::fma(Batch::load_unaligned(a + i + kWidth), Batch::load_unaligned(b + i + kWidth), acc1);
  }
  for (; i + kWidth <= n; i += kWidth) acc0 = xsimd::fma(Batch::load_unaligned(a + i), Batch::load_unaligned(b + i), acc0);
  float sum = xsimd::hadd(acc0 + acc1);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

/// acc[c] += sum_j p[j] * rows[j * stride + c] for c < dim: the accumulator stays in registers
/// across the n rows (a block of rows is small enough to stay in L1 between column passes).
inline void accumulate_rows(const float* p, const float* rows, std::ptrdiff_t stride, int n, float* acc, int dim) {
  int c = 0;
  for (; c + 4 * kWidth <= dim; c += 4 * kWidth) {
    Batch a0 = Batch::load_unaligned(acc + c), a1 = Batch::load_unaligned(acc + c + kWidth);
    Batch a2 = Batch::load_unaligned(acc + c + 2 * kWidth), a3 = Batch::load_unaligned(acc + c + 3 * kWidth);
    for (int j = 0; j < n; ++j) {
      const float* r = rows + std::ptrdiff_t(j) * stride + c;
      const Batch w(p[j]);
      a0 = xsimd::fma(w, Batch::load_unaligned(r), a0);
      a1 = xsimd::fma(w, Batch::load_unaligned(r + kWidth), a1);
      a2 = xsimd::fma(w, Batch::load_unaligned(r + 2 * kWidth), a2);
      a3 = xsimd::fma(w, Batch::load_unaligned(r + 3 * kWidth), a3);
    }
    a0.store_unaligned(acc + c), a1.store_unaligned(acc + c + kWidth);
    a2.store_unaligned(acc + c + 2 * kWidth), a3.store_unaligned(acc + c + 3 * kWidth);
  }
  for (; c + kWidth <= dim; c += kWidth) {
    Batch a = Batch::load_unaligned(acc + c);
    for (int j = 0; j < n; ++j) a = xsimd::fma(Batch(p[j]), Batch::load_unaligned(rows + std::ptrdiff_t(j) * stride + c), a);
    a.store_unaligned(acc + c);
  }
  for (; c < dim; ++c) {
    float a = acc[c];
    for (int j = 0; j < n; ++j) a += p[j] * rows[std::ptrdiff_t(j) * stride + c];
    acc[c] = a;
  }
}

/// y[i] *= alpha
inline void scale(float alpha, float* y, int n) {
  int i = 0;
  const Batch a(alpha);
  for (; i + kWidth <= n; i += kWidth) (a * Batch::load_unaligned(y + i)).store_unaligned(y + i);
  for (; i < n; ++i) y[i] *= alpha;
}

/// x[i] = exp(x[i] - m); returns the sum.
inline float exp_shifted_sum(float* x, int n, float m) {
  int i = 0;
  const Batch shift(m);
  Batch total(0.0f);
  for (; i + kWidth <= n; i += kWidth) {
    const Batch e = xsimd::exp(Batch::load_unaligned(x + i) - shift);
    e.store_unaligned(x + i);
    total += e;
  }
  float sum = xsimd::hadd(total);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  return sum;
}

/// Scratch of one chunk: per query head of the group, a softmax state and a value_dim accumulator.
struct ChunkResult {
  SoftmaxState<float>* states;  // [group]
  float* acc;                   // [group][value_dim]
};

/// Tokens scored before one softmax rescale: amortises the max, the exp and the rescale.
inline constexpr int kScoreBlock = 64;

/// Attends the `group` (pre-scaled) queries `q` [group][key_dim] of cache head `head` over tokens
/// [begin, end) of `seq`, writing unnormalised partial results into `result`.
/// `scores` is scratch of kScoreBlock * group floats.
template <class Store>
void attend_chunk(const Store& store, const AttendSpec& spec, int seq, int head, int begin, int end, const float* q,
                  ChunkResult result, float* scores) {
  const int G = spec.group;
  for (int g = 0; g < G; ++g) {
    result.states[g] = SoftmaxState<float>{};
    std::fill_n(result.acc + std::ptrdiff_t(g) * spec.value_dim, spec.value_dim, 0.0f);
  }
  int t = begin;
  while (t < end) {
    const CacheRun<float> keys = store.run(spec.key_tensor, seq, t, head);
    const CacheRun<float> values = store.run(spec.value_tensor, seq, t, head);
    const int n = std::min({end - t, keys.count, values.count, kScoreBlock});
    // scores[g][j] = q_g . k_j, keys read once for the whole group (the GQA saving)
    for (int j = 0; j < n; ++j) {
      const float* k = keys.data + std::ptrdiff_t(j) * keys.stride + spec.key_offset;
      for (int g = 0; g < G; ++g)
        scores[g * kScoreBlock + j] =
            bounded_score(dot(q + std::ptrdiff_t(g) * spec.key_dim, k + std::ptrdiff_t(g) * spec.key_group_stride, spec.key_dim));
    }
    for (int g = 0; g < G; ++g) {
      float* s = scores + g * kScoreBlock;
      const float block_max = *std::max_element(s, s + n);
      const float factor = result.states[g].raise_max(block_max);
      if (result.states[g].empty()) continue;  // every score so far -inf: this block adds nothing
      float* acc = result.acc + std::ptrdiff_t(g) * spec.value_dim;
      if (factor != 1.0f) scale(factor, acc, spec.value_dim);
      result.states[g].sum += exp_shifted_sum(s, n, result.states[g].max);
    }
    // acc_g += sum_j p_gj v_j; the value block is read from memory once for the whole group
    for (int g = 0; g < G; ++g)
      if (!result.states[g].empty())
        accumulate_rows(scores + g * kScoreBlock, values.data + spec.value_offset, values.stride, n,
                        result.acc + std::ptrdiff_t(g) * spec.value_dim, spec.value_dim);
    t += n;
  }
}

}  // namespace polyattn::exec::cpu
