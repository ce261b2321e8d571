// Whisper-MLA conversion (MHA2MLA adapted to absolute positions): pretrained MHA self-attention
// weights (MhaWeights, convert/mha_weights.hpp, with the AttentionShape that gives their heads)
// -> Mla<Rank, KeptDims, MlaKeyPart::preserved> weights. Offline, in double (the float weights
// are widened once).
//
//   1. Per head, keep `kept_pairs` frequency pairs (dims 2k, 2k+1) of the key uncompressed:
//        uniform:  pairs floor(k * (head_dim/2) / kept_pairs), k < kept_pairs   (paper eq. 1)
//        two_norm: the kept_pairs pairs with the largest E||q^[2k,2k+1]|| * E||k^[2k,2k+1]||
//                  over the caller's calibration inputs (paper eq. 2; means over tokens, ties
//                  to the lower pair)
//   2. Permute each head's query and key columns, the same way, to [compressed | kept] (a
//      permutation inside a head leaves q.k unchanged; one across heads would not).
//   3. Joint SVD of [W_kc, W_v] = U S Vᵀ (d_model x (n_heads (head_dim - kept) + n_heads head_dim))
//      truncated to `latent_rank` = d_kv, shared by all heads: W_dkv = U_r S_r^a,
//      [W_uk, W_uv] = S_r^(1-a) V_rᵀ, W_uk being the first n_heads (head_dim - kept) columns (the
//      K block comes first in the concatenation; eq. 4 of the Whisper-MLA paper indexes the two
//      blocks the other way round). Two Sigma splits:
//        SigmaSplit::symmetric  a = 1/2  (paper eq. 4): latent and up-projections equally scaled
//        SigmaSplit::into_up    a = 0    : W_dkv = U_r is orthonormal, the latent is a rotation of
//                                          x (same scale as x) and all of S goes to W_uk, W_uv
//      The product, hence the attention, is the same; they differ in the scale of the cached
//      latent (which matters for low-precision caches) and of the up-projections.
// The value bias moves behind attention (softmax weights sum to 1): Mla adds it in finish_outputs.
// The key bias is dropped: it is constant across keys for a given query and cancels in the
// softmax (absolute positions: no RoPE between projection and dot product). W_o and b_o are not
// converted (the layer keeps them).
//
// `measure_conversion` reports, on calibration inputs, the relative Frobenius error of K, V,
// [K V] and of the causal attention output, plus the weight-space error of the truncation.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <Eigen/SVD>

#include "polyattn/convert/mha_weights.hpp"
#include "polyattn/convert/whisper_mla_weights.hpp"
#include "polyattn/core/error.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/shape.hpp"
#include "polyattn/variants/mla.hpp"

namespace polyattn::convert {

enum class KeepSelection { uniform, two_norm };
enum class SigmaSplit { symmetric, into_up };

namespace detail {

/// The MHA layer the conversion reads, widened to double: q = x w_q + b_q, k = x w_k, v = x w_v + b_v.
struct MhaInDouble {
  int n_heads = 0;
  int head_dim = 0;
  Eigen::MatrixXd w_q, w_k, w_v;  ///< (d_model, n_heads * head_dim), heads adjacent
  Eigen::RowVectorXd b_q, b_v;    ///< empty or (n_heads * head_dim)

  int model_dim() const { return int(w_q.rows()); }
  int width() const { return n_heads * head_dim; }
};

/// Checks `w` against `shape` (check_mha_weights; an even head_dim, for the frequency pairs) and
/// widens the weights the conversion reads to double.
inline MhaInDouble mha_in_double(const MhaWeights& w, AttentionShape shape) {
  require<ShapeError>(shape.n_heads >= 1 && shape.head_dim >= 2 && shape.head_dim % 2 == 0,
                      "whisper_mla: need n_heads >= 1 and an even head_dim >= 2, got ", shape.n_heads, " and ", shape.head_dim);
  check_mha_weights(w, shape);
  MhaInDouble m;
  m.n_heads = shape.n_heads;
  m.head_dim = shape.head_dim;
  m.w_q = w.w_q.cast<double>();
  m.w_k = w.w_k.cast<double>();
  m.w_v = w.w_v.cast<double>();
  m.b_q = w.b_q.cast<double>();
  m.b_v = w.b_v.cast<double>();
  return m;
}

inline void check_calibration(const MhaInDouble& w, const Eigen::MatrixXd& x) {
  require<ShapeError>(x.rows() >= 1, "whisper_mla: calibration inputs are empty; give (tokens, d_model) rows");
  require<ShapeError>(x.cols() == w.model_dim(), "whisper_mla: calibration inputs have ", x.cols(), " columns, expected d_model = ",
                      w.model_dim());
}

inline Eigen::MatrixXd add_bias(Eigen::MatrixXd m, const Eigen::RowVectorXd& b) {
  if (b.size() > 0) m.rowwise() += b;
  return m;
}

inline Eigen::MatrixXd permute_columns(const Eigen::MatrixXd& m, const std::vector<int>& perm) {
  Eigen::MatrixXd out(m.rows(), Eigen::Index(perm.size()));
  for (std::size_t c = 0; c < perm.size(); ++c) out.col(Eigen::Index(c)) = m.col(perm[c]);
  return out;
}

}  // namespace detail

/// Which key pairs each head keeps (ascending pair indices per head). `calibration`
/// (tokens, d_model) is read by two_norm only.
inline std::vector<std::vector<int>> select_kept_pairs(const MhaWeights& mha, AttentionShape shape, int kept_pairs, KeepSelection how,
                                                       const Eigen::MatrixXd& calibration = {}) {
  const detail::MhaInDouble w = detail::mha_in_double(mha, shape);
  const int pairs = w.head_dim / 2;
  require<ShapeError>(kept_pairs >= 0 && kept_pairs <= pairs, "whisper_mla: kept_pairs = ", kept_pairs, " is out of range [0, head_dim / 2 = ",
                      pairs, "]");
  std::vector<std::vector<int>> kept(static_cast<std::size_t>(w.n_heads));
  if (how == KeepSelection::uniform) {
    for (auto& head : kept)
      for (int k = 0; k < kept_pairs; ++k) head.push_back(int((long(k) * pairs) / kept_pairs));
    return kept;
  }
  detail::check_calibration(w, calibration);
  const Eigen::MatrixXd q = detail::add_bias(calibration * w.w_q, w.b_q), k = calibration * w.w_k;
  for (int h = 0; h < w.n_heads; ++h) {
    std::vector<double> score(static_cast<std::size_t>(pairs));
    for (int p = 0; p < pairs; ++p) {
      const int c = h * w.head_dim + 2 * p;
      score[std::size_t(p)] = q.middleCols(c, 2).rowwise().norm().mean() * k.middleCols(c, 2).rowwise().norm().mean();
    }
    std::vector<int> order(static_cast<std::size_t>(pairs));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[std::size_t(a)] > score[std::size_t(b)]; });
    auto& head = kept[std::size_t(h)];
    head.assign(order.begin(), order.begin() + kept_pairs);
    std::sort(head.begin(), head.end());
  }
  return kept;
}

/// Kept pairs, per-head permutation and the full joint SVD; truncate() gives any rank cheaply.
class WhisperMlaDecomposition {
 public:
  WhisperMlaDecomposition(const MhaWeights& weights, AttentionShape shape, std::vector<std::vector<int>> kept)
      : mha_(detail::mha_in_double(weights, shape)), kept_(std::move(kept)) {
    const detail::MhaInDouble& w = mha_;
    require<ShapeError>(int(kept_.size()) == w.n_heads, "whisper_mla: ", kept_.size(), " kept-pair lists for ", w.n_heads, " heads");
    const int pairs = w.head_dim / 2;
    kept_dims_ = 2 * int(kept_.front().size());
    for (std::size_t h = 0; h < kept_.size(); ++h) {
      auto sorted = kept_[h];
      std::sort(sorted.begin(), sorted.end());
      require<ShapeError>(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), "whisper_mla: head ", h, " keeps a pair twice");
      require<ShapeError>(2 * int(sorted.size()) == kept_dims_, "whisper_mla: every head must keep the same number of pairs; head ", h,
                          " keeps ", sorted.size(), ", head 0 keeps ", kept_dims_ / 2);
      for (int p : sorted)
        require<ShapeError>(p >= 0 && p < pairs, "whisper_mla: head ", h, " keeps pair ", p, ", out of range [0, ", pairs, ")");
      kept_[h] = sorted;
    }
    // Per head: compressed dims ascending, then the kept pairs' dims.
    for (int h = 0; h < w.n_heads; ++h) {
      std::vector<bool> is_kept(static_cast<std::size_t>(w.head_dim), false);
      for (int p : kept_[std::size_t(h)]) is_kept[std::size_t(2 * p)] = is_kept[std::size_t(2 * p + 1)] = true;
      for (int d = 0; d < w.head_dim; ++d)
        if (!is_kept[std::size_t(d)]) perm_.push_back(h * w.head_dim + d);
      for (int p : kept_[std::size_t(h)]) {
        perm_.push_back(h * w.head_dim + 2 * p);
        perm_.push_back(h * w.head_dim + 2 * p + 1);
      }
    }
    const int nope = w.head_dim - kept_dims_;
    const Eigen::MatrixXd k_perm = detail::permute_columns(w.w_k, perm_);
    Eigen::MatrixXd joint(w.model_dim(), w.n_heads * nope + w.width());
    w_kp_.resize(w.model_dim(), w.n_heads * kept_dims_);
    for (int h = 0; h < w.n_heads; ++h) {
      joint.middleCols(h * nope, nope) = k_perm.middleCols(h * w.head_dim, nope);
      w_kp_.middleCols(h * kept_dims_, kept_dims_) = k_perm.middleCols(h * w.head_dim + nope, kept_dims_);
    }
    joint.rightCols(w.width()) = w.w_v;
    joint_norm_ = joint.norm();
    svd_.compute(joint, Eigen::ComputeThinU | Eigen::ComputeThinV);
  }

  /// Largest latent rank: min(d_model, n_heads * (2 head_dim - kept_dims)).
  int max_rank() const { return int(svd_.singularValues().size()); }
  int kept_dims() const { return kept_dims_; }
  const Eigen::VectorXd& singular_values() const { return svd_.singularValues(); }

  /// ||[W_kc W_v] - rank-r truncation||_F / ||[W_kc W_v]||_F.
  double weight_error(int rank) const {
    check_rank(rank);
    const auto& s = svd_.singularValues();
    return joint_norm_ > 0 ? std::sqrt(s.tail(s.size() - rank).squaredNorm()) / joint_norm_ : 0.0;
  }

  WhisperMlaWeights truncate(int rank, SigmaSplit split = SigmaSplit::symmetric) const {
    check_rank(rank);
    const detail::MhaInDouble& w = mha_;
    const int nope = w.head_dim - kept_dims_;
    WhisperMlaWeights out;
    out.n_heads = w.n_heads;
    out.head_dim = w.head_dim;
    out.kept_dims = kept_dims_;
    out.latent_rank = rank;
    out.kept_pairs = kept_;
    out.permutation = perm_;
    out.w_q = detail::permute_columns(w.w_q, perm_);
    if (w.b_q.size() > 0) {
      out.b_q.resize(w.width());
      for (int c = 0; c < w.width(); ++c) out.b_q[c] = w.b_q[perm_[std::size_t(c)]];
    }
    const Eigen::VectorXd s = svd_.singularValues().head(rank);
    const Eigen::VectorXd down = split == SigmaSplit::symmetric ? Eigen::VectorXd(s.cwiseSqrt()) : Eigen::VectorXd::Ones(rank);
    const Eigen::VectorXd up = split == SigmaSplit::symmetric ? Eigen::VectorXd(s.cwiseSqrt()) : s;
    out.w_dkv = svd_.matrixU().leftCols(rank) * down.asDiagonal();
    const Eigen::MatrixXd w_up = up.asDiagonal() * svd_.matrixV().leftCols(rank).transpose();  // (rank, K cols | V cols)
    out.w_uk = w_up.leftCols(w.n_heads * nope);
    out.w_uv = w_up.rightCols(w.width());
    out.w_kp = w_kp_;
    out.b_v = w.b_v;
    return out;
  }

 private:
  void check_rank(int rank) const {
    require<ShapeError>(rank >= 1 && rank <= max_rank(), "whisper_mla: latent rank ", rank, " is out of range [1, ", max_rank(),
                        "] (min(d_model, n_heads * (2 * head_dim - kept_dims)))");
  }

  detail::MhaInDouble mha_;
  std::vector<std::vector<int>> kept_;
  int kept_dims_ = 0;
  std::vector<int> perm_;
  Eigen::MatrixXd w_kp_;
  double joint_norm_ = 0;
  Eigen::BDCSVD<Eigen::MatrixXd> svd_;
};

struct WhisperMlaOptions {
  int kept_pairs = 2;  ///< frequency pairs per head kept uncompressed (Whisper-small in the paper: 2, i.e. 48 of 768 dims)
  int latent_rank = 96;
  KeepSelection selection = KeepSelection::uniform;
  SigmaSplit split = SigmaSplit::symmetric;
};

/// One-shot conversion; `calibration` (tokens, d_model) is needed for two_norm selection only.
inline WhisperMlaWeights convert_whisper_mla(const MhaWeights& w, AttentionShape shape, const WhisperMlaOptions& o,
                                             const Eigen::MatrixXd& calibration = {}) {
  return WhisperMlaDecomposition(w, shape, select_kept_pairs(w, shape, o.kept_pairs, o.selection, calibration))
      .truncate(o.latent_rank, o.split);
}

/// Relative Frobenius errors of a conversion on calibration inputs.
struct ConversionReport {
  int rank = 0;
  double key = 0;     ///< ||K^ - K|| / ||K||   (K^ un-permuted; kept dims are exact; K = x W_k, without the dropped key bias)
  double value = 0;   ///< ||V^ - V|| / ||V||
  double kv = 0;      ///< joint: sqrt(||dK||^2 + ||dV||^2) / sqrt(||K||^2 + ||V||^2); never rises with rank
  double output = 0;  ///< causal self-attention output over the calibration sequence, all heads
};

namespace detail {
/// Causal softmax attention per head in double: q, k (T, n_heads * dk), v (T, n_heads * dv).
inline Eigen::MatrixXd causal_attention(const Eigen::MatrixXd& q, const Eigen::MatrixXd& k, const Eigen::MatrixXd& v, int n_heads) {
  const int T = int(q.rows()), dk = int(q.cols()) / n_heads, dv = int(v.cols()) / n_heads;
  Eigen::MatrixXd out(T, n_heads * dv);
  for (int h = 0; h < n_heads; ++h) {
    Eigen::MatrixXd s = q.middleCols(h * dk, dk) * k.middleCols(h * dk, dk).transpose() / std::sqrt(double(dk));
    for (int i = 0; i < T; ++i) {
      const double top = s.row(i).head(i + 1).maxCoeff();
      s.row(i).head(i + 1) = (s.row(i).head(i + 1).array() - top).exp().matrix();
      s.row(i).head(i + 1) /= s.row(i).head(i + 1).sum();
      s.row(i).tail(T - i - 1).setZero();
    }
    out.middleCols(h * dv, dv) = s * v.middleCols(h * dv, dv);
  }
  return out;
}
}  // namespace detail

inline ConversionReport measure_conversion(const MhaWeights& mha, AttentionShape shape, const WhisperMlaWeights& c,
                                           const Eigen::MatrixXd& calibration) {
  const detail::MhaInDouble w = detail::mha_in_double(mha, shape);
  detail::check_calibration(w, calibration);
  require<ShapeError>(c.n_heads == w.n_heads && c.head_dim == w.head_dim && int(c.permutation.size()) == w.width(),
                      "whisper_mla: converted weights are for ", c.n_heads, " heads of ", c.head_dim, ", the MHA layer has ", w.n_heads,
                      " of ", w.head_dim);
  const Eigen::MatrixXd& x = calibration;
  const int nope = w.head_dim - c.kept_dims;
  const Eigen::MatrixXd q = detail::add_bias(x * w.w_q, w.b_q), k = x * w.w_k, v = detail::add_bias(x * w.w_v, w.b_v);
  // Converted keys in the permuted order, then back in the original order.
  const Eigen::MatrixXd lat = x * c.w_dkv, kp = x * c.w_kp;
  Eigen::MatrixXd k_perm(x.rows(), w.width());
  for (int h = 0; h < w.n_heads; ++h) {
    k_perm.middleCols(h * w.head_dim, nope) = lat * c.w_uk.middleCols(h * nope, nope);
    k_perm.middleCols(h * w.head_dim + nope, c.kept_dims) = kp.middleCols(h * c.kept_dims, c.kept_dims);
  }
  Eigen::MatrixXd k_hat(x.rows(), w.width());
  for (int col = 0; col < w.width(); ++col) k_hat.col(c.permutation[std::size_t(col)]) = k_perm.col(col);
  const Eigen::MatrixXd v_hat = detail::add_bias(lat * c.w_uv, c.b_v);
  const Eigen::MatrixXd q_perm = detail::add_bias(x * c.w_q, c.b_q);

  ConversionReport e;
  e.rank = c.latent_rank;
  const double dk2 = (k_hat - k).squaredNorm(), dv2 = (v_hat - v).squaredNorm();
  e.key = std::sqrt(dk2 / k.squaredNorm());
  e.value = std::sqrt(dv2 / v.squaredNorm());
  e.kv = std::sqrt((dk2 + dv2) / (k.squaredNorm() + v.squaredNorm()));
  // The MHA output with its key bias, if it has one (it cancels: the converted layer has none).
  const Eigen::MatrixXd k_biased = detail::add_bias(k, mha.b_k.cast<double>());
  const Eigen::MatrixXd out = detail::causal_attention(q, k_biased, v, w.n_heads);
  e.output = (detail::causal_attention(q_perm, k_perm, v_hat, w.n_heads) - out).norm() / out.norm();
  return e;
}

}  // namespace polyattn::convert
