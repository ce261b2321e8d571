// The dense attention oracle (dense_oracle.hpp), compiled once into polyattn_test_support, at -O3
// even in the sanitizer builds (tests/CMakeLists.txt): written as scalar loops at -O1, it was two
// thirds of the equivalence tests' time under ASan+UBSan. AddressSanitizer still instruments it;
// UBSan and TSan are off for this file (tests/CMakeLists.txt says why).
//
// Its loops are plain loops over raw rows, in functions of this file only. Written with Eigen
// expressions, the -O3 object called Eigen's out-of-line templates (reductions, assignment loops),
// and the linker kept the first copy of each it met: the one from a test object compiled at -O0
// (FAST_AT_O0), so under ASan the oracle ran at -O0 after all, half of test_equivalence_reference's
// time.
#include "support/dense_oracle.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace polyattn::testing {
namespace {

// (rows, cols) row-major float -> the same in double.
std::vector<double> to_double(const RowMatrixXf& m) {
  std::vector<double> out(std::size_t(m.size()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = double(m.data()[i]);
  return out;
}

// Four partial sums, so that -O3 vectorises it without reassociating one chain.
double dot(const double* a, const double* b, int n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

RowMatrixXf random_matrix(int rows, int cols, std::mt19937& rng, float range) {
  std::uniform_real_distribution<float> dist(-range, range);
  RowMatrixXf m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = dist(rng);
  return m;
}

RowMatrixXf dense_attention(const RowMatrixXf& q, const RowMatrixXf& k, const RowMatrixXf& v, int n_heads, int group,
                            bool causal, int first_pos, const OracleKeys& which) {
  const int dk = int(q.cols()) / n_heads;
  const int dv = int(v.cols()) / (n_heads / group);
  const double scale = 1.0 / std::sqrt(double(dk));
  // Everything in double.
  const std::vector<double> qd = to_double(q), kd = to_double(k), vd = to_double(v);
  const std::ptrdiff_t q_stride = q.cols(), k_stride = k.cols(), v_stride = v.cols();
  RowMatrixXf out(q.rows(), n_heads * dv);
  std::vector<int> seen;
  std::vector<double> s, acc(static_cast<std::size_t>(dv));
  for (int i = 0; i < q.rows(); ++i) {
    const int visible = causal ? first_pos + i + 1 : int(k.rows());
    seen.clear();
    for (int t = which.window > 0 ? std::max(0, visible - which.window) : 0; t < visible; ++t)
      if (!which.keeps || which.keeps(visible, t)) seen.push_back(t);
    float* out_row = out.data() + std::ptrdiff_t(i) * out.cols();
    if (seen.empty()) {  // no key: zeros
      std::fill_n(out_row, out.cols(), 0.0f);
      continue;
    }
    s.resize(seen.size());
    for (int h = 0; h < n_heads; ++h) {
      const int kv = h / group;
      const double* qh = qd.data() + i * q_stride + h * dk;
      double largest = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < seen.size(); ++j) {
        s[j] = dot(kd.data() + seen[j] * k_stride + kv * dk, qh, dk) * scale;
        largest = std::max(largest, s[j]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::size_t j = 0; j < seen.size(); ++j) {
        const double p = std::exp(s[j] - largest);
        sum += p;
        const double* vj = vd.data() + seen[j] * v_stride + kv * dv;
        for (int c = 0; c < dv; ++c) acc[std::size_t(c)] += p * vj[c];
      }
      for (int c = 0; c < dv; ++c) out_row[h * dv + c] = float(acc[std::size_t(c)] / sum);
    }
  }
  return out;
}

}  // namespace polyattn::testing
