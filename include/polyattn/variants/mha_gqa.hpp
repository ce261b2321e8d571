// MHA, GQA and MQA: cache K and V per KV head. They differ only in how many query heads share a
// KV head, which is a stride in the attend primitive, not a separate kernel.
//   Mha      : kv_heads = n_heads
//   Gqa<G>   : G query heads per KV head, kv_heads = n_heads / G (G is the group size, so the
//              cache is G times smaller than MHA's)
//   Mqa      : one KV head for all query heads
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "polyattn/core/error.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/row_codec.hpp"
#include "polyattn/variants/variant.hpp"

namespace polyattn {

namespace detail {

/// Everything MHA, GQA and MQA share; `Grouping::kv_heads(shape)` is the one difference.
template <class Grouping>
struct SharedKvHeads : VariantBase {
  struct Params {};
  /// k and v: (tokens, kv_heads * head_dim), heads adjacent within a row.
  struct Rows {
    ConstMatrixRef k;
    ConstMatrixRef v;
  };

  static constexpr int kv_heads(AttentionShape s) { return Grouping::kv_heads(s); }

  static constexpr std::size_t cache_elements_per_token(AttentionShape s) {
    return 2 * std::size_t(kv_heads(s)) * std::size_t(s.head_dim);
  }
  /// int8 caches: one float scale per (token, KV head) in K and in V (core/row_scales.hpp).
  static constexpr std::size_t cache_scales_per_token(AttentionShape s) { return 2 * std::size_t(kv_heads(s)); }

  static std::vector<TensorSpec> cache_tensors(AttentionShape s, const Params&) {
    const TensorSpec kv{kv_heads(s), s.head_dim};
    return {kv, kv};  // tensor 0 = K, tensor 1 = V
  }

  static void validate(AttentionShape s, const Params&) {
    require<ShapeError>(s.n_heads >= 1 && s.head_dim >= 1, Grouping::name(), ": n_heads and head_dim must be >= 1, got ",
                        s.n_heads, " and ", s.head_dim);
    Grouping::validate_grouping(s);
  }

  static AttendSpec attend_spec(AttentionShape s, const Params&) {
    AttendSpec spec;
    spec.cache_heads = kv_heads(s);
    spec.group = s.n_heads / kv_heads(s);
    spec.key_dim = spec.value_dim = s.head_dim;
    spec.key_tensor = 0;
    spec.value_tensor = 1;
    spec.scale = float(1.0 / std::sqrt(double(s.head_dim)));
    return spec;
  }

  static constexpr int query_width(AttentionShape s) { return s.n_heads * s.head_dim; }
  static constexpr int output_width(AttentionShape s) { return s.n_heads * s.head_dim; }

  static int row_count(const Rows& r) { return int(r.k.rows()); }

  static void check_rows(AttentionShape s, const Params&, const Rows& r) {
    const int width = kv_heads(s) * s.head_dim;
    require<ShapeError>(r.k.cols() == width, Grouping::name(), ": k has ", r.k.cols(), " columns, expected kv_heads * head_dim = ",
                        kv_heads(s), " * ", s.head_dim, " = ", width);
    require<ShapeError>(r.v.cols() == width, Grouping::name(), ": v has ", r.v.cols(), " columns, expected kv_heads * head_dim = ",
                        width);
    require<ShapeError>(r.k.rows() == r.v.rows(), Grouping::name(), ": k has ", r.k.rows(), " rows but v has ", r.v.rows());
  }

  /// Copies rows [first_row, first_row + n) of k and v to cache positions pos, pos + 1, ...
  template <class Store>
  static void write_rows(Store& store, int seq, int pos, AttentionShape s, const Params&, const Rows& r, int first_row, int n) {
    const int h_kv = kv_heads(s);
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < h_kv; ++h) {
        encode_row(store.row(0, seq, pos + i, h), r.k.row(first_row + i).data() + std::ptrdiff_t(h) * s.head_dim, s.head_dim);
        encode_row(store.row(1, seq, pos + i, h), r.v.row(first_row + i).data() + std::ptrdiff_t(h) * s.head_dim, s.head_dim);
      }
  }
};

}  // namespace detail

struct Mha : detail::SharedKvHeads<Mha> {
  static std::string name() { return "mha"; }
  static constexpr int kv_heads(AttentionShape s) { return s.n_heads; }
  static void validate_grouping(AttentionShape) {}
};

template <int GroupSize>
struct Gqa : detail::SharedKvHeads<Gqa<GroupSize>> {
  static_assert(GroupSize >= 1, "polyattn: Gqa<GroupSize> needs GroupSize >= 1 (query heads per KV head)");
  static constexpr int group_size = GroupSize;
  static std::string name() { return "gqa" + std::to_string(GroupSize); }
  static constexpr int kv_heads(AttentionShape s) { return s.n_heads / GroupSize; }
  static void validate_grouping(AttentionShape s) {
    require<ShapeError>(s.n_heads % GroupSize == 0, name(), ": n_heads = ", s.n_heads,
                        " is not a multiple of the group size ", GroupSize);
  }
};

struct Mqa : detail::SharedKvHeads<Mqa> {
  static std::string name() { return "mqa"; }
  static constexpr int kv_heads(AttentionShape) { return 1; }
  static void validate_grouping(AttentionShape) {}
};

}  // namespace polyattn
