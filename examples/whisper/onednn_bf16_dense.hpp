// The CPU engine of `--compute-type bfloat16`: the model's linear layers (stored_affine: the
// encoder's projections and MLP, the decoder's MLP and the attention projections its policies
// use as they are) multiply bfloat16 operands with float accumulation, by oneDNN's matmul
// primitive, which takes AMX or AVX512-BF16 where the CPU has them. Everything else stays
// float32, as in OnednnDense: the conv stem and the converted policy weights that are float
// (affine), the tied logits (streamed from float16, bound by memory, not by arithmetic), and
// every attention.
//
// Rounding: W is rounded to bfloat16 once, on first use, and the copy kept (by W's address, under
// converted_weights.hpp's rule); x is rounded at every call. Each rounding is to nearest even,
// a relative error of at most 2^-8, so each product x_j w_j is off by at most (2^-7 + 2^-16)
// |x_j w_j|, and the sum adds float's accumulation error (tests/whisper/dense_engine_checks.hpp
// checks that bound). Against float32 this changes the numbers, and so may change tokens: the
// example's README reports the agreement.
//
// W (out, in) row-major is the matmul's weights (in, out) with strides {1, in}: no reorder. The
// primitives are made once per shape (M, N, K and the row strides) and kept. oneDNN's OpenMP team
// is the engine's thread count (Eigen::nbThreads(), the CLI's --threads), set for the call only.
// One call at a time, as the model makes them (the rounded weights and primitives are shared).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <Eigen/Core>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "converted_weights.hpp"
#include "error.hpp"
#include "matrix.hpp"
#include "onednn_dense.hpp"
#include "weight_matrix.hpp"

namespace polyattn::whisper {

class OnednnBf16Dense final : public OnednnDense {
 public:
  using Bf16Matrix = Eigen::Matrix<Eigen::bfloat16, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  OnednnBf16Dense() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  std::string name() const override { return "onednn bfloat16 (CPU)"; }

  /// Whether oneDNN has a bfloat16 matmul for this CPU (oneDNN 2.6: AVX-512 and later, not AVX2);
  /// where it has none, stored_affine throws saying so.
  static bool supported() {
    using dt = dnnl::memory::data_type;
    try {
      const dnnl::engine cpu(dnnl::engine::kind::cpu, 0);
      const dnnl::memory::desc x({1, 1}, dt::bf16, {1, 1}), w({1, 1}, dt::bf16, {1, 1}), y({1, 1}, dt::f32, {1, 1});
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(x, w, y), cpu);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }

  void stored_affine(ConstMatrixRef x, const WeightMatrix& w, const RowVectorXf* bias, MatrixRef y) override {
    check_shapes(x, w.rows(), w.cols(), bias, y);  // the matmul's descriptors take K from x, N from W
    if (y.size() == 0) return;
    const Bf16Matrix& wb = rounded(w);
    const Bf16Matrix xb = x.cast<Eigen::bfloat16>();  // (n, in), rounded to nearest even
    matmul(xb, wb, y);
    if (bias) y.rowwise() += *bias;
  }

  /// W rounded to bfloat16, made on first use (what stored_affine multiplies).
  const Bf16Matrix& rounded(const WeightMatrix& w) {
    return weights_.get(&w, WeightFingerprint::of(w), [&] { return Bf16Matrix(w.float_rows(0, w.rows()).cast<Eigen::bfloat16>()); });
  }

 private:
  // oneDNN's OpenMP team size for one call: the calling task's setting, restored after.
  struct TeamSize {
#ifdef _OPENMP
    explicit TeamSize(int threads) : previous(omp_get_max_threads()) { omp_set_num_threads(threads); }
    ~TeamSize() { omp_set_num_threads(previous); }
    int previous;
#else
    explicit TeamSize(int) {}
#endif
  };

  using Shape = std::tuple<Eigen::Index, Eigen::Index, Eigen::Index, Eigen::Index>;  // M, N, K, row stride of y

  // y (n, out) = xb (n, in) wb^T, both bfloat16, accumulated and written in float.
  void matmul(const Bf16Matrix& xb, const Bf16Matrix& wb, MatrixRef y) {
    using dt = dnnl::memory::data_type;
    const dnnl::memory::dim M = xb.rows(), K = xb.cols(), N = wb.rows(), ldy = y.outerStride();
    const dnnl::memory::desc src({M, K}, dt::bf16, {K, 1}), weights({K, N}, dt::bf16, {1, K}), dst({M, N}, dt::f32, {ldy, 1});
    try {
      dnnl::matmul& primitive = primitive_for({M, N, K, ldy}, src, weights, dst);
      dnnl::memory src_mem(src, engine_, const_cast<Eigen::bfloat16*>(xb.data()));
      dnnl::memory weights_mem(weights, engine_, const_cast<Eigen::bfloat16*>(wb.data()));
      dnnl::memory dst_mem(dst, engine_, y.data());
      const TeamSize team(Eigen::nbThreads());
      primitive.execute(stream_, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, weights_mem}, {DNNL_ARG_DST, dst_mem}});
      stream_.wait();
    } catch (const dnnl::error& e) {
      throw Error(std::string("oneDNN bfloat16 matmul failed (") + e.what() +
                  "); this CPU may have no bfloat16 support in oneDNN: use --compute-type float32");
    }
  }

  dnnl::matmul& primitive_for(const Shape& shape, const dnnl::memory::desc& src, const dnnl::memory::desc& weights,
                              const dnnl::memory::desc& dst) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = primitives_.find(shape);
    if (it == primitives_.end())
      it = primitives_.emplace(shape, dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), engine_))).first;
    return it->second;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::mutex mutex_;  // guards primitives_
  ConvertedWeights<Bf16Matrix> weights_{"onednn bfloat16"};
  std::map<Shape, dnnl::matmul> primitives_;
};

}  // namespace polyattn::whisper
