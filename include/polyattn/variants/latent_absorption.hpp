// The absorbed-latent algebra shared by Mla and Mtla (DeepSeek-V2 MLA, decoded as in its
// "weight absorption" form). One cache head, read by all n_heads query heads, whose row is
//   [ c (Rank) | key part ]
// where c is the latent every head's compressed key and value are projected up from
// (k_h = c W_uk,h, v_h = c W_uv,h) and the key part is not compressed:
//   decoupled_rope: one RoPE key of KeyPartDim shared by every head (DeepSeek, MTLA);
//                   head h's query is [q_nope (head_dim) | q_rope (KeyPartDim)]
//   preserved:      KeyPartDim key dimensions of every head kept as they are (Whisper-MLA, for
//                   absolute positions); head h's query is [q_c (head_dim - KeyPartDim) | q_kept]
// Scores never form k_h: q_nope . (c W_uk,h) = (q_nope W_uk,hᵀ) . c, so the attend primitive
// sees, per head, the query [q_nope W_uk,hᵀ (Rank) | key-part query] against the whole row, and
// accumulates the latent prefix (value_dim = Rank); W_uv,h is applied once after attention.
// For `preserved` the key-part query is zero outside head h's own KeyPartDim columns.
// The softmax scale defaults to 1/sqrt(pre-absorption q.k head dim), never 1/sqrt(Rank).
#pragma once

#include <cmath>
#include <string>

#include <Eigen/Core>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/error.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn {

/// What the uncompressed part of an MLA key is.
enum class MlaKeyPart {
  decoupled_rope,  ///< one decoupled RoPE key shared by all heads (DeepSeek form)
  preserved,       ///< a few preserved absolute-position key dims per head (Whisper-MLA form)
};

namespace detail {

template <int Rank, int KeyPartDim, MlaKeyPart Part>
struct LatentAbsorption {
  static_assert(Rank >= 1, "polyattn: an MLA latent rank must be >= 1");
  static_assert(KeyPartDim >= 0, "polyattn: the uncompressed key part of MLA must be >= 0 wide");
  static constexpr bool rope = Part == MlaKeyPart::decoupled_rope;

  /// Columns of a head's query/key that go through the latent.
  static constexpr int nope_dim(AttentionShape s) { return rope ? s.head_dim : s.head_dim - KeyPartDim; }
  /// A head's query (and expanded key) width before absorption: what the softmax scale uses.
  static constexpr int query_head_dim(AttentionShape s) { return rope ? s.head_dim + KeyPartDim : s.head_dim; }
  /// Cached key-part columns per token.
  static constexpr int key_part_width(AttentionShape s) { return rope ? KeyPartDim : s.n_heads * KeyPartDim; }
  static constexpr int row_width(AttentionShape s) { return Rank + key_part_width(s); }

  static void validate_shape(const std::string& name, AttentionShape s) {
    require<ShapeError>(s.n_heads >= 1 && s.head_dim >= 1, name, ": n_heads and head_dim must be >= 1, got ", s.n_heads, " and ",
                        s.head_dim);
    if constexpr (!rope)
      require<ShapeError>(KeyPartDim <= s.head_dim, name, ": ", KeyPartDim, " preserved key dims per head do not fit head_dim = ",
                          s.head_dim);
  }

  /// w_uk (Rank, n_heads * nope_dim), w_uv (Rank, n_heads * head_dim), value_bias empty or
  /// (n_heads * head_dim), scale >= 0 (0 = default).
  static void validate_weights(const std::string& name, AttentionShape s, const RowMatrixXf& w_uk, const RowMatrixXf& w_uv,
                               const Eigen::RowVectorXf& value_bias, float scale) {
    const int nope = s.n_heads * nope_dim(s), values = s.n_heads * s.head_dim;
    require<ShapeError>(w_uk.rows() == Rank && w_uk.cols() == nope, name, ": w_uk is (", w_uk.rows(), ", ", w_uk.cols(),
                        "), expected (Rank, n_heads * ", nope_dim(s), ") = (", Rank, ", ", nope, ")");
    require<ShapeError>(w_uv.rows() == Rank && w_uv.cols() == values, name, ": w_uv is (", w_uv.rows(), ", ", w_uv.cols(),
                        "), expected (Rank, n_heads * head_dim) = (", Rank, ", ", values, ")");
    require<ShapeError>(value_bias.size() == 0 || value_bias.size() == values, name, ": value_bias has ", value_bias.size(),
                        " entries, expected 0 or n_heads * head_dim = ", values);
    require<ShapeError>(std::isfinite(scale) && scale >= 0, name, ": scale must be finite and >= 0 (0 = default), got ", scale);
  }

  /// `scale` if set (> 0), else 1/sqrt(query_head_dim).
  static double softmax_scale(AttentionShape s, float scale) {
    return scale > 0 ? double(scale) : 1.0 / std::sqrt(double(query_head_dim(s)));
  }

  static AttendSpec attend_spec(AttentionShape s, float scale) {
    AttendSpec spec;
    spec.cache_heads = 1;
    spec.group = s.n_heads;
    spec.key_dim = row_width(s);
    spec.value_dim = Rank;
    spec.key_tensor = spec.value_tensor = 0;  // values are the latent prefix of the key row
    spec.key_offset = spec.value_offset = 0;
    spec.scale = float(softmax_scale(s, scale));
    return spec;
  }

  /// q (rows, n_heads * query_head_dim) -> absorbed (rows, n_heads * row_width).
  static void prepare_queries(AttentionShape s, const RowMatrixXf& w_uk, ConstMatrixRef q, RowMatrixXf& absorbed) {
    const auto n = q.rows();
    const int qd = query_head_dim(s), nope = nope_dim(s), kw = row_width(s);
    absorbed.resize(n, std::ptrdiff_t(s.n_heads) * kw);
    for (int h = 0; h < s.n_heads; ++h) {
      auto lat = absorbed.middleCols(std::ptrdiff_t(h) * kw, Rank);
      if (nope > 0)
        lat.noalias() = q.middleCols(std::ptrdiff_t(h) * qd, nope) * w_uk.middleCols(std::ptrdiff_t(h) * nope, nope).transpose();
      else
        lat.setZero();
      auto part = absorbed.middleCols(std::ptrdiff_t(h) * kw + Rank, key_part_width(s));
      if constexpr (rope) {
        part = q.middleCols(std::ptrdiff_t(h) * qd + nope, KeyPartDim);
      } else {
        part.setZero();
        part.middleCols(std::ptrdiff_t(h) * KeyPartDim, KeyPartDim) = q.middleCols(std::ptrdiff_t(h) * qd + nope, KeyPartDim);
      }
    }
  }

  /// attended (rows, n_heads * Rank) -> out (rows, n_heads * head_dim): per head (sum p c) W_uv,h + b_v,h.
  static void finish_outputs(AttentionShape s, const RowMatrixXf& w_uv, const Eigen::RowVectorXf& value_bias,
                             const RowMatrixXf& attended, MatrixRef out) {
    const int d = s.head_dim;
    for (int h = 0; h < s.n_heads; ++h)
      out.middleCols(std::ptrdiff_t(h) * d, d).noalias() =
          attended.middleCols(std::ptrdiff_t(h) * Rank, Rank) * w_uv.middleCols(std::ptrdiff_t(h) * d, d);
    if (value_bias.size() > 0) out.rowwise() += value_bias;
  }

  /// The non-absorbed form: per head keys [c W_uk,h | key part of head h] (tokens, n_heads *
  /// query_head_dim) and values c W_uv,h + b_v,h (tokens, n_heads * head_dim), as MHA would cache them.
  struct Expanded {
    RowMatrixXf k, v;
  };
  static Expanded expand(AttentionShape s, const RowMatrixXf& w_uk, const RowMatrixXf& w_uv, const Eigen::RowVectorXf& value_bias,
                         ConstMatrixRef latent, ConstMatrixRef key_part) {
    const auto n = latent.rows();
    const int qd = query_head_dim(s), nope = nope_dim(s);
    Expanded e{RowMatrixXf(n, std::ptrdiff_t(s.n_heads) * qd), RowMatrixXf(latent * w_uv)};
    if (value_bias.size() > 0) e.v.rowwise() += value_bias;
    for (int h = 0; h < s.n_heads; ++h) {
      e.k.middleCols(std::ptrdiff_t(h) * qd, nope).noalias() = latent * w_uk.middleCols(std::ptrdiff_t(h) * nope, nope);
      e.k.middleCols(std::ptrdiff_t(h) * qd + nope, KeyPartDim) =
          key_part.middleCols(rope ? 0 : std::ptrdiff_t(h) * KeyPartDim, KeyPartDim);
    }
    return e;
  }
};

}  // namespace detail
}  // namespace polyattn
