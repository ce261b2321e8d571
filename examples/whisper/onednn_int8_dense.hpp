// OnednnInt8Dense: the CLI's --compute-type int8 on the CPU, CTranslate2's int8 scheme for the
// model's stored linear layers (Dense::stored_affine, dense.hpp):
//
//   W (out, in), quantized once, at its first use, per output row r:
//     sw_r = max_j |W[r, j]| / L,  Wq[r, j] = round(W[r, j] / sw_r)  (int8; a zero row: sw_r = 0, Wq 0)
//   x (n, in), quantized at every call, per row i:
//     sx_i = max_j |x[i, j]| / L,  xq[i, j] = round(x[i, j] / sx_i)
//   y[i, r] = (xq[i] . Wq[r]) sx_i sw_r + b[r],  the dot product in int32 by oneDNN's
//     dnnl_gemm_s8s8s32 (exact: |xq . Wq| <= 127^2 in < 2^31 for in < 133,000)
// L, the largest code, is 127 where oneDNN has a VNNI kernel (AVX512-VNNI, AVX-VNNI: 4 products
// summed into int32) and 63 elsewhere. Without VNNI its kernels multiply u8 by s8 with vpmaddubsw,
// which adds two products into a saturating int16: an s8 operand made u8 by adding 128 reaches
// 255, and 2 x 255 x 127 > 32767. That saturation was measured on an AMD EPYC Zen 3 (AVX2) at 127:
// errors 5-18 times the bound below. With every code in [-63, 63] a shifted operand is at most
// 191 and a pair at most 2 x 191 x 63 = 24066, whichever operand oneDNN shifts; the price is one
// bit of resolution (each operand's rounding error doubles).
//
// The stored linear layers are the encoder's (QKV, attention output, MLP), the decoder's MLP and
// its self-attention projections (those a policy borrows from the model, and a policy's converted
// ones, which are StoredLinear too). Everything else stays float32, inherited from OnednnDense:
// affine (float weights: the conv stem), logits (the tied output projection, Dense::logits'
// float16 stream) and bidirectional_attention (the encoder's attention). The projections inside
// the library's cross-attention are not Dense products: they stay float32 on the policy's executor.
//
// Per element, |x.W[r] - y_int8| <= sum_j (|x_j| sw_r / 2 + |W[r, j]| sx / 2 + sx sw_r / 4) plus
// float rounding (tests/whisper/test_int8_dense.cpp derives it): rounding each operand moves it by
// at most half its scale, and x W - (x - e_x)(W - e_W) = x e_W + W e_x - e_x e_W.
//
// The quantized copy (in bytes plus one float scale per row) is kept by the WeightMatrix's
// address, under converted_weights.hpp's rule, as every engine that keeps copies.
//
// The products run in the panel scheme of OnednnDense (weight_matrix.hpp's for_each_panel): one
// OpenMP team splits W's rows, each panel one oneDNN call on one thread, its int32 block turned
// into y at once while it is in cache. oneDNN picks its kernel at run time (int8_levels() follows
// the same CPU test: oneDNN's effective ISA).
//
// Speed on that Xeon, 2 threads, oneDNN 2.6, stored_affine against OnednnDense's with 1500 rows
// of x (a window's encoder): in = 1536 (the MLP's fc2) 5.9 -> 1.9 ms; in = 384 (QKV, attention
// output, fc1) about the same as sgemm (1.0-1.1x), oneDNN's s8s8s32 reaching only about 200
// Gop/s a thread at that depth against 700 at depth 1536. A decoding step's 1-5 rows: 1.5x
// faster. The encoder's attention and conv stem stay float32: one window encodes 6-7% faster
// (including the first use's quantization of the weights), five windows of one batch 15%.
// Memory: the int8 copies are kept beside the model's float16 weights (about 15 MiB more
// resident for tiny.en).
#pragma once

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "converted_weights.hpp"
#include "dense.hpp"
#include "error.hpp"
#include "onednn_dense.hpp"
#include "weight_matrix.hpp"

namespace polyattn::whisper {

/// The largest int8 code OnednnInt8Dense uses on this CPU: 127 where oneDNN runs a VNNI kernel,
/// 63 where its kernels sum pairs of products into saturating int16 (see above).
inline int int8_levels() {
  const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const auto has = [&](dnnl_cpu_isa_t bits) { return (isa & unsigned(bits)) == unsigned(bits); };
  return has(dnnl_cpu_isa_avx512_core_vnni) || has(dnnl_cpu_isa_avx2_vnni) ? 127 : 63;
}

/// max_j |v_j| / levels: the scale that maps a row's largest magnitude to the largest code (0 for
/// a zero row).
inline float int8_row_scale(const float* v, Eigen::Index n, int levels) {
  return n == 0 ? 0.0f : Eigen::Map<const Eigen::ArrayXf>(v, n).abs().maxCoeff() / float(levels);
}

/// q_j = round(v_j / scale) (to nearest, ties to even), in [-levels, levels]; all 0 when scale is
/// 0 (a zero row). In chunks: Eigen rounds a float chunk in vector registers, the compiler narrows it.
inline void quantize_int8_row(const float* v, Eigen::Index n, float scale, int levels, std::int8_t* q) {
  if (scale == 0.0f) {
    std::fill(q, q + n, std::int8_t{0});
    return;
  }
  const float inverse = 1.0f / scale;
  constexpr Eigen::Index kChunk = 256;
  alignas(64) float rounded[kChunk];
  for (Eigen::Index first = 0; first < n; first += kChunk) {
    const Eigen::Index m = std::min(kChunk, n - first);
    Eigen::Map<Eigen::ArrayXf>(rounded, m) = (Eigen::Map<const Eigen::ArrayXf>(v + first, m) * inverse).rint().max(-float(levels)).min(float(levels));
    for (Eigen::Index j = 0; j < m; ++j) q[first + j] = static_cast<std::int8_t>(static_cast<int>(rounded[j]));
  }
}

// affine, logits and bidirectional_attention are OnednnDense's: float32.
class OnednnInt8Dense final : public OnednnDense {
 public:
  /// levels: the largest code, 127 or 63 (0: int8_levels(), what this CPU's oneDNN sums exactly).
  explicit OnednnInt8Dense(int levels = 0) : levels_(levels != 0 ? levels : int8_levels()) {
    if (levels_ != 127 && levels_ != 63) throw Error("onednn int8: codes up to 127 or 63, not " + std::to_string(levels_));
  }

  std::string name() const override { return "onednn int8 (CPU)"; }

  /// The largest code of this engine's quantization (the scales are max|row| / levels()).
  int levels() const { return levels_; }

  void stored_affine(ConstMatrixRef x, const WeightMatrix& w, const RowVectorXf* bias, MatrixRef y) override {
    check_shapes(x, w.rows(), w.cols(), bias, y);
    const QuantizedWeight& wq = quantized(w);
    if (y.size() == 0) return;
    const Eigen::Index n = x.rows(), in = x.cols();
    std::vector<std::int8_t> xq(static_cast<std::size_t>(n * in));  // (n, in) contiguous
    std::vector<float> sx(static_cast<std::size_t>(n));
    const int threads = Eigen::nbThreads();
    // Rows of x on the team's threads when there are many (the encoder's 1500), before the
    // products: every panel reads all of xq.
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (n * in >= (1 << 16))
#endif
    for (Eigen::Index i = 0; i < n; ++i) {
      const float* row = x.data() + i * x.outerStride();  // a row of x is contiguous whatever its stride
      sx[std::size_t(i)] = int8_row_scale(row, in, levels_);
      quantize_int8_row(row, in, sx[std::size_t(i)], levels_, xq.data() + i * in);
    }
    for_each_panel(wq.rows, n, threads, [&](Eigen::Index first, Eigen::Index rows) {
#ifdef _OPENMP
      omp_set_num_threads(1);  // one thread per panel, as onednn_panel_product (onednn_dense.hpp)
#endif
      thread_local std::vector<std::int32_t> acc;  // (n, rows) int32, reused by every call on this thread
      acc.resize(std::size_t(n) * std::size_t(rows));
      const std::int32_t no_offset = 0;
      const dnnl_status_t status = dnnl_gemm_s8s8s32('N', 'T', 'F', n, rows, in, 1.0f, xq.data(), in, 0,
                                                     wq.values.data() + first * in, in, 0, 0.0f, acc.data(), rows, &no_offset);
      if (status != dnnl_success) throw Error(std::string("oneDNN gemm_s8s8s32 failed: ") + dnnl_status2str(status));
      // y[i, r] = acc[i, r] sx_i sw_r (+ b_r), a row at a time in vector registers.
      const Eigen::Map<const Eigen::ArrayXf> sw(wq.scales.data() + first, rows);
      for (Eigen::Index i = 0; i < n; ++i) {
        auto out = y.row(i).segment(first, rows).array().transpose();
        out = Eigen::Map<const Eigen::ArrayXi>(acc.data() + i * rows, rows).cast<float>() * sx[std::size_t(i)] * sw;
        if (bias) out += bias->segment(first, rows).array().transpose();
      }
    });
  }

  /// Weights quantized so far (one per stored linear layer used).
  std::size_t quantized_weights() const { return weights_.size(); }

 private:
  struct QuantizedWeight {
    Eigen::Index rows = 0, cols = 0;
    std::vector<std::int8_t> values;  // (rows, cols) row-major
    std::vector<float> scales;        // (rows): sw_r
  };

  // W's quantized copy, made at its first use.
  const QuantizedWeight& quantized(const WeightMatrix& w) {
    return weights_.get(&w, WeightFingerprint::of(w), [&] {
      QuantizedWeight q;
      q.rows = w.rows();
      q.cols = w.cols();
      q.values.resize(std::size_t(q.rows) * std::size_t(q.cols));
      q.scales.resize(std::size_t(q.rows));
      // Panels of kPanelRows rows of W converted to float and quantized on the team's threads.
      for_each_panel(q.rows, 0, Eigen::nbThreads(), [&](Eigen::Index first, Eigen::Index n) {
        const RowMatrixXf panel = w.float_rows(first, n);
        for (Eigen::Index r = 0; r < n; ++r) {
          const float* row = panel.data() + r * q.cols;
          const float scale = int8_row_scale(row, q.cols, levels_);
          q.scales[std::size_t(first + r)] = scale;
          quantize_int8_row(row, q.cols, scale, levels_, q.values.data() + (first + r) * q.cols);
        }
      });
      return q;
    });
  }

  int levels_;
  ConvertedWeights<QuantizedWeight> weights_{"onednn int8"};
};

}  // namespace polyattn::whisper
