// The CPU engine of the CLI and of every call that names none (default_dense()): oneDNN's sgemm
// (libdnnl, Debian's libdnnl-dev) for every product of the encoder and the decoder, in the panel
// scheme of weight_matrix.hpp. oneDNN picks its kernel for the CPU at run time (AVX2, AVX-512);
// the arithmetic is float32 multiply and add, as in EigenDense (dense.hpp). The tied logits of a
// decoding step keep their one-pass stream (Dense::logits), which reads float16 directly.
//
// Panels rather than one sgemm over all of W: a float16 W is converted a panel at a time into
// L2-sized scratch (no float copy of the weights is kept), and the OpenMP team that splits W is
// the only one, so oneDNN never starts a second. On 2 threads of a Zen 4 EPYC the encoder's
// products (1500 rows of x) ran 1.24-1.6x faster than Eigen's in the same scheme; on 2 threads of
// the Intel Xeon (AVX-512, AMX) only 1.18-1.26x (examples/whisper/README.md, compute types).
#pragma once

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <string>

#include "dense.hpp"
#include "error.hpp"
#include "weight_matrix.hpp"

namespace polyattn::whisper {

// c (m, n) = a (m, k) op(b) by dnnl_sgemm on the calling thread, row-major throughout (each
// operand keeps its own row stride); op(b) = b (k, n) for transb 'N', b^T for b (n, k) for 'T'.
inline void sgemm_on_this_thread(char transb, Eigen::Index m, Eigen::Index n, Eigen::Index k, const float* a, Eigen::Index lda,
                                 const float* b, Eigen::Index ldb, float* c, Eigen::Index ldc) {
#ifdef _OPENMP
  // This task's own thread setting (an OpenMP ICV is per task): a team of one thread is not an
  // active region, and oneDNN would otherwise start a team of its own inside it.
  omp_set_num_threads(1);
#endif
  const dnnl_status_t status = dnnl_sgemm('N', transb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  if (status != dnnl_success) throw Error(std::string("oneDNN sgemm failed: ") + dnnl_status2str(status));
}

// A PanelProduct (weight_matrix.hpp): y (n, panel rows) = x (n, cols) P^T on the calling thread.
inline void onednn_panel_product(ConstMatrixRef x, ConstMatrixRef panel, MatrixRef y) {
  sgemm_on_this_thread('T', x.rows(), panel.rows(), x.cols(), x.data(), x.outerStride(), panel.data(), panel.outerStride(), y.data(),
                       y.outerStride());
}

// y (n, out) = x (n, in) W for W (in, out) row-major, by sgemm in panels of W's columns on
// Eigen's threads (for_each_panel): the library's cross-attention projects each window's
// encoder output into every layer's K and V so (CrossAttention::set_encoder_projection), 8 of
// tiny's (1500 x 384) x (384 x 384) products per window with the baseline cache.
inline void onednn_encoder_projection(ConstMatrixRef x, ConstMatrixRef w, MatrixRef y) {
  for_each_panel(w.cols(), x.rows(), Eigen::nbThreads(), [&](Eigen::Index first, Eigen::Index n) {
    sgemm_on_this_thread('N', x.rows(), n, x.cols(), x.data(), x.outerStride(), w.data() + first, w.outerStride(), y.data() + first,
                         y.outerStride());
  });
}

class OnednnDense : public Dense {
 public:
  std::string name() const override { return "onednn (CPU)"; }
  void affine(ConstMatrixRef x, const RowMatrixXf& w, const RowVectorXf* bias, MatrixRef y) override {
    project_float(x, w, y, onednn_panel_product, Eigen::nbThreads());
    if (bias) y.rowwise() += *bias;
  }
  void stored_affine(ConstMatrixRef x, const WeightMatrix& w, const RowVectorXf* bias, MatrixRef y) override {
    w.project(x, y, onednn_panel_product);
    if (bias) y.rowwise() += *bias;
  }
};

// The engine of every call that names none. Stateless.
inline Dense& default_dense() {
  static OnednnDense engine;
  return engine;
}

}  // namespace polyattn::whisper
