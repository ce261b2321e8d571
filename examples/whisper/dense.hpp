// Where the model's dense products run (the CLI's --device): every GEMM of the encoder, and of
// the decoder outside its attention policies, goes through a Dense engine.
//
//   EigenDense     Eigen GEMMs on the CPU (this header; the default everywhere)
//   CublasDense    cuBLAS on a CUDA device (cublas_dense.cuh, nvcc only; --device cuda)
//
// Two operations cover the model:
//   affine(x, W, b, y)               y (n, out) = x (n, in) W^T + b, W (out, in) row-major as
//                                    stored, b (out) or none; x and y may be row blocks of any
//                                    row stride. Linear layers, the conv stem (over im2col rows),
//                                    the tied logits projection.
//   bidirectional_attention(qkv, h)  the encoder's unmasked self-attention, (n, 3d) -> (n, d).
//
// W is a weight: the model's or a decoder policy's converted matrix. An engine may keep its own
// copy (CublasDense keeps a device copy, found by W's address), so a weight must stay at its
// address, unchanged, for the engine's lifetime; x, b and y are read or written at every call.
// The decoder's attention caches and the projections inside the library's cross-attention are
// not products of this interface: they run on the attention executor of the policy.
#pragma once

#include <Eigen/Core>

#include <cmath>
#include <string>

#include "error.hpp"
#include "layers.hpp"
#include "matrix.hpp"

namespace polyattn::whisper {

using polyattn::ConstMatrixRef;
using polyattn::MatrixRef;

// qkv must be (n, 3d) with d a multiple of n_heads.
inline void check_attention_input(const RowMatrixXf& qkv, int n_heads) {
  const Eigen::Index d = qkv.cols() / 3;
  if (n_heads <= 0 || d % n_heads != 0 || qkv.cols() != 3 * d)
    throw ModelError("encoder_self_attention: qkv has " + std::to_string(qkv.cols()) + " columns, not 3 x a multiple of " +
                     std::to_string(n_heads) + " heads");
}

// Encoder self-attention on Eigen: bidirectional over the 1500 frames of a window, nothing
// cached. This is GEMM work (per head, (1500, 64) x (64, 1500) scores and (1500, 1500) x (1500,
// 64) outputs), so it stays on GEMMs rather than polyattn's decode kernels, which walk the keys
// once per query row; measured on tiny.en, Attention<Mha, Nhd, CpuSimd>::prefill with
// Mask::full is slower (see the README). qkv: (n, 3d) = [q | k | v]; returns (n, d).
inline RowMatrixXf encoder_self_attention(const RowMatrixXf& qkv, int n_heads) {
  check_attention_input(qkv, n_heads);
  const Eigen::Index d = qkv.cols() / 3, n = qkv.rows(), dh = d / n_heads;
  // Whisper scales q and k by dh^-1/4 each; one 1/sqrt(dh) on the scores is the same.
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  RowMatrixXf out(n, d), scores(n, n);
  const RowMatrixXf q = qkv.leftCols(d) * scale;
  for (int h = 0; h < n_heads; ++h) {
    scores.noalias() = q.middleCols(h * dh, dh) * qkv.middleCols(d + h * dh, dh).transpose();  // (n, n)
    for (Eigen::Index i = 0; i < n; ++i) {
      auto row = scores.row(i);
      row = (row.array() - row.maxCoeff()).exp().matrix();
      row /= row.sum();
    }
    out.middleCols(h * dh, dh).noalias() = scores * qkv.middleCols(2 * d + h * dh, dh);
  }
  return out;
}

class Dense {
 public:
  virtual ~Dense() = default;
  // "eigen (CPU)", "cublas (GPU 0: NVIDIA H100 ...)": printed by the CLI.
  virtual std::string name() const = 0;
  virtual void affine(ConstMatrixRef x, const RowMatrixXf& w, const RowVectorXf* bias, MatrixRef y) = 0;
  virtual RowMatrixXf bidirectional_attention(const RowMatrixXf& qkv, int n_heads) = 0;

  // x: (n, in) -> (n, out) = x W^T + b.
  RowMatrixXf linear(ConstMatrixRef x, const Linear& l) {
    RowMatrixXf y(x.rows(), l.out_features());
    linear_into(x, l, y);
    return y;
  }
  // The same into a preallocated (n, out) block (any row stride).
  void linear_into(ConstMatrixRef x, const Linear& l, MatrixRef y) {
    check_shapes(x, l.weight, &l.bias, y);
    affine(x, l.weight, &l.bias, y);
  }
  // Conv1d with kernel 3, padding 1, as one product over im2col rows (layers.hpp conv1d_k3).
  RowMatrixXf conv1d_k3(ConstMatrixRef x, const RowMatrixXf& weight, const RowVectorXf& bias, int stride) {
    const RowMatrixXf cols = im2col_k3(x, weight, stride);
    RowMatrixXf y(cols.rows(), weight.rows());
    check_shapes(cols, weight, &bias, y);
    affine(cols, weight, &bias, y);
    return y;
  }
  // x: (n, in) -> (n, out) = x W^T, for the tied output projection (W: the token embedding).
  RowMatrixXf project(ConstMatrixRef x, const RowMatrixXf& w) {
    RowMatrixXf y(x.rows(), w.rows());
    check_shapes(x, w, nullptr, y);
    affine(x, w, nullptr, y);
    return y;
  }

 private:
  // Every engine may assume these: x (n, in), W (out, in), b (out) or none, y (n, out).
  static void check_shapes(ConstMatrixRef x, const RowMatrixXf& w, const RowVectorXf* bias, ConstMatrixRef y) {
    if (x.cols() != w.cols() || y.rows() != x.rows() || y.cols() != w.rows())
      throw Error("dense: x (" + std::to_string(x.rows()) + "x" + std::to_string(x.cols()) + ") W^T with W (" +
                  std::to_string(w.rows()) + "x" + std::to_string(w.cols()) + ") into y (" + std::to_string(y.rows()) + "x" +
                  std::to_string(y.cols()) + ")");
    if (bias && bias->size() != w.rows())
      throw Error("dense: bias of " + std::to_string(bias->size()) + " for " + std::to_string(w.rows()) + " outputs");
  }
};

// Eigen on the CPU; threads: Eigen's (OpenMP) global setting.
class EigenDense final : public Dense {
 public:
  std::string name() const override { return "eigen (CPU)"; }
  void affine(ConstMatrixRef x, const RowMatrixXf& w, const RowVectorXf* bias, MatrixRef y) override {
    y.noalias() = x * w.transpose();
    if (bias) y.rowwise() += *bias;
  }
  RowMatrixXf bidirectional_attention(const RowMatrixXf& qkv, int n_heads) override { return encoder_self_attention(qkv, n_heads); }
};

// The engine of every call that names none. Stateless.
inline Dense& eigen_dense() {
  static EigenDense engine;
  return engine;
}

}  // namespace polyattn::whisper
