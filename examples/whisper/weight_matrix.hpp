// A weight matrix W (rows, cols), row-major as PyTorch and CTranslate2 store it, kept in the
// precision the model ships it in: float16 stays float16, float32 (and bfloat16) are float.
//   project(x, y)          y (n, rows) = x (n, cols) W^T, on Eigen's thread count, in panels of W's
//                          rows, each multiplied by a PanelProduct (Eigen's by default; the
//                          oneDNN engine passes its sgemm, onednn_dense.hpp)
//   project_streamed(x, y) the same in one pass over W for a few rows of x (the logits of a step)
//   row_into(i, out)       out (1, cols) = W[i] in float (the token embedding's lookup)
//
// The token embedding is one (n_vocab, d: 51864 x 384 in tiny.en, 40 MB in float16) and so are
// the encoder's and the decoder MLP's linear layers. Keeping float16 halves their resident bytes
// and what a decoding step reads, and the load converts nothing. Every float16 value converts to
// float exactly, and the products and sums are taken in float, as with a float32 copy of the same
// values: results differ from that copy's only by the order of the float sums.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "error.hpp"
#include "half_to_float.hpp"
#include "matrix.hpp"
#include "stream_product.hpp"

namespace polyattn::whisper {

/// The product of one panel of W, on one thread: y (n, panel rows) = x (n, cols) P^T, with P
/// (panel rows, cols) float and row-major.
using PanelProduct = void (*)(ConstMatrixRef x, ConstMatrixRef panel, MatrixRef y);

inline void eigen_panel_product(ConstMatrixRef x, ConstMatrixRef panel, MatrixRef y) { y.noalias() = x * panel.transpose(); }

/// Rows of W a projection converts and multiplies at a time, at least: 128 x 384 floats
/// (192 KiB) stay in L2 between the conversion and the product. A tall x (an encoder's 1500
/// rows) takes panels of rows / threads instead, so that x is packed for few products.
inline constexpr Eigen::Index kPanelRows = 128;

/// Calls panel(first, n) for the panels [first, first + n) of W's `out` rows, shared among
/// `threads` OpenMP threads (Eigen's own products use OpenMP: one team, no second pool spinning
/// against it). Each call runs on one thread. The first exception a panel throws is rethrown
/// here, after the team has finished, since none may leave an OpenMP region.
template <class Panel>
void for_each_panel(Eigen::Index out, Eigen::Index x_rows, int threads, Panel&& panel) {
  const Eigen::Index panel_rows = x_rows > kPanelRows ? std::max(kPanelRows, (out + threads - 1) / threads) : kPanelRows;
  const Eigen::Index panels = (out + panel_rows - 1) / panel_rows;
  std::exception_ptr failure;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
  for (Eigen::Index p = 0; p < panels; ++p) {
    try {
      const Eigen::Index first = p * panel_rows;
      panel(first, std::min(panel_rows, out - first));
    } catch (...) {
#ifdef _OPENMP
#pragma omp critical(polyattn_whisper_panel_failure)
#endif
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

/// y (n, out) = x (n, in) W^T for a float W (out, in), in panels of W's rows (for_each_panel).
inline void project_float(ConstMatrixRef x, ConstMatrixRef w, MatrixRef y, PanelProduct product, int threads) {
  if (y.size() == 0) return;
  for_each_panel(w.rows(), x.rows(), threads,
                 [&](Eigen::Index first, Eigen::Index n) { product(x, w.middleRows(first, n), y.middleCols(first, n)); });
}

class WeightMatrix {
 public:
  using HalfMatrix = Eigen::Matrix<Eigen::half, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  WeightMatrix() = default;
  explicit WeightMatrix(RowMatrixXf values) : float_(std::move(values)) {}
  explicit WeightMatrix(HalfMatrix values) : half_(std::move(values)), is_half_(true) {}

  Eigen::Index rows() const { return is_half_ ? half_.rows() : float_.rows(); }
  Eigen::Index cols() const { return is_half_ ? half_.cols() : float_.cols(); }
  bool is_half() const { return is_half_; }
  /// Resident bytes of the weights (not counting an as_float() copy).
  std::size_t bytes() const {
    return std::size_t(rows()) * std::size_t(cols()) * (is_half_ ? sizeof(Eigen::half) : sizeof(float));
  }

  /// out (rows, cols) = W in float.
  template <class Out>
  void row_block_into(Out&& out) const {
    if (is_half_)
      out = half_.template cast<float>();
    else
      out = float_;
  }

  /// Rows [first, first + n) as a new float (n, cols) matrix: what a weight conversion reads
  /// (unlike as_float(), nothing is kept).
  RowMatrixXf float_rows(Eigen::Index first, Eigen::Index n) const {
    if (is_half_) return half_.middleRows(first, n).cast<float>();
    return float_.middleRows(first, n);
  }

  /// Rows [first, first + n) as a new matrix in this one's precision.
  WeightMatrix rows_copy(Eigen::Index first, Eigen::Index n) const {
    if (is_half_) return WeightMatrix(HalfMatrix(half_.middleRows(first, n)));
    return WeightMatrix(RowMatrixXf(float_.middleRows(first, n)));
  }

  /// W(r, c) in float; r in [0, rows()), c in [0, cols()).
  float value(Eigen::Index r, Eigen::Index c) const { return is_half_ ? float(half_(r, c)) : float_(r, c); }

  /// out (1, d) = row `token`, converted to float. `token` must be in [0, rows()).
  template <class Out>
  void row_into(Eigen::Index token, Out&& out) const {
    if (is_half_)
      out = half_.row(token).template cast<float>();
    else
      out = float_.row(token);
  }

  /// y (n, rows) = x (n, cols) W^T in panels of W's rows shared among Eigen's threads
  /// (for_each_panel), each multiplied by `product` on one thread; a float16 panel is first
  /// converted into that thread's scratch.
  void project(ConstMatrixRef x, MatrixRef y, PanelProduct product = eigen_panel_product) const {
    check_product(x, y);
    const int threads = Eigen::nbThreads();
    if (!is_half_) return project_float(x, float_, y, product, threads);
    if (y.size() == 0) return;
    for_each_panel(rows(), x.rows(), threads, [&](Eigen::Index first, Eigen::Index n) {
      // (panel rows, cols) in a buffer that only grows, reused by every call on this thread: a
      // decoding step's fc1 and fc2 panels (128 x 384 and 128 x 1536 floats in tiny) differ in
      // size, and resizing one matrix to each made and freed a 768 KiB block twice a step.
      thread_local Eigen::VectorXf scratch;
      if (scratch.size() < n * cols()) scratch.resize(n * cols());
      const Eigen::Map<RowMatrixXf> panel(scratch.data(), n, cols());
      half_to_float(half_.data() + first * cols(), n * cols(), scratch.data());
      product(x, panel, y.middleCols(first, n));
    });
  }

  /// The same as project() for up to kStreamMaxRows rows of x (a decoding step's logits: one row
  /// per sequence), in one pass over W that converts each float16 row in registers
  /// (stream_product.hpp): 2.6-3.7x faster on the tied logits. Each y value is one sum in a fixed
  /// order, whatever the other rows of x and the thread count. Other shapes take project().
  void project_streamed(ConstMatrixRef x, MatrixRef y) const {
    check_product(x, y);
    if (!stream_available(x.rows(), cols())) return project(x, y);
    const int threads = Eigen::nbThreads();
    if (is_half_)
      stream_project(x, half_.data(), rows(), cols(), y, threads);
    else
      stream_project(x, float_.data(), rows(), cols(), y, threads);
  }

  /// The float16 values (is_half() must hold).
  const HalfMatrix& half_values() const {
    if (!is_half_) throw Error("weight matrix: the values are not float16");
    return half_;
  }

  /// Rows [a; b; ...] of matrices of equal width: float16 when every part is, else float.
  static WeightMatrix stacked(const std::vector<const WeightMatrix*>& parts) {
    Eigen::Index rows = 0;
    bool half = true;
    for (const WeightMatrix* p : parts) rows += p->rows(), half = half && p->is_half_;
    const Eigen::Index cols = parts.front()->cols();
    RowMatrixXf f(half ? 0 : rows, cols);
    HalfMatrix h(half ? rows : 0, cols);
    Eigen::Index r = 0;
    for (const WeightMatrix* p : parts) {
      if (half)
        h.middleRows(r, p->rows()) = p->half_;
      else
        p->row_block_into(f.middleRows(r, p->rows()));
      r += p->rows();
    }
    return half ? WeightMatrix(std::move(h)) : WeightMatrix(std::move(f));
  }

  /// The weights as float (an engine that multiplies float only: cuBLAS here; the tests' double
  /// oracles). A float16 matrix converts once, on first use, and keeps the copy.
  const RowMatrixXf& as_float() const {
    if (!is_half_) return float_;
    std::call_once(converted_->once, [&] { converted_->values = half_.cast<float>(); });
    return converted_->values;
  }

  friend bool operator==(const WeightMatrix& a, const WeightMatrix& b) {
    return a.is_half_ == b.is_half_ && (a.is_half_ ? a.half_ == b.half_ : a.float_ == b.float_);
  }

 private:
  void check_product(ConstMatrixRef x, ConstMatrixRef y) const {
    if (x.cols() != cols() || y.rows() != x.rows() || y.cols() != rows())
      throw Error("weight matrix: x (" + std::to_string(x.rows()) + "x" + std::to_string(x.cols()) + ") W^T with W (" +
                  std::to_string(rows()) + "x" + std::to_string(cols()) + ") into y (" + std::to_string(y.rows()) + "x" +
                  std::to_string(y.cols()) + ")");
  }

  struct FloatCopy {
    std::once_flag once;
    RowMatrixXf values;
  };

  RowMatrixXf float_;
  HalfMatrix half_;
  bool is_half_ = false;
  std::shared_ptr<FloatCopy> converted_ = std::make_shared<FloatCopy>();
};

}  // namespace polyattn::whisper
