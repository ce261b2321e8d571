// X-cache (seed: slim-attention §5, Fig. 4): cache the layer input x (width d = model_dim) instead
// of K and V; one cache head shared by every query head, for any W_k shape (e may exceed d).
//   scores_i = ((x_n W_q,i + b_q,i) W_k,i^T) X^T     output_i = (p_i X) W_v,i + b_v,i
// The key bias cancels in the softmax (no RoPE may sit between projection and dot product);
// the value bias is added after (softmax weights sum to 1), so the output equals MHA's heads
// before W_o. For cross-attention X is the encoder output E: one E-cache for every decoder layer
// (layers/cross_cache.hpp).
//
// Queries are the layer input x (width d). Two ways to form the per-head query of width d,
// chosen at conversion (make_x_cache_params, convert/x_cache.hpp) by multiply-adds per query row:
//   projected (two steps):  q = x W_q + b_q, then q_i W_k,i^T         2 d e
//   fused (precomputed):    x W_qk,i + c_i, W_qk,i = W_q,i W_k,i^T      n_heads d^2
// fused is cheaper only when d < 2 head_dim (few, wide heads). Whisper (d = n_heads * 64) and
// every model of the seed's tables have d >= 2 head_dim, so they take the projected path.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "polyattn/core/error.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/row_codec.hpp"
#include "polyattn/variants/variant.hpp"

namespace polyattn {

struct XCache : VariantBase {
  enum class QueryPath { projected, fused };

  struct Params {
    QueryPath path = QueryPath::projected;
    RowMatrixXf w_q;           ///< projected: (d, e)
    Eigen::RowVectorXf b_q;    ///< projected: (e)
    RowMatrixXf w_k;           ///< projected: (d, e)
    RowMatrixXf w_qk;          ///< fused: (d, n_heads * d), head i's block = W_q,i W_k,i^T
    Eigen::RowVectorXf c_qk;   ///< fused: (n_heads * d), head i's block = b_q,i W_k,i^T
    RowMatrixXf w_v;           ///< (d, e)
    Eigen::RowVectorXf b_v;    ///< (e), added to the output
  };
  /// x: (tokens, d), the layer input (or the encoder output for cross-attention).
  struct Rows {
    ConstMatrixRef x;
  };

  static std::string name() { return "xcache"; }

  static constexpr std::size_t cache_elements_per_token(AttentionShape s) { return std::size_t(s.input_width()); }
  /// int8 caches: one float scale per token (the row is one segment: every head reads all of it).
  static constexpr std::size_t cache_scales_per_token(AttentionShape) { return 1; }

  static std::vector<TensorSpec> cache_tensors(AttentionShape s, const Params&) { return {TensorSpec{1, s.input_width()}}; }

  static void validate(AttentionShape s, const Params& p) {
    require<ShapeError>(s.n_heads >= 1 && s.head_dim >= 1, name(), ": n_heads and head_dim must be >= 1, got ", s.n_heads, " and ",
                        s.head_dim);
    const int d = s.input_width(), e = s.query_width();
    auto check = [](const auto& m, Eigen::Index rows, Eigen::Index cols, const char* what) {
      require<ShapeError>(m.rows() == rows && m.cols() == cols, "xcache: ", what, " is ", m.rows(), " x ", m.cols(), ", expected ",
                          rows, " x ", cols, " (see make_x_cache_params)");
    };
    if (p.path == QueryPath::projected) {
      check(p.w_q, d, e, "W_q");
      check(p.b_q, 1, e, "b_q");
      check(p.w_k, d, e, "W_k");
    } else {
      check(p.w_qk, d, Eigen::Index(s.n_heads) * d, "W_qk");
      check(p.c_qk, 1, Eigen::Index(s.n_heads) * d, "c_qk");
    }
    check(p.w_v, d, e, "W_v");
    check(p.b_v, 1, e, "b_v");
  }

  static AttendSpec attend_spec(AttentionShape s, const Params&) {
    AttendSpec spec;
    spec.cache_heads = 1;
    spec.group = s.n_heads;
    spec.key_dim = spec.value_dim = s.input_width();
    spec.key_tensor = spec.value_tensor = 0;
    spec.scale = float(1.0 / std::sqrt(double(s.head_dim)));  // the scale of the original head
    return spec;
  }

  static constexpr int query_width(AttentionShape s) { return s.input_width(); }
  static constexpr int output_width(AttentionShape s) { return s.query_width(); }
  static int row_count(const Rows& r) { return int(r.x.rows()); }

  static void check_rows(AttentionShape s, const Params&, const Rows& r) {
    require<ShapeError>(r.x.cols() == s.input_width(), name(), ": x has ", r.x.cols(), " columns, expected model_dim = ",
                        s.input_width());
  }

  template <class Store>
  static void write_rows(Store& store, int seq, int pos, AttentionShape s, const Params&, const Rows& r, int first_row, int n) {
    for (int i = 0; i < n; ++i) encode_row(store.row(0, seq, pos + i, 0), r.x.row(first_row + i).data(), s.input_width());
  }

  static constexpr bool transforms_queries = true;
  static constexpr bool transforms_outputs = true;

  /// x (B, d) -> per head (B, n_heads * d).
  static void prepare_queries(AttentionShape s, const Params& p, ConstMatrixRef x, RowMatrixXf& queries) {
    const int d = s.input_width(), dh = s.head_dim;
    if (p.path == QueryPath::fused) {
      queries.noalias() = x * p.w_qk;
      queries.rowwise() += p.c_qk;
      return;
    }
    RowMatrixXf q(x.rows(), p.w_q.cols());
    multiply_rows(q, x, p.w_q);
    q.rowwise() += p.b_q;
    queries.resize(x.rows(), std::ptrdiff_t(s.n_heads) * d);
    for (int i = 0; i < s.n_heads; ++i)
      multiply_rows(queries.middleCols(std::ptrdiff_t(i) * d, d), q.middleCols(std::ptrdiff_t(i) * dh, dh),
                    p.w_k.middleCols(std::ptrdiff_t(i) * dh, dh).transpose());
  }

  /// attended (B, n_heads * d) = p_i X per head -> out (B, e) = (p_i X) W_v,i + b_v,i.
  static void finish_outputs(AttentionShape s, const Params& p, const RowMatrixXf& attended, MatrixRef out) {
    const int d = s.input_width(), dh = s.head_dim;
    for (int i = 0; i < s.n_heads; ++i)
      multiply_rows(out.middleCols(std::ptrdiff_t(i) * dh, dh), attended.middleCols(std::ptrdiff_t(i) * d, d),
                    p.w_v.middleCols(std::ptrdiff_t(i) * dh, dh));
    out.rowwise() += p.b_v;
  }
};

/// Which query path is cheaper for `shape` (see the header comment).
inline XCache::QueryPath cheaper_x_cache_query_path(AttentionShape s) {
  const double d = s.input_width(), e = s.query_width();
  return double(s.n_heads) * d * d < 2 * d * e ? XCache::QueryPath::fused : XCache::QueryPath::projected;
}

}  // namespace polyattn
