// How the heads of an uncached attention split its matrices' columns (uncached_attention.hpp, and
// exec::Cuda::attention over device matrices): q (n, query_heads * head_dim), k (n_keys, kv_heads *
// head_dim), v (n_keys, kv_heads * value_dim); query head h reads kv head h / (query_heads / kv_heads).
// Both reduce to the attend primitive (core/attend.hpp) with keys in tensor 0 and values in tensor 1.
#pragma once

#include <algorithm>
#include <cmath>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/error.hpp"
#include "polyattn/core/mask.hpp"

namespace polyattn {

struct AttentionHeads {
  int query_heads = 0;
  int kv_heads = 0;   ///< divides query_heads (MHA: equal; GQA/MQA: fewer)
  int head_dim = 0;
  float scale = 0.0f;  ///< softmax scale on q.k; 0 = 1 / sqrt(head_dim)
  int value_dim = 0;   ///< width of a value head; 0 = head_dim (MLA-style latents attend with narrower values)

  int values() const { return value_dim != 0 ? value_dim : head_dim; }

  /// Throws ShapeError, naming `who`, unless the sizes are positive and kv heads divide query heads.
  void check(const char* who) const {
    require<ShapeError>(query_heads > 0 && kv_heads > 0 && head_dim > 0 && values() > 0 && query_heads % kv_heads == 0, who, ": ",
                        query_heads, " query heads, ", kv_heads, " kv heads of ", head_dim, " (values of ", values(),
                        "): need positive sizes and kv heads dividing query heads");
  }

  /// The attend primitive's spec: keys in tensor 0, values in tensor 1, one cache head a kv head.
  AttendSpec spec() const {
    AttendSpec s;
    s.cache_heads = kv_heads;
    s.group = query_heads / kv_heads;
    s.key_dim = head_dim;
    s.value_dim = values();
    s.key_tensor = 0;
    s.value_tensor = 1;
    s.scale = scale != 0.0f ? scale : 1.0f / std::sqrt(float(head_dim));
    return s;
  }
};

/// Keys row i of n sees among n_keys: all of them (Mask::full), or, the rows being the last n of
/// the n_keys positions, those up to its own (Mask::causal; none when n > n_keys and i < n - n_keys).
inline int uncached_visible(Mask mask, int i, int n, int n_keys) {
  return mask == Mask::full ? n_keys : std::clamp(n_keys - n + i + 1, 0, n_keys);
}

}  // namespace polyattn
