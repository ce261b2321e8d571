// The golden model: the attend primitive written as plainly as possible, accumulating in
// double. Every other executor is tested against it; it is not meant to be fast. Two passes per
// query head (scores and their max, then weights); the limits (-inf, overflow) as core/attend.hpp.
// A key mask (core/key_mask.hpp) gives each row its tokens: a dropped token counts as a score of
// -inf.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/key_mask.hpp"
#include "polyattn/core/online_softmax.hpp"
#include "polyattn/core/row_codec.hpp"
#include "polyattn/core/threads.hpp"

namespace polyattn::exec {

// The two loops over a cached row, apart so that a program can compile them once, optimised, for
// the five element types (`extern template`, as tests/support/reference_rows.hpp does): the
// tests' own code is compiled at -O0 under AddressSanitizer, where these loops were most of
// their time. The arithmetic is the same wherever they are compiled.

/// q[0, n) . row[first, first + n), in double.
template <CacheElement T>
inline double reference_dot(const float* q, const T* row, int first, int n, RowScales scales) {
  double dot = 0;
  for (int i = 0; i < n; ++i) dot += double(q[i]) * double(decode_at(row, first + i, scales));
  return dot;
}

/// acc[0, n) += p * row[first, first + n).
template <CacheElement T>
inline void reference_accumulate(double* acc, double p, const T* row, int first, int n, RowScales scales) {
  for (int i = 0; i < n; ++i) acc[i] += p * double(decode_at(row, first + i, scales));
}

struct Reference {
  static std::string name() { return "reference"; }

  explicit Reference(const Threads& /*threads*/ = 1) {}

  template <KeyMask KeyMaskT = PrefixMask, class Store>
  void attend(const Store& store, const AttendSpec& spec, std::span<const QueryJob> jobs) const {
    std::vector<double> scores;
    std::vector<double> acc(std::size_t(spec.value_dim));
    for (const QueryJob& job : jobs) {
      const KeyRange keys = KeyMaskT::range(job);
      scores.resize(std::size_t(keys.size()));
      for (int h = 0; h < spec.cache_heads; ++h)
        for (int g = 0; g < spec.group; ++g) {
          const int head = h * spec.group + g;
          const float* q = job.query + std::ptrdiff_t(head) * spec.key_dim;
          double max_score = kNegativeInfinity<double>;
          for (int t = keys.first; t < keys.end; ++t) {
            double score = kNegativeInfinity<double>;
            if (!KeyMaskT::drops_keys || KeyMaskT::keeps(job, t)) {
              const auto* k = store.row(spec.key_tensor, job.seq, t, h);
              const int first = spec.key_offset + g * spec.key_group_stride;
              score = bounded_score(reference_dot(q, k, first, spec.key_dim, spec.key_scales) * double(spec.scale));
            }
            scores[std::size_t(t - keys.first)] = score;
            if (score > max_score || std::isnan(score)) max_score = score;  // a NaN stays, and shows in the output
          }
          float* out = job.out + std::ptrdiff_t(head) * spec.value_dim;
          if (max_score == kNegativeInfinity<double>) {  // nothing visible, or every score -inf
            std::fill_n(out, spec.value_dim, 0.0f);
            continue;
          }
          double sum = 0;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int t = keys.first; t < keys.end; ++t) {
            if (KeyMaskT::drops_keys && !KeyMaskT::keeps(job, t)) continue;  // a dropped token's value is never read
            const double p = std::exp(scores[std::size_t(t - keys.first)] - max_score);
            sum += p;
            reference_accumulate(acc.data(), p, store.row(spec.value_tensor, job.seq, t, h), spec.value_offset, spec.value_dim,
                                 spec.value_scales);
          }
          for (int i = 0; i < spec.value_dim; ++i) out[i] = float(acc[std::size_t(i)] / sum);
        }
    }
  }
};

}  // namespace polyattn::exec
