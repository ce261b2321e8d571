// The cuBLAS engine's GEMM plans (examples/whisper/gemm_plan.hpp) run on the CPU through a
// reference strided-batched GEMM written from the BLAS definition (column-major, op = N or T),
// and must give what EigenDense gives: the layout reasoning of CublasDense checked without a GPU.
// (The encoder attention has no GEMM plan: CublasDense runs it through exec::Cuda::attention.)
// (test_cuda.cu checks the engine itself where a GPU is present.)
#include <doctest/doctest.h>

#include <whisper/dense.hpp>
#include <whisper/gemm_plan.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "dense_engine_checks.hpp"

using namespace polyattn::whisper;

namespace {

// C_i = alpha op(A_i) op(B_i), i < batch (BLAS sgemm with beta = 0, strided batches): element
// (r, c) of a column-major matrix X with leading dimension ld is X[r + c * ld].
void reference_gemm(const GemmCall& g, const float* a, const float* b, float* c) {
  REQUIRE(g.lda >= (g.transpose_a ? g.k : g.m));
  REQUIRE(g.ldb >= (g.transpose_b ? g.n : g.k));
  REQUIRE(g.ldc >= g.m);
  for (int i = 0; i < g.batch; ++i) {
    const float* A = a + g.a_offset + i * g.stride_a;
    const float* B = b + g.b_offset + i * g.stride_b;
    float* C = c + g.c_offset + i * g.stride_c;
    for (int col = 0; col < g.n; ++col)
      for (int row = 0; row < g.m; ++row) {
        double acc = 0;
        for (int p = 0; p < g.k; ++p) {
          const float op_a = g.transpose_a ? A[p + std::int64_t(row) * g.lda] : A[row + std::int64_t(p) * g.lda];
          const float op_b = g.transpose_b ? B[col + std::int64_t(p) * g.ldb] : B[p + std::int64_t(col) * g.ldb];
          acc += double(op_a) * double(op_b);
        }
        C[row + std::int64_t(col) * g.ldc] = static_cast<float>(g.alpha * acc);
      }
  }
}

}  // namespace

TEST_SUITE("model") {
  TEST_CASE("cuBLAS GEMM plans through a reference BLAS: affine as Eigen computes it") {
    whisper_test::Rng rng(17);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    {  // y = x W^T
      const RowMatrixXf x = whisper_test::random_matrix(rng, 5, 7), w = whisper_test::random_matrix(rng, 3, 7);
      RowMatrixXf y = RowMatrixXf::Constant(5, 3, nan);
      reference_gemm(affine_call(5, 7, 3), w.data(), x.data(), y.data());
      whisper_test::check_affine_bound(y, x, w, nullptr);
    }
  }
}
