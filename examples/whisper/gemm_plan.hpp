// The GEMMs of CublasDense (cublas_dense.cuh) as plain data: column-major BLAS arguments of a
// strided-batched sgemm, C_i = alpha op(A_i) op(B_i) (+ 0 C_i), i < batch, with A_i at
// a + a_offset + i * stride_a (B, C alike). Host-only, so that a test without a GPU runs the same
// calls through a reference GEMM that follows the BLAS definition (tests/whisper/test_gemm_plan.cpp).
//
// cuBLAS is column-major: a row-major (r, c) matrix with row stride s is, to it, the column-major
// (c, r) matrix with leading dimension s, i.e. its transpose.
#pragma once

#include <cstdint>

namespace polyattn::whisper {

struct GemmCall {
  bool transpose_a = false, transpose_b = false;  // op(X) = X^T when set
  int m = 0, n = 0, k = 0;                        // op(A): (m, k), op(B): (k, n), C: (m, n)
  float alpha = 1.0f;
  std::int64_t a_offset = 0, b_offset = 0, c_offset = 0;  // elements from each buffer's start
  int lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between batch entries
  int batch = 1;
};

// y (n, out) = x (n, in) W^T, all row-major and contiguous. Column-major: y^T (out, n) =
// W x^T, where W's storage is W^T (in, out), hence op T; x's storage is x^T (in, n).
// Buffers: A = W, B = x, C = y.
inline GemmCall affine_call(int n, int in, int out) {
  GemmCall c;
  c.transpose_a = true;
  c.m = out, c.n = n, c.k = in;
  c.lda = in, c.ldb = in, c.ldc = out;
  return c;
}

}  // namespace polyattn::whisper
