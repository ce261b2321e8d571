// Offline conversion of an MHA layer to slim attention's K-only cache (seed: slim-attention).
//   V = X W_v = K W_k^-1 W_v = K W_kv     (W_kv: (e, e); head i's values are K W_kv[:, i])
// computed in double: an LU solve when W_k is square (e = d), the right inverse
// W_k^+ = W_k^T (W_k W_k^T)^-1 (through the SVD, which is better conditioned than forming
// W_k W_k^T) when e > d. Biases: b_v folds into the output bias (softmax weights sum to 1:
// b_o' = b_v W_o + b_o); b_k is dropped (it shifts every score of a query by the same amount),
// which is only valid without RoPE between projection and dot product.
// The float error of V grows with cond(W_k) (roughly 0.1 * eps * cond): the conversion measures
// cond(W_k) and max|W_kv| and refuses what the storage type cannot hold.
#pragma once

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include <Eigen/Core>
#include <Eigen/LU>
#include <Eigen/SVD>

#include "polyattn/convert/mha_weights.hpp"
#include "polyattn/core/error.hpp"

namespace polyattn {

/// What one converted layer measured.
struct SlimKReport {
  int layer = 0;
  int model_dim = 0, width = 0;   // W_k is (model_dim, width)
  double cond_k = 0;              // sigma_max / sigma_min of W_k
  double max_abs_w_kv = 0;
  double predicted_relative_error = 0;  // 0.1 * eps(storage) * cond_k, the seed's rule of thumb
  bool right_inverse = false;     // W_k not square: W_kv = W_k^+ W_v
  bool dropped_key_bias = false;
  std::string storage;

  std::string summary() const {
    std::ostringstream s;
    s << "layer " << layer << ": W_k " << model_dim << "x" << width << (right_inverse ? " (right inverse)" : "")
      << ", cond(W_k) = " << cond_k << ", max|W_kv| = " << max_abs_w_kv << ", predicted relative error in " << storage
      << " = " << predicted_relative_error;
    return s.str();
  }
};

struct SlimKOptions {
  int layer = 0;                     ///< named in reports and errors
  bool rope = false;                 ///< RoPE between projection and dot product: b_k cannot be dropped
  double max_predicted_error = 1e-2; ///< refuse when 0.1 * eps(storage) * cond(W_k) exceeds this
};

/// Weights of a slim (K-only) layer: cache k = x W_k (no bias); queries and W_o as in MHA.
struct SlimKWeights {
  RowMatrixXf w_kv;          // (e, e)
  Eigen::RowVectorXf b_o;    // (d): b_v W_o + b_o
  SlimKReport report;
};

template <class T>
std::string storage_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, Eigen::half>) return "half";
  else if constexpr (std::is_same_v<T, Eigen::bfloat16>) return "bfloat16";
  else return "storage type";
}

/// W_k^-1 rhs for W_k (d, e), e >= d (the right inverse when e > d), in double, with the checks
/// and figures of a conversion. rhs is (d, n). Used for W_kv = W_k^-1 W_v and for the hybrid
/// cross-attention cache (other layers' W_k, W_v re-expressed on layer 1's keys).
template <class Storage = float>
std::pair<RowMatrixXf, SlimKReport> apply_key_inverse(const RowMatrixXf& w_k, const RowMatrixXf& rhs, const SlimKOptions& options = {}) {
  using Eigen::MatrixXd;
  const int d = int(w_k.rows()), e = int(w_k.cols());
  const int layer = options.layer;
  require<ShapeError>(rhs.rows() == d, "layer ", layer, ": W_k is ", d, " x ", e, " but the matrix to map has ", rhs.rows(),
                      " rows, expected ", d);
  require<ConversionError>(e >= d, "layer ", layer, ": W_k is ", d, " x ", e, " with e < d, so keys do not determine x and V ",
                           "cannot be computed from K; use XCache");
  SlimKReport report;
  report.layer = layer;
  report.model_dim = d;
  report.width = e;
  report.right_inverse = e > d;
  report.storage = storage_name<Storage>();

  const MatrixXd wk = w_k.cast<double>(), b = rhs.cast<double>();
  Eigen::BDCSVD<MatrixXd> svd(wk, report.right_inverse ? (Eigen::ComputeThinU | Eigen::ComputeThinV) : 0);
  const auto& sigma = svd.singularValues();  // descending, d of them
  const double s_max = sigma(0), s_min = sigma(d - 1);
  report.cond_k = s_min > 0 ? s_max / s_min : std::numeric_limits<double>::infinity();
  require<ConversionError>(std::isfinite(report.cond_k) && report.cond_k < 1e13, "layer ", layer,
                           ": W_k is singular (cond(W_k) = ", report.cond_k, ", sigma_min = ", s_min, ", sigma_max = ", s_max,
                           "); V cannot be computed from K");
  const double eps = double(std::numeric_limits<Storage>::epsilon());
  report.predicted_relative_error = 0.1 * eps * report.cond_k;
  require<ConversionError>(report.predicted_relative_error <= options.max_predicted_error, "layer ", layer,
                           ": W_k is too ill-conditioned for ", report.storage, ": cond(W_k) = ", report.cond_k,
                           " predicts a relative error of ", report.predicted_relative_error, " (0.1 * eps * cond), above ",
                           options.max_predicted_error);

  MatrixXd out;
  if (report.right_inverse)  // W_k^+ = V diag(1/sigma) U^T, (e, d)
    out = svd.matrixV() * (sigma.cwiseInverse().asDiagonal() * (svd.matrixU().transpose() * b));
  else
    out = wk.partialPivLu().solve(b);
  report.max_abs_w_kv = out.cwiseAbs().maxCoeff();
  const double limit = double(std::numeric_limits<Storage>::max());
  require<ConversionError>(std::isfinite(report.max_abs_w_kv) && report.max_abs_w_kv <= limit, "layer ", layer,
                           ": max|W_kv| = ", report.max_abs_w_kv, " exceeds the largest ", report.storage, " (", limit,
                           "); cond(W_k) = ", report.cond_k);
  return {out.cast<float>(), report};
}

/// Converts one MHA layer. `Storage` is the type W_kv (and the cache) will be stored in: the
/// conversion refuses when max|W_kv| exceeds its range or its precision cannot hold the result
/// to `max_predicted_error` given cond(W_k). The returned W_kv is float either way.
template <class Storage = float>
SlimKWeights convert_to_slim_k(const MhaWeights& w, const SlimKOptions& options = {}) {
  const int d = w.model_dim(), e = w.width();
  const int layer = options.layer;
  require<ShapeError>(w.w_k.rows() == d && w.w_k.cols() == e && w.w_v.rows() == d && w.w_v.cols() == e &&
                          w.w_o.rows() == e && w.w_o.cols() == d,
                      "layer ", layer, ": W_q, W_k, W_v must be (d, e) and W_o (e, d); got W_k ", w.w_k.rows(), "x",
                      w.w_k.cols(), ", W_v ", w.w_v.rows(), "x", w.w_v.cols(), ", W_o ", w.w_o.rows(), "x", w.w_o.cols());
  detail::check_bias(w.b_k, e, "b_k");
  detail::check_bias(w.b_v, e, "b_v");
  detail::check_bias(w.b_o, d, "b_o");
  const bool has_key_bias = w.b_k.size() > 0 && w.b_k.cwiseAbs().maxCoeff() != 0.0f;
  require<ConversionError>(!(options.rope && has_key_bias), "layer ", layer,
                           ": W_k has a bias and the model uses RoPE; the key bias only cancels without RoPE");
  SlimKWeights out;
  std::tie(out.w_kv, out.report) = apply_key_inverse<Storage>(w.w_k, w.w_v, options);
  out.report.dropped_key_bias = has_key_bias;
  const Eigen::RowVectorXd b_v = bias_or_zero(w.b_v, e).cast<double>();
  out.b_o = (b_v * w.w_o.cast<double>() + bias_or_zero(w.b_o, d).cast<double>()).cast<float>();
  return out;
}

}  // namespace polyattn
