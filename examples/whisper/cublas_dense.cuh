// CublasDense: the model's products (dense.hpp) on a CUDA device through cuBLAS, for
// --device cuda. nvcc only; included by cuda_backend.cu, reached elsewhere through
// Backend::make_dense() (backend.hpp).
//
// Every call copies its activations up and its result down (pageable host memory, on the
// engine's stream) and waits: the layers between the products (LayerNorm, GELU, residuals) and
// the decoder's attention executor work on host matrices. Weights are copied once, at their first
// use, and found again by address (converted_weights.hpp's rule: a weight whose shape or sampled
// values differ from its device copy's source is refused rather than silently used stale).
//
// fp32 throughout, CUBLAS_DEFAULT_MATH: single-precision GEMMs stay plain fp32 (no TF32), so
// --device cuda is expected to give the CPU's tokens (summation order differs: compare logits
// before suspecting a bug if a near-tie flips a token).
//
// One device: the one current at construction, which must stay current while the engine is used
// (as for exec::Cuda).
//
// The GEMMs' arguments (row-major data seen column-major by cuBLAS) are planned in gemm_plan.hpp,
// host-only, where a CPU test runs the same calls through a reference GEMM. The encoder's
// self-attention is the library's: exec::Cuda::attention (the tiled prefill kernel) reads q, k and
// v where the upload left them, with no (heads, n, n) score matrix.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <string>
#include <utility>

#include <polyattn/exec/cuda/cuda.cuh>
#include <polyattn/exec/cuda/cuda_error.cuh>
#include <polyattn/exec/cuda/device_memory.cuh>

#include "converted_weights.hpp"
#include "dense.hpp"
#include "error.hpp"
#include "gemm_plan.hpp"

namespace polyattn::whisper {

namespace cublas_detail {

inline void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS: ") + call + " failed: " + cublasGetStatusName(status) + ": " + cublasGetStatusString(status));
}

// y (rows, cols) += bias (cols) broadcast over the rows; y contiguous.
template <class T>
__global__ void add_row_bias(T* y, const T* bias, long long rows, int cols) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * cols) y[i] += bias[i % cols];
}

}  // namespace cublas_detail

class CublasDense final : public Dense {
 public:
  // The current CUDA device; throws (CudaError, or Error naming the cuBLAS call) when unusable.
  CublasDense() {
    POLYATTN_CUDA_CHECK(cudaGetDevice(&device_));
    cudaDeviceProp prop{};
    POLYATTN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    device_name_ = prop.name;
    cublas_detail::check(cublasCreate(&handle_), "cublasCreate");
    try {
      cublas_detail::check(cublasSetStream(handle_, stream_.get()), "cublasSetStream");
      cublas_detail::check(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    } catch (...) {
      cublasDestroy(handle_);  // the destructor does not run for a constructor that throws
      throw;
    }
  }
  CublasDense(const CublasDense&) = delete;
  CublasDense& operator=(const CublasDense&) = delete;
  ~CublasDense() override {
    if (handle_) cublasDestroy(handle_);
  }

  std::string name() const override { return "cublas (GPU " + std::to_string(device_) + ": " + device_name_ + ")"; }

  void affine(ConstMatrixRef x, const RowMatrixXf& w, const RowVectorXf* bias, MatrixRef y) override {
    const int n = checked_int(x.rows(), "rows of x"), in = checked_int(x.cols(), "columns of x");
    const int out = checked_int(w.rows(), "rows of W");
    if (n == 0 || out == 0) return;
    if (in == 0) throw Error("cuBLAS: affine with an empty input width");
    const float* d_w = device_weight(w.data(), w.rows(), w.cols());
    const float* d_bias = bias ? device_weight(bias->data(), 1, bias->size()) : nullptr;
    float* d_x = upload(x, x_);
    y_.reserve(std::size_t(n) * std::size_t(out));
    run(affine_call(n, in, out), d_w, d_x, y_.data(), "affine");
    if (d_bias) {
      constexpr int kThreads = 256;
      const long long total = static_cast<long long>(n) * out;
      cublas_detail::add_row_bias<<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream_.get()>>>(
          y_.data(), d_bias, n, out);
      exec::cuda::check_launch("add_row_bias");
    }
    download(y_.data(), y);
  }

  // Weights kept as the model ships them (the encoder's layers, the decoder's MLP, the logits)
  // through cuBLAS in float: a float16 matrix is converted once (as_float() keeps that host copy,
  // device_weight the device one).
  void stored_affine(ConstMatrixRef x, const WeightMatrix& w, const RowVectorXf* bias, MatrixRef y) override {
    affine(x, w.as_float(), bias, y);
  }
  void logits(ConstMatrixRef x, const WeightMatrix& e, MatrixRef y) override { affine(x, e.as_float(), nullptr, y); }

  void bidirectional_attention_into(ConstMatrixRef qkv, int n_heads, MatrixRef out) override {
    check_attention_input(qkv, n_heads);
    check_attention_output(qkv, out);
    const int n = checked_int(qkv.rows(), "frames"), width = checked_int(qkv.cols(), "qkv width");
    const int d = width / 3;
    if (n == 0) return;
    const float* d_qkv = upload(qkv, x_);
    y_.reserve(std::size_t(n) * std::size_t(d));
    using Rows = exec::Cuda::DeviceRows<const float>;
    attention_.attention(Rows{d_qkv, 3 * d}, Rows{d_qkv + d, 3 * d}, Rows{d_qkv + 2 * d, 3 * d}, {y_.data(), d}, n, n,
                         AttentionHeads{n_heads, n_heads, d / n_heads}, Mask::full, stream_.get());
    download(y_.data(), out);
  }

 private:
  // One planned GEMM (gemm_plan.hpp) on the engine's stream.
  void run(const GemmCall& c, const float* a, const float* b, float* out, const char* what) {
    const float zero = 0.0f;
    const auto op = [](bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; };
    cublas_detail::check(cublasSgemmStridedBatched(handle_, op(c.transpose_a), op(c.transpose_b), c.m, c.n, c.k, &c.alpha, a + c.a_offset,
                                                   c.lda, c.stride_a, b + c.b_offset, c.ldb, c.stride_b, &zero, out + c.c_offset, c.ldc,
                                                   c.stride_c, c.batch),
                         (std::string("cublasSgemmStridedBatched (") + what + ")").c_str());
  }

  static int checked_int(Eigen::Index v, const char* what) {
    if (v < 0 || v > INT_MAX) throw Error(std::string("cuBLAS: ") + what + " (" + std::to_string(v) + ") does not fit an int");
    return static_cast<int>(v);
  }

  // The device copy of the weight at `host` (rows, cols) contiguous, copied at its first use.
  const float* device_weight(const float* host, Eigen::Index rows, Eigen::Index cols) {
    return weights_
        .get(host, WeightFingerprint::of(host, rows, cols),
             [&] {
               const std::size_t size = std::size_t(rows) * std::size_t(cols);
               exec::cuda::DeviceBuffer<float> buffer;
               buffer.reserve(size);
               POLYATTN_CUDA_CHECK(cudaMemcpyAsync(buffer.data(), host, size * sizeof(float), cudaMemcpyHostToDevice, stream_.get()));
               return buffer;
             })
        .data();
  }

  // Bytes from one row to the next (a single row may report any stride; cudaMemcpy2D wants >= its width).
  template <class Matrix>
  static std::size_t pitch(const Matrix& m) {
    return std::size_t(m.rows() > 1 ? std::max(m.outerStride(), m.cols()) : m.cols()) * sizeof(float);
  }

  // Copies x (rows of any stride) into `buffer` as a contiguous (rows, cols) matrix.
  float* upload(ConstMatrixRef x, exec::cuda::DeviceBuffer<float>& buffer) {
    buffer.reserve(std::size_t(x.rows()) * std::size_t(x.cols()));
    const std::size_t row_bytes = std::size_t(x.cols()) * sizeof(float);
    POLYATTN_CUDA_CHECK(cudaMemcpy2DAsync(buffer.data(), row_bytes, x.data(), pitch(x), row_bytes, std::size_t(x.rows()),
                                          cudaMemcpyHostToDevice, stream_.get()));
    return buffer.data();
  }

  // Copies a contiguous (y.rows(), y.cols()) device matrix into y (rows of any stride) and waits.
  void download(const float* device, MatrixRef y) {
    const std::size_t row_bytes = std::size_t(y.cols()) * sizeof(float);
    POLYATTN_CUDA_CHECK(cudaMemcpy2DAsync(y.data(), pitch(y), device, row_bytes, row_bytes, std::size_t(y.rows()),
                                          cudaMemcpyDeviceToHost, stream_.get()));
    stream_.synchronize();
  }

  int device_ = 0;
  std::string device_name_;
  exec::cuda::Stream stream_;
  cublasHandle_t handle_ = nullptr;
  exec::Cuda attention_;  // the encoder's self-attention: its tiled prefill kernel over q, k, v where they lie
  ConvertedWeights<exec::cuda::DeviceBuffer<float>> weights_{"cuBLAS"};
  exec::cuda::DeviceBuffer<float> x_, y_;  // activations, results
};

}  // namespace polyattn::whisper
