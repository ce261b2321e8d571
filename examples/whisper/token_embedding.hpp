// The decoder's token embedding, (n_vocab, d), kept in the precision the model ships it in. It is
// also the tied output projection, so it is the largest matrix of the model (tiny.en: 51864 x
// 384, 40 MB in float16, 80 MB in float32) and every decoded token reads all of it:
//   row_into(token, out)   out (1, d) = E[token] in float (a lookup converts one row)
//   project(x, y)          y (n, n_vocab) = x (n, d) E^T, the logits, on Eigen's thread count
//
// A float16 model keeps float16 here: half the resident bytes, no conversion at load, and half
// the bytes each step's projection reads. Every float16 value converts to float exactly, and the
// products and sums are taken in float, as with a float32 copy of the same values: the logits
// differ from that copy's only by the order of the float sums.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "error.hpp"
#include "matrix.hpp"

namespace polyattn::whisper {

class TokenEmbedding {
 public:
  using HalfMatrix = Eigen::Matrix<Eigen::half, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  /// Vocabulary rows a projection converts and multiplies at a time: 128 x 384 floats (192 KiB)
  /// stay in L2 between the conversion and the product.
  static constexpr Eigen::Index kPanelRows = 128;

  TokenEmbedding() = default;
  explicit TokenEmbedding(RowMatrixXf values) : float_(std::move(values)) {}
  explicit TokenEmbedding(HalfMatrix values) : half_(std::move(values)), is_half_(true) {}

  Eigen::Index rows() const { return is_half_ ? half_.rows() : float_.rows(); }
  Eigen::Index cols() const { return is_half_ ? half_.cols() : float_.cols(); }
  bool is_half() const { return is_half_; }
  /// Resident bytes of the weights (not counting an as_float() copy).
  std::size_t bytes() const {
    return std::size_t(rows()) * std::size_t(cols()) * (is_half_ ? sizeof(Eigen::half) : sizeof(float));
  }

  /// out (1, d) = row `token`, converted to float. `token` must be in [0, rows()).
  template <class Out>
  void row_into(Eigen::Index token, Out&& out) const {
    if (is_half_)
      out = half_.row(token).template cast<float>();
    else
      out = float_.row(token);
  }

  /// y (n, n_vocab) = x (n, d) E^T. Panels of kPanelRows vocabulary rows, shared among Eigen's
  /// threads (OpenMP, as Eigen's own products are: one team, no second pool spinning against it);
  /// a float16 panel is converted into the thread's scratch, then multiplied by Eigen.
  void project(ConstMatrixRef x, MatrixRef y) const {
    if (x.cols() != cols() || y.rows() != x.rows() || y.cols() != rows())
      throw Error("token embedding: x (" + std::to_string(x.rows()) + "x" + std::to_string(x.cols()) + ") E^T with E (" +
                  std::to_string(rows()) + "x" + std::to_string(cols()) + ") into y (" + std::to_string(y.rows()) + "x" +
                  std::to_string(y.cols()) + ")");
    const Eigen::Index vocab = rows(), panels = (vocab + kPanelRows - 1) / kPanelRows;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(Eigen::nbThreads())
#endif
    for (Eigen::Index p = 0; p < panels; ++p) {
      const Eigen::Index first = p * kPanelRows, n = std::min(kPanelRows, vocab - first);
      if (is_half_) {
        thread_local RowMatrixXf panel;  // (kPanelRows, d): reused by every call on this thread
        panel = half_.middleRows(first, n).cast<float>();
        y.middleCols(first, n).noalias() = x * panel.transpose();
      } else {
        y.middleCols(first, n).noalias() = x * float_.middleRows(first, n).transpose();
      }
    }
  }

  /// The weights as float (an engine that multiplies float only: cuBLAS here). A float16
  /// embedding converts once, on first use, and keeps the copy.
  const RowMatrixXf& as_float() const {
    if (!is_half_) return float_;
    std::call_once(converted_->once, [&] { converted_->values = half_.cast<float>(); });
    return converted_->values;
  }

  friend bool operator==(const TokenEmbedding& a, const TokenEmbedding& b) {
    return a.is_half_ == b.is_half_ && (a.is_half_ ? a.half_ == b.half_ : a.float_ == b.float_);
  }

 private:
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
