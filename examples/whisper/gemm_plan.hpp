// The GEMMs of CublasDense (cublas_dense.cuh) as plain data: column-major BLAS arguments of a
// strided-batched sgemm, C_i = alpha op(A_i) op(B_i) (+ 0 C_i), i < batch, with A_i at
// a + a_offset + i * stride_a (B, C alike). Host-only, so that a test without a GPU runs the same
// calls through a reference GEMM that follows the BLAS definition (tests/whisper/test_gemm_plan.cpp).
//
// cuBLAS is column-major: a row-major (r, c) matrix with row stride s is, to it, the column-major
// (c, r) matrix with leading dimension s, i.e. its transpose.
#pragma once

#include <cmath>
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

// The encoder's attention on qkv (n, 3d) row-major = [q | k | v], heads of dh = d / heads.
// Scores, per head h: S_h (n, n) row-major = q_h k_h^T / sqrt(dh). Column-major S_h^T = k_h q_h^T,
// where k_h's storage (from column d + h dh, leading dimension 3d) is k_h^T (dh, n), hence op T.
// Buffers: A = B = qkv, C = scores (heads blocks of n * n).
inline GemmCall scores_call(int n, int d, int heads) {
  const int dh = d / heads;
  GemmCall c;
  c.transpose_a = true;
  c.m = n, c.n = n, c.k = dh;
  c.alpha = 1.0f / std::sqrt(static_cast<float>(dh));
  c.a_offset = d;  // k
  c.b_offset = 0;  // q
  c.lda = c.ldb = 3 * d, c.ldc = n;
  c.stride_a = c.stride_b = dh, c.stride_c = std::int64_t(n) * n;
  c.batch = heads;
  return c;
}

// Outputs, per head h: out_h (n, dh) = P_h (n, n) v_h (n, dh), written at column h dh of out
// (n, d) row-major. Column-major out_h^T (dh, n) = v_h^T P_h^T: v_h's storage is v_h^T (dh, n),
// P_h's is P_h^T (n, n); no transposes. Buffers: A = qkv, B = probabilities, C = out.
inline GemmCall outputs_call(int n, int d, int heads) {
  const int dh = d / heads;
  GemmCall c;
  c.m = dh, c.n = n, c.k = n;
  c.a_offset = 2 * d;  // v
  c.lda = 3 * d, c.ldb = n, c.ldc = d;
  c.stride_a = dh, c.stride_b = std::int64_t(n) * n, c.stride_c = dh;
  c.batch = heads;
  return c;
}

}  // namespace polyattn::whisper
