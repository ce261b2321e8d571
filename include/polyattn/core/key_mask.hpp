// Key masks: which of the tokens [0, job.visible) a query row sees, as a compile-time policy that
// every executor calls inside its tile loop (FlashInfer's variant hooks, for the CPU and CUDA
// executors here). A new mask is one small struct; no executor changes for it.
//
// A key mask M provides
//   static constexpr KeyRange range(const QueryJob& job)   the tokens [first, end) the row may see,
//       0 <= first, end <= job.visible; executors read no tile outside it (a sliding window
//       reads only its window, whatever the sequence's length);
//   static constexpr bool drops_keys                       whether some tokens inside the range are
//       not seen either, and then
//   static constexpr bool keeps(const QueryJob& job, int token)   whether the row sees `token`
//       (asked for every token of the range, inside the tile loop: a dropped token's score
//       becomes -inf, with the limits of core/attend.hpp).
// `visible` is what the prefix mask (core/mask.hpp: causal or full) leaves the row: position + 1
// for a causal row, every key for a full one.
#pragma once

#include <concepts>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/host_device.hpp"

namespace polyattn {

/// Tokens [first, end) of a sequence.
struct KeyRange {
  int first = 0;
  int end = 0;
  POLYATTN_HOST_DEVICE constexpr int size() const { return end > first ? end - first : 0; }
  constexpr bool operator==(const KeyRange&) const = default;
};

template <class M>
concept KeyMask = requires(const QueryJob& job, int token) {
  { M::range(job) } -> std::same_as<KeyRange>;
  { M::drops_keys } -> std::convertible_to<bool>;
  { M::keeps(job, token) } -> std::convertible_to<bool>;
};

/// The attend primitive's own mask: a row sees every token its prefix leaves it, [0, visible).
struct PrefixMask {
  static constexpr bool drops_keys = false;
  POLYATTN_HOST_DEVICE static constexpr KeyRange range(const QueryJob& job) { return {0, job.visible}; }
  POLYATTN_HOST_DEVICE static constexpr bool keeps(const QueryJob&, int) { return true; }
};

}  // namespace polyattn
