// Where the model's dense products run (the CLI's --device): every GEMM of the encoder, and of
// the decoder outside its attention policies, goes through a Dense engine.
//
//   EigenDense     Eigen GEMMs on the CPU (this header)
//   OnednnDense    oneDNN's sgemm on the CPU (onednn_dense.hpp; the CLI's and default_dense())
//   OnednnInt8Dense  the stored linear layers in int8 on the CPU, the rest as OnednnDense
//                    (onednn_int8_dense.hpp; the CLI's --compute-type int8)
//   OnednnBf16Dense  the same in bfloat16 (onednn_bf16_dense.hpp; --compute-type bfloat16)
//   CublasDense    cuBLAS on a CUDA device (cublas_dense.cuh, nvcc only; --device cuda)
//
// Four operations cover the model:
//   affine(x, W, b, y)               y (n, out) = x (n, in) W^T + b, W (out, in) row-major float,
//                                    b (out) or none; x and y may be row blocks of any row
//                                    stride. The decoder's attention projections, the conv stem.
//   stored_affine(x, W, b, y)        the same with W a WeightMatrix in the precision the model
//                                    ships it in (weight_matrix.hpp): the encoder's layers and
//                                    the decoder's MLP. Its own panel kernel, unless the engine
//                                    runs it elsewhere.
//   logits(x, E, y)                  y (n, n_vocab) = x (n, d) E^T with E the tied token embedding
//                                    (a WeightMatrix): on the CPU streamed for the few rows of a
//                                    decoding step (WeightMatrix::project_streamed).
//   bidirectional_attention_into(qkv, h, out)  the encoder's unmasked self-attention, (n, 3d) -> (n, d):
//                                    polyattn's uncached attention on CpuSimd unless the engine
//                                    runs it elsewhere (CublasDense, on its device).
//
// W is a weight: the model's or a decoder policy's converted matrix. An engine may keep its own
// copy, found by W's address (CublasDense a device copy, the int8 and bfloat16 engines rounded
// ones; converted_weights.hpp), so a weight must stay at its address, unchanged, for the
// engine's lifetime; x, b and y are read or written at every call.
// The decoder's attention caches and the projections inside the library's cross-attention are
// not products of this interface: they run on the attention executor of the policy.
#pragma once

#include <Eigen/Core>

#include <memory>
#include <string>
#include <type_traits>

#include <polyattn/exec/cpu/cpu_simd.hpp>
#include <polyattn/uncached_attention.hpp>

#include "error.hpp"
#include "layers.hpp"
#include "matrix.hpp"
#include "openmp_team.hpp"
#include "weight_matrix.hpp"

namespace polyattn::whisper {

using polyattn::ConstMatrixRef;
using polyattn::MatrixRef;

// qkv must be (n, 3d) with d a multiple of n_heads.
inline void check_attention_input(ConstMatrixRef qkv, int n_heads) {
  const Eigen::Index d = qkv.cols() / 3;
  if (n_heads <= 0 || d % n_heads != 0 || qkv.cols() != 3 * d)
    throw ModelError("bidirectional_attention: qkv has " + std::to_string(qkv.cols()) + " columns, not 3 x a multiple of " +
                     std::to_string(n_heads) + " heads");
}

class Dense {
 public:
  virtual ~Dense() = default;
  // "eigen (CPU)", "cublas (GPU 0: NVIDIA H100 ...)": printed by the CLI.
  virtual std::string name() const = 0;
  virtual void affine(ConstMatrixRef x, const RowMatrixXf& w, const RowVectorXf* bias, MatrixRef y) = 0;
  // The same with W as the model ships it (weight_matrix.hpp), shapes checked: on the CPU, W's
  // own panel kernel, unless the engine multiplies elsewhere.
  virtual void stored_affine(ConstMatrixRef x, const WeightMatrix& w, const RowVectorXf* bias, MatrixRef y) {
    w.project(x, y);
    if (bias) y.rowwise() += *bias;
  }
  // The same for the tied logits, on the CPU streamed when x has few rows: x is one row per
  // sequence at each decoding step, and the 40 MB of tiny.en's float16 embedding are most of
  // what a step reads. Only the logits: streaming the MLP too would change its sums' order,
  // which slim attention's V = K W_k^-1 W_v amplifies (cond(W_k) reaches 2.4e6 in tiny.en), and
  // moves SlimK's beam scores (whisper.espeak; examples/whisper/README.md).
  virtual void logits(ConstMatrixRef x, const WeightMatrix& e, MatrixRef y) { e.project_streamed(x, y); }
  // qkv: (n, 3d) = [q | k | v], heads adjacent in each; returns (n, d). Bidirectional over the
  // 1500 frames of a window, nothing cached: the library's uncached attention, whose query
  // blocks keep the scores in L1 (exec/cpu/attend_block.hpp), on as many threads as Eigen's GEMMs.
  // Into a preallocated (n, d) block `out`.
  virtual void bidirectional_attention_into(ConstMatrixRef qkv, int n_heads, MatrixRef out) {
    check_attention_input(qkv, n_heads);
    const Eigen::Index d = qkv.cols() / 3;
    check_attention_output(qkv, out);
    if (!cpu_ || cpu_->threads() != Eigen::nbThreads()) cpu_ = std::make_unique<exec::CpuSimd>(openmp_team(Eigen::nbThreads()));
    const int head_dim = int(d / n_heads);
    polyattn::attention(*cpu_, qkv.leftCols(d), qkv.middleCols(d, d), qkv.rightCols(d), {n_heads, n_heads, head_dim}, Mask::full, out);
  }
  RowMatrixXf bidirectional_attention(ConstMatrixRef qkv, int n_heads) {
    RowMatrixXf out(qkv.rows(), qkv.cols() / 3);
    bidirectional_attention_into(qkv, n_heads, out);
    return out;
  }

  // x: (n, in) -> (n, out) = x W^T + b (a Linear or a StoredLinear).
  template <class Weight>
  RowMatrixXf linear(ConstMatrixRef x, const BasicLinear<Weight>& l) {
    RowMatrixXf y(x.rows(), l.out_features());
    linear_into(x, l, y);
    return y;
  }
  // The same into a preallocated (n, out) block (any row stride).
  template <class Weight>
  void linear_into(ConstMatrixRef x, const BasicLinear<Weight>& l, MatrixRef y) {
    check_shapes(x, l.weight.rows(), l.weight.cols(), &l.bias, y);
    if constexpr (std::is_same_v<Weight, WeightMatrix>)
      stored_affine(x, l.weight, &l.bias, y);
    else
      affine(x, l.weight, &l.bias, y);
  }
  // Conv1d with kernel 3, padding 1, as one product over im2col rows (layers.hpp conv1d_k3).
  RowMatrixXf conv1d_k3(ConstMatrixRef x, const RowMatrixXf& weight, const RowVectorXf& bias, int stride) {
    RowMatrixXf cols(conv_k3_out_rows(x.rows(), stride), 3 * x.cols()), y(cols.rows(), weight.rows());
    conv1d_k3_into(x, weight, bias, stride, cols, y);
    return y;
  }
  // The same with the im2col rows in a preallocated (T_out, 3 * C_in) block `cols`, into a
  // preallocated (T_out, C_out) block `y`.
  void conv1d_k3_into(ConstMatrixRef x, const RowMatrixXf& weight, const RowVectorXf& bias, int stride, MatrixRef cols, MatrixRef y) {
    im2col_k3_into(x, weight, stride, cols);
    check_shapes(cols, weight.rows(), weight.cols(), &bias, y);
    affine(cols, weight, &bias, y);
  }
  // x: (n, d) -> (n, n_vocab) = x E^T, the tied output projection (the logits).
  RowMatrixXf project(ConstMatrixRef x, const WeightMatrix& e) {
    RowMatrixXf y(x.rows(), e.rows());
    project_into(x, e, y);
    return y;
  }
  // The same into a preallocated (n, n_vocab) block (any row stride).
  void project_into(ConstMatrixRef x, const WeightMatrix& e, MatrixRef y) {
    check_shapes(x, e.rows(), e.cols(), nullptr, y);
    logits(x, e, y);
  }

 protected:
  // Every engine may assume these: x (n, in), W (out, in), b (out) or none, y (n, out). The
  // public products check them; an engine whose stored_affine does not end in W's own checked
  // product (WeightMatrix::project) checks them there too, since it may be called directly.
  static void check_shapes(ConstMatrixRef x, Eigen::Index w_rows, Eigen::Index w_cols, const RowVectorXf* bias, ConstMatrixRef y) {
    if (x.cols() != w_cols || y.rows() != x.rows() || y.cols() != w_rows)
      throw Error("dense: x (" + std::to_string(x.rows()) + "x" + std::to_string(x.cols()) + ") W^T with W (" +
                  std::to_string(w_rows) + "x" + std::to_string(w_cols) + ") into y (" + std::to_string(y.rows()) + "x" +
                  std::to_string(y.cols()) + ")");
    if (bias && bias->size() != w_rows)
      throw Error("dense: bias of " + std::to_string(bias->size()) + " for " + std::to_string(w_rows) + " outputs");
  }
  static void check_attention_output(ConstMatrixRef qkv, ConstMatrixRef out) {
    if (out.rows() != qkv.rows() || out.cols() != qkv.cols() / 3)
      throw Error("bidirectional_attention: output is " + std::to_string(out.rows()) + "x" + std::to_string(out.cols()) + " for qkv " +
                  std::to_string(qkv.rows()) + "x" + std::to_string(qkv.cols()));
  }

 private:
  std::unique_ptr<exec::CpuSimd> cpu_;  // bidirectional_attention's executor, made on first use
};

// Eigen on the CPU; threads: Eigen's (OpenMP) global setting.
class EigenDense final : public Dense {
 public:
  std::string name() const override { return "eigen (CPU)"; }
  void affine(ConstMatrixRef x, const RowMatrixXf& w, const RowVectorXf* bias, MatrixRef y) override {
    y.noalias() = x * w.transpose();
    if (bias) y.rowwise() += *bias;
  }
};

}  // namespace polyattn::whisper
