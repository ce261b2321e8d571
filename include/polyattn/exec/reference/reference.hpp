// The golden model: the attend primitive written as plainly as possible, accumulating in
// double. Every other executor is tested against it; it is not meant to be fast.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "polyattn/core/attend.hpp"

namespace polyattn::exec {

struct Reference {
  static std::string name() { return "reference"; }

  explicit Reference(int /*threads*/ = 1) {}

  template <class Store>
  void attend(const Store& store, const AttendSpec& spec, std::span<const QueryJob> jobs) const {
    std::vector<double> scores;
    std::vector<double> acc(std::size_t(spec.value_dim));
    for (const QueryJob& job : jobs) {
      scores.resize(std::size_t(job.visible));
      for (int h = 0; h < spec.cache_heads; ++h)
        for (int g = 0; g < spec.group; ++g) {
          const int head = h * spec.group + g;
          const float* q = job.query + std::ptrdiff_t(head) * spec.key_dim;
          double max_score = -INFINITY;
          for (int t = 0; t < job.visible; ++t) {
            const auto* k = store.row(spec.key_tensor, job.seq, t, h) + spec.key_offset + g * spec.key_group_stride;
            double dot = 0;
            for (int i = 0; i < spec.key_dim; ++i) dot += double(q[i]) * double(k[i]);
            scores[std::size_t(t)] = dot * double(spec.scale);
            max_score = std::max(max_score, scores[std::size_t(t)]);
          }
          double sum = 0;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int t = 0; t < job.visible; ++t) {
            const double p = std::exp(scores[std::size_t(t)] - max_score);
            sum += p;
            const auto* v = store.row(spec.value_tensor, job.seq, t, h) + spec.value_offset;
            for (int i = 0; i < spec.value_dim; ++i) acc[std::size_t(i)] += p * double(v[i]);
          }
          float* out = job.out + std::ptrdiff_t(head) * spec.value_dim;
          for (int i = 0; i < spec.value_dim; ++i) out[i] = float(acc[std::size_t(i)] / sum);
        }
    }
  }
};

}  // namespace polyattn::exec
