// Slim attention (seed: slim-attention), K-only cache for MHA self-attention: V = K W_kv, so only
// keys are cached (half of MHA's cache). W_kv = W_k^-1 W_v comes from convert/slim_k.hpp.
//
//   SlimK<slim::WeightedKeys> (option 2): head_i = (p_i K) W_kv,i. The cache holds one row of
//       width e = n_heads * head_dim per token (all heads); query head i scores against its own
//       slice of it and accumulates the whole row, then finish_outputs maps (p_i K) through W_kv,i.
//       Per token read: e elements; work: (n_heads + 1) * e multiply-adds (seed, Table 2).
//   SlimK<slim::ValuesFromKeys> (option 1): head_i = p_i (K W_kv,i). Values are derived for the
//       visible tokens at every attend (n * e * e work per sequence and step), then attended as
//       in MHA. The seed's "unoptimised" path; useful as a check and when p is sparse.
//   SlimK<Option, slim::Rope>: RoPE models. The cache holds keys before RoPE (V needs the raw
//       keys); keys are rotated after reading (the seed's RoPE option 1). The caller rotates
//       queries (core/rope.hpp, as for MHA) and passes keys unrotated and without bias.
//
// Queries: q = x W_q + b_q as for MHA (n_heads * head_dim). Output: concatenated heads before W_o;
// the converted output bias b_o' = b_v W_o + b_o carries the value bias. Prefill goes through
// the same attend, so it is exact but costs what decode does per query row.
#pragma once

#include <array>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "polyattn/core/error.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/row_codec.hpp"
#include "polyattn/core/rope.hpp"
#include "polyattn/variants/derived_rows.hpp"
#include "polyattn/variants/variant.hpp"

namespace polyattn {

namespace slim {
/// Option 1: V_i = K W_kv,i for the visible tokens, then p_i V_i.
struct ValuesFromKeys {
  static constexpr int option = 1;
};
/// Option 2: (p_i K) W_kv,i.
struct WeightedKeys {
  static constexpr int option = 2;
};
/// Absolute positions (or none) outside attention, as in Whisper: keys are cached as used.
struct NoRope {
  static constexpr bool rotary = false;
};
/// RoPE between projection and dot product: cache raw keys, rotate them after reading.
struct Rope {
  static constexpr bool rotary = true;
};
}  // namespace slim

template <class Option = slim::WeightedKeys, class Positions = slim::NoRope>
struct SlimK : VariantBase {
  static_assert(Option::option == 1 || Option::option == 2,
                "polyattn: SlimK<Option> takes slim::ValuesFromKeys (option 1) or slim::WeightedKeys (option 2)");
  static constexpr int option = Option::option;
  static constexpr bool rotary = Positions::rotary;

  struct Params {
    RowMatrixXf w_kv;            ///< (e, e), from convert_to_slim_k; head i's block is columns [i * head_dim, (i+1) * head_dim)
    double rope_base = 10000.0;  ///< only read with slim::Rope
  };
  /// k: (tokens, n_heads * head_dim) = x W_k, without bias and before RoPE.
  struct Rows {
    ConstMatrixRef k;
  };

  static std::string name() { return std::string("slimk") + (option == 1 ? "1" : "2") + (rotary ? "-rope" : ""); }

  static constexpr std::size_t cache_elements_per_token(AttentionShape s) { return std::size_t(s.n_heads) * std::size_t(s.head_dim); }
  /// int8 caches (option 2 without RoPE: the others derive float rows from the cache): one float
  /// scale per (token, head slice) of the packed key row, the part one query head scores against.
  static constexpr std::size_t cache_scales_per_token(AttentionShape s)
    requires(option == 2 && !rotary)
  {
    return std::size_t(s.n_heads);
  }

  /// Option 2 reads the whole key row per head: one cache head of width e, in segments of
  /// head_dim (int8: one scale per head's slice). Option 1 attends per head as MHA does: n_heads
  /// heads of head_dim.
  static std::vector<TensorSpec> cache_tensors(AttentionShape s, const Params&) {
    if constexpr (option == 2) return {TensorSpec{1, s.query_width(), s.head_dim}};
    else return {TensorSpec{s.n_heads, s.head_dim}};
  }

  static void validate(AttentionShape s, const Params& p) {
    require<ShapeError>(s.n_heads >= 1 && s.head_dim >= 1, name(), ": n_heads and head_dim must be >= 1, got ", s.n_heads, " and ",
                        s.head_dim);
    const int e = s.query_width();
    require<ShapeError>(p.w_kv.rows() == e && p.w_kv.cols() == e, name(), ": W_kv is ", p.w_kv.rows(), " x ", p.w_kv.cols(),
                        ", expected e x e = ", e, " x ", e, " (n_heads * head_dim; see convert_to_slim_k)");
    if constexpr (rotary) require<ShapeError>(s.head_dim % 2 == 0, name(), ": RoPE needs an even head_dim, got ", s.head_dim);
  }

  // View tensors: 0 = the cache (raw keys); derived after it: option 1 -> 1 = V, [2 = rotated K];
  // option 2 -> [1 = rotated K].
  static constexpr int kRotatedKeys = option == 1 ? 2 : 1;

  static AttendSpec attend_spec(AttentionShape s, const Params&) {
    AttendSpec spec;
    spec.key_tensor = rotary ? kRotatedKeys : 0;
    spec.key_dim = s.head_dim;
    spec.scale = float(1.0 / std::sqrt(double(s.head_dim)));
    if constexpr (option == 2) {
      spec.cache_heads = 1;
      spec.group = s.n_heads;
      spec.key_group_stride = s.head_dim;  // head i scores against its slice of the key row
      spec.value_tensor = 0;               // ... and accumulates the whole row
      spec.value_dim = s.query_width();
    } else {
      spec.cache_heads = s.n_heads;
      spec.group = 1;
      spec.value_tensor = 1;
      spec.value_dim = s.head_dim;
    }
    return spec;
  }

  static constexpr int query_width(AttentionShape s) { return s.query_width(); }
  static constexpr int output_width(AttentionShape s) { return s.query_width(); }
  static int row_count(const Rows& r) { return int(r.k.rows()); }

  static void check_rows(AttentionShape s, const Params&, const Rows& r) {
    require<ShapeError>(r.k.cols() == s.query_width(), name(), ": k has ", r.k.cols(), " columns, expected n_heads * head_dim = ",
                        s.query_width());
  }

  template <class Store>
  static void write_rows(Store& store, int seq, int pos, AttentionShape s, const Params& p, const Rows& r, int first_row, int n) {
    for (const TensorSpec t = cache_tensors(s, p)[0]; n > 0; --n, ++pos, ++first_row)
      for (int h = 0; h < t.heads; ++h)
        encode_row(store.row(0, seq, pos, h), r.k.row(first_row).data() + std::ptrdiff_t(h) * t.dim, t.dim, t.segment);
  }

  // Option 2: out_i = attended_i W_kv,i, attended_i = p_i K of width e.
  static constexpr bool transforms_outputs = option == 2;

  static void finish_outputs(AttentionShape s, const Params& p, const RowMatrixXf& attended, MatrixRef out) {
    const int e = s.query_width(), dh = s.head_dim;
    for (int i = 0; i < s.n_heads; ++i)
      multiply_rows(out.middleCols(std::ptrdiff_t(i) * dh, dh), attended.middleCols(std::ptrdiff_t(i) * e, e),
                    p.w_kv.middleCols(std::ptrdiff_t(i) * dh, dh));
  }

  // Option 1 derives V; RoPE derives rotated keys.
  static constexpr bool derives_rows = option == 1 || rotary;

  struct Scratch {
    RowMatrixXf keys, values, rotated;
  };

  template <class Store, class Attend>
  static void attend_derived(AttentionShape s, const Params& p, const Store& store, std::span<const QueryJob> jobs, Scratch& scratch,
                             Attend&& attend) {
    for_each_sequence_run(jobs, [&](std::size_t first, std::size_t count) {
      const auto some = jobs.subspan(first, count);
      int n = 0;
      for (const QueryJob& j : some) n = std::max(n, j.visible);
      const int seq = some[0].seq;
      gather_rows(store, 0, seq, n, scratch.keys);  // (n, e) raw keys
      if constexpr (rotary) {
        scratch.rotated = scratch.keys;
        apply_rope(scratch.rotated, 0, s.head_dim, p.rope_base);
      }
      const TensorSpec per_head{s.n_heads, s.head_dim};
      if constexpr (option == 1) {
        scratch.values.noalias() = scratch.keys * p.w_kv;  // V = K W_kv, (n, e)
        if constexpr (rotary)
          attend(DerivedRows<Store, 2>(store, seq, {&scratch.values, &scratch.rotated}, {per_head, per_head}), some);
        else
          attend(DerivedRows<Store, 1>(store, seq, {&scratch.values}, {per_head}), some);
      } else {
        attend(DerivedRows<Store, 1>(store, seq, {&scratch.rotated}, {TensorSpec{1, s.query_width()}}), some);
      }
    });
  }
};

using SlimK1 = SlimK<slim::ValuesFromKeys>;
using SlimK2 = SlimK<slim::WeightedKeys>;

}  // namespace polyattn
