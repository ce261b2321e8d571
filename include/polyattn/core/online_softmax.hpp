// Online (streaming) softmax state, shared by every executor. Attention over a set of tokens is
// computed chunk by chunk: each chunk keeps (max score m, sum of exp(s - m) l, unnormalised
// output acc); two chunks merge exactly, so a sequence can be split across threads or GPU
// blocks and recombined (flash-decoding). Scores are bounded_score()s: never +inf, so the max
// is finite or (no score above -inf yet) -inf, and a chunk with sum 0 merges as nothing.
#pragma once

#include <cmath>
#include <limits>

#include "polyattn/core/host_device.hpp"

namespace polyattn {

/// -inf and the largest finite value as constants: device code may read a constexpr variable,
/// but not call the host-only constexpr numeric_limits<Acc> functions (nvcc warning 20013).
template <class Acc>
inline constexpr Acc kNegativeInfinity = -std::numeric_limits<Acc>::infinity();
template <class Acc>
inline constexpr Acc kLargestFinite = std::numeric_limits<Acc>::max();

/// A score as the softmax takes it (core/attend.hpp): +inf, a q.k beyond the accumulation type's
/// range, becomes the largest finite value, so that tokens at +inf share the weight instead of
/// giving exp(inf - inf) = NaN. -inf (weight 0) and NaN (bad input, which must show) pass.
template <class Acc>
POLYATTN_HOST_DEVICE Acc bounded_score(Acc score) {
  return score > kLargestFinite<Acc> ? kLargestFinite<Acc> : score;
}

template <class Acc>
struct SoftmaxState {
  Acc max = kNegativeInfinity<Acc>;
  Acc sum = Acc(0);

  /// No score above -inf yet: every weight so far is 0, and exp(score - max) would be
  /// exp(-inf - -inf) = NaN, so a block that leaves the state empty adds nothing.
  POLYATTN_HOST_DEVICE bool empty() const { return max == kNegativeInfinity<Acc>; }

  /// Raises the running max to at least `block_max`; returns the factor by which the sum (done
  /// here) and the caller's accumulators must be multiplied.
  POLYATTN_HOST_DEVICE Acc raise_max(Acc block_max) {
    if (block_max <= max) return Acc(1);
    const Acc factor = empty() ? Acc(0) : std::exp(max - block_max);
    sum *= factor;
    max = block_max;
    return factor;
  }
};

/// Merges chunk b (state `sb`, accumulators `acc_b[dim]`) into chunk a, in place.
template <class Acc>
POLYATTN_HOST_DEVICE void merge_softmax(SoftmaxState<Acc>& sa, Acc* acc_a, const SoftmaxState<Acc>& sb,
                                        const Acc* acc_b, int dim) {
  if (sb.sum == Acc(0)) return;
  if (sa.sum == Acc(0)) {
    sa = sb;
    for (int i = 0; i < dim; ++i) acc_a[i] = acc_b[i];
    return;
  }
  const Acc m = sa.max > sb.max ? sa.max : sb.max;
  const Acc fa = std::exp(sa.max - m);
  const Acc fb = std::exp(sb.max - m);
  for (int i = 0; i < dim; ++i) acc_a[i] = acc_a[i] * fa + acc_b[i] * fb;
  sa.sum = sa.sum * fa + sb.sum * fb;
  sa.max = m;
}

}  // namespace polyattn
