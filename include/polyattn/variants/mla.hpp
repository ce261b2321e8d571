// Mla<Rank, KeyPartDim, Part>: multi-head latent attention with an absorbed decode.
//   Rank        latent width r; every head's compressed key and value come from the one latent c
//   KeyPartDim  the key part kept out of the latent, per head: the decoupled RoPE key width
//               (DeepSeek, shared by all heads, cached once) or the preserved key dims of each
//               head (Whisper-MLA, absolute positions, cached for every head)
//   Part        MlaKeyPart::decoupled_rope or MlaKeyPart::preserved
// Cached per token: [c (Rank) | key part], one row; see latent_absorption.hpp for the algebra.
// The caller computes the rows from x (c = x W_dkv, key part = RoPE(x W_kr) or x W_kp) and the
// queries (RoPE already applied to their RoPE part); convert/whisper_mla.hpp produces the
// weights from a pretrained MHA layer.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "polyattn/core/error.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/row_codec.hpp"
#include "polyattn/variants/latent_absorption.hpp"
#include "polyattn/variants/variant.hpp"

namespace polyattn {

template <int Rank, int KeyPartDim, MlaKeyPart Part = MlaKeyPart::decoupled_rope>
struct Mla : VariantBase {
  using Absorb = detail::LatentAbsorption<Rank, KeyPartDim, Part>;
  static constexpr int rank = Rank;
  static constexpr int key_part_dim = KeyPartDim;
  static constexpr MlaKeyPart key_part = Part;
  static constexpr bool transforms_queries = true;
  static constexpr bool transforms_outputs = true;

  /// Up-projections in the x·W convention (a torch Linear weight is their transpose).
  struct Params {
    RowMatrixXf w_uk;               ///< (Rank, n_heads * nope_dim): head h's compressed key = c w_uk[:, h*nope_dim, +nope_dim)
    RowMatrixXf w_uv;               ///< (Rank, n_heads * head_dim): head h's value = c w_uv[:, h*head_dim, +head_dim)
    Eigen::RowVectorXf value_bias;  ///< empty or (n_heads * head_dim): added after attention (softmax weights sum to 1)
    float scale = 0;                ///< softmax scale; 0 = 1/sqrt(query_head_dim)
  };
  /// latent (tokens, Rank); key_part (tokens, KeyPartDim) for decoupled_rope (RoPE applied at
  /// the token's position), (tokens, n_heads * KeyPartDim) for preserved (heads adjacent).
  struct Rows {
    ConstMatrixRef latent;
    ConstMatrixRef key_part;
  };

  static std::string name() {
    return "mla_r" + std::to_string(Rank) + (Part == MlaKeyPart::decoupled_rope ? "_rope" : "_keep") + std::to_string(KeyPartDim);
  }

  /// Columns of a head's query that go through the latent (head_dim, or head_dim - KeyPartDim).
  static constexpr int nope_dim(AttentionShape s) { return Absorb::nope_dim(s); }
  /// A head's query width: head_dim + KeyPartDim (rope) or head_dim (preserved).
  static constexpr int query_head_dim(AttentionShape s) { return Absorb::query_head_dim(s); }
  static constexpr int key_part_width(AttentionShape s) { return Absorb::key_part_width(s); }

  static constexpr std::size_t cache_elements_per_token(AttentionShape s) { return std::size_t(Absorb::row_width(s)); }

  static std::vector<TensorSpec> cache_tensors(AttentionShape s, const Params&) { return {TensorSpec{1, Absorb::row_width(s)}}; }

  static void validate(AttentionShape s, const Params& p) {
    Absorb::validate_shape(name(), s);
    Absorb::validate_weights(name(), s, p.w_uk, p.w_uv, p.value_bias, p.scale);
  }

  static AttendSpec attend_spec(AttentionShape s, const Params& p) { return Absorb::attend_spec(s, p.scale); }

  static constexpr int query_width(AttentionShape s) { return s.n_heads * query_head_dim(s); }
  static constexpr int output_width(AttentionShape s) { return s.n_heads * s.head_dim; }

  static int row_count(const Rows& r) { return int(r.latent.rows()); }

  static void check_rows(AttentionShape s, const Params&, const Rows& r) {
    require<ShapeError>(r.latent.cols() == Rank, name(), ": latent has ", r.latent.cols(), " columns, expected Rank = ", Rank);
    require<ShapeError>(r.key_part.cols() == key_part_width(s), name(), ": key_part has ", r.key_part.cols(), " columns, expected ",
                        key_part_width(s));
    require<ShapeError>(r.key_part.rows() == r.latent.rows(), name(), ": latent has ", r.latent.rows(), " rows but key_part has ",
                        r.key_part.rows());
  }

  /// Copies rows [first_row, first_row + n) to cache rows pos, pos + 1, ...
  template <class Store>
  static void write_rows(Store& store, int seq, int pos, AttentionShape s, const Params&, const Rows& r, int first_row, int n) {
    for (int i = 0; i < n; ++i) {
      auto* row = store.row(0, seq, pos + i, 0);
      encode_row(row, r.latent.row(first_row + i).data(), Rank);
      encode_row(row + Rank, r.key_part.row(first_row + i).data(), key_part_width(s));
    }
  }

  static void prepare_queries(AttentionShape s, const Params& p, ConstMatrixRef q, RowMatrixXf& absorbed) {
    Absorb::prepare_queries(s, p.w_uk, q, absorbed);
  }
  static void finish_outputs(AttentionShape s, const Params& p, const RowMatrixXf& attended, MatrixRef out) {
    Absorb::finish_outputs(s, p.w_uv, p.value_bias, attended, out);
  }

  /// The non-absorbed keys (tokens, n_heads * query_head_dim) and values (tokens, n_heads *
  /// head_dim): attention with these and the unchanged queries is what the absorbed decode computes.
  static typename Absorb::Expanded expand(AttentionShape s, const Params& p, const Rows& r) {
    check_rows(s, p, r);
    return Absorb::expand(s, p.w_uk, p.w_uv, p.value_bias, r.latent, r.key_part);
  }
};

}  // namespace polyattn
