// What the Whisper-MLA conversion (convert/whisper_mla.hpp) gives for one layer, apart from the
// SVD that computes it: code that only uses converted weights (builds an Mla layer from them)
// includes this header and does not compile the decomposition.
#pragma once

#include <vector>

#include <Eigen/Core>

#include "polyattn/core/error.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/variants/mla.hpp"

namespace polyattn::convert {

/// The converted layer. Queries: q' = x w_q + b_q (columns permuted within heads); cache rows:
/// latent = x w_dkv, key_part = x w_kp; Mla params: w_uk, w_uv, b_v.
struct WhisperMlaWeights {
  int n_heads = 0, head_dim = 0, kept_dims = 0, latent_rank = 0;
  std::vector<std::vector<int>> kept_pairs;  ///< per head, ascending pair indices
  std::vector<int> permutation;              ///< column c of q'/k' is column permutation[c] of q/k
  Eigen::MatrixXd w_q;                       ///< (d_model, n_heads * head_dim), permuted
  Eigen::RowVectorXd b_q;                    ///< empty or permuted
  Eigen::MatrixXd w_dkv;                     ///< (d_model, latent_rank)
  Eigen::MatrixXd w_kp;                      ///< (d_model, n_heads * kept_dims)
  Eigen::MatrixXd w_uk;                      ///< (latent_rank, n_heads * (head_dim - kept_dims))
  Eigen::MatrixXd w_uv;                      ///< (latent_rank, n_heads * head_dim)
  Eigen::RowVectorXd b_v;                    ///< empty or (n_heads * head_dim)

  RowMatrixXf queries(const Eigen::MatrixXd& x) const { return with_bias(x * w_q, b_q); }
  RowMatrixXf latent(const Eigen::MatrixXd& x) const { return (x * w_dkv).cast<float>(); }
  RowMatrixXf key_part(const Eigen::MatrixXd& x) const { return (x * w_kp).cast<float>(); }

  /// Params for the matching Mla policy (Rank and KeyPartDim must be what was converted).
  template <class MlaVariant>
  typename MlaVariant::Params mla_params() const {
    static_assert(MlaVariant::key_part == MlaKeyPart::preserved, "polyattn: Whisper-MLA weights need an Mla<..., MlaKeyPart::preserved>");
    require<ShapeError>(MlaVariant::rank == latent_rank && MlaVariant::key_part_dim == kept_dims, "whisper_mla: weights have latent rank ",
                        latent_rank, " and ", kept_dims, " kept dims per head, but the policy is ", MlaVariant::name());
    typename MlaVariant::Params p;
    p.w_uk = w_uk.cast<float>();
    p.w_uv = w_uv.cast<float>();
    if (b_v.size() > 0) p.value_bias = b_v.cast<float>();
    return p;
  }

 private:
  static RowMatrixXf with_bias(const Eigen::MatrixXd& m, const Eigen::RowVectorXd& b) {
    if (b.size() == 0) return m.cast<float>();
    return (m.rowwise() + b).cast<float>();
  }
};

}  // namespace polyattn::convert
