// The non-attention layers of Whisper, on row-major (tokens, features) matrices: the linear
// layers' weights, LayerNorm, exact GELU, im2col for the kernel-3 conv1d, sinusoids. Their products
// (linear layers, the conv) run on a Dense engine (dense.hpp).
#pragma once

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include <cmath>
#include <string>

#include "error.hpp"
#include "matrix.hpp"
#include "weight_matrix.hpp"

namespace polyattn::whisper {

// A linear layer y = x W^T + b. Weight: a float matrix (Linear: the weights the decoder's
// attention policies convert and read) or a WeightMatrix in the model's own precision
// (StoredLinear: the encoder's layers and the decoder's MLP, only ever multiplied).
template <class Weight>
struct BasicLinear {
  Weight weight;     // (out, in), as PyTorch and CTranslate2 store it
  RowVectorXf bias;  // (out); zeros where the model has none (Whisper's key projections)

  Eigen::Index in_features() const { return weight.cols(); }
  Eigen::Index out_features() const { return weight.rows(); }
};
using Linear = BasicLinear<RowMatrixXf>;
using StoredLinear = BasicLinear<WeightMatrix>;

struct LayerNorm {
  RowVectorXf gamma, beta;  // (features)
  float eps = 1e-5f;
};

// Normalises each row of x: (n, d), into y (n, d), any row stride.
inline void layer_norm_into(const Eigen::Ref<const RowMatrixXf>& x, const LayerNorm& ln, Eigen::Ref<RowMatrixXf> y) {
  const float inv_d = 1.0f / static_cast<float>(x.cols());
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    const auto row = x.row(i).array();
    const float mean = row.sum() * inv_d;
    const float var = (row - mean).square().sum() * inv_d;
    y.row(i) = ((row - mean) * (1.0f / std::sqrt(var + ln.eps))).matrix().cwiseProduct(ln.gamma) + ln.beta;
  }
}
inline RowMatrixXf layer_norm(const Eigen::Ref<const RowMatrixXf>& x, const LayerNorm& ln) {
  RowMatrixXf y(x.rows(), x.cols());
  layer_norm_into(x, ln, y);
  return y;
}

// Exact (erf) GELU, torch.nn.GELU's default, in place (any row stride).
inline void gelu_inplace(Eigen::Ref<RowMatrixXf> x) {
  x.array() = 0.5f * x.array() * (1.0f + (x.array() * static_cast<float>(M_SQRT1_2)).erf());
}

inline Eigen::Index conv_k3_out_rows(Eigen::Index t_in, int stride) { return t_in == 0 ? 0 : (t_in - 1) / stride + 1; }

// Conv1d with kernel 3, padding 1, is one product over im2col rows (Dense::conv1d_k3).
// x (T_in, C_in) time-major -> `cols`, a preallocated (T_out, 3 * C_in) block, every element
// written, T_out = (T_in - 1) / stride + 1, row t = [x[t*s - 1], x[t*s], x[t*s + 1]] (zeros
// outside). `weight` (C_out, 3 * C_in), column
// k * C_in + c holding PyTorch's weight[o][c][k] (conv_weight_k_major), is only checked here.
inline void im2col_k3_into(const Eigen::Ref<const RowMatrixXf>& x, const RowMatrixXf& weight, int stride, Eigen::Ref<RowMatrixXf> cols) {
  const Eigen::Index t_in = x.rows(), c_in = x.cols();
  if (weight.cols() != 3 * c_in)
    throw ModelError("conv1d_k3: weight has " + std::to_string(weight.cols()) + " columns, expected 3 x " +
                     std::to_string(c_in) + " input channels");
  const Eigen::Index t_out = conv_k3_out_rows(t_in, stride);
  if (cols.rows() != t_out || cols.cols() != 3 * c_in)
    throw Error("conv1d_k3: im2col block is " + std::to_string(cols.rows()) + "x" + std::to_string(cols.cols()) + ", expected " +
                std::to_string(t_out) + "x" + std::to_string(3 * c_in));
  for (Eigen::Index t = 0; t < t_out; ++t)
    for (Eigen::Index k = 0; k < 3; ++k) {
      const Eigen::Index src = t * stride + k - 1;
      if (src >= 0 && src < t_in)
        cols.block(t, k * c_in, 1, c_in) = x.row(src);
      else
        cols.block(t, k * c_in, 1, c_in).setZero();
    }
}

// PyTorch conv weight (C_out, C_in, 3), flattened row-major, -> (C_out, 3 * C_in) k-major.
inline RowMatrixXf conv_weight_k_major(const float* w, Eigen::Index c_out, Eigen::Index c_in) {
  RowMatrixXf out(c_out, 3 * c_in);
  for (Eigen::Index o = 0; o < c_out; ++o)
    for (Eigen::Index c = 0; c < c_in; ++c)
      for (Eigen::Index k = 0; k < 3; ++k) out(o, k * c_in + c) = w[(o * c_in + c) * 3 + k];
  return out;
}

// Whisper's encoder positions: (length, channels) = [sin(t * f_i), cos(t * f_i)] with
// f_i = exp(-i * ln(10000) / (channels/2 - 1)), i < channels/2 (computed in float like
// openai-whisper's sinusoids()).
inline RowMatrixXf sinusoids(Eigen::Index length, Eigen::Index channels) {
  if (channels < 4 || channels % 2 != 0)
    throw ModelError("sinusoids: channels must be even and >= 4, got " + std::to_string(channels));
  const Eigen::Index half = channels / 2;
  const float increment = std::log(10000.0f) / static_cast<float>(half - 1);
  RowMatrixXf pos(length, channels);
  for (Eigen::Index i = 0; i < half; ++i) {
    const float inv_timescale = std::exp(-increment * static_cast<float>(i));
    for (Eigen::Index t = 0; t < length; ++t) {
      const float x = static_cast<float>(t) * inv_timescale;
      pos(t, i) = std::sin(x);
      pos(t, half + i) = std::cos(x);
    }
  }
  return pos;
}

}  // namespace polyattn::whisper
