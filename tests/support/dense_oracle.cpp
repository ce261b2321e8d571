// The dense attention oracle (dense_oracle.hpp), compiled once into polyattn_test_support, at -O3
// even in the sanitizer builds (tests/CMakeLists.txt): written as scalar loops at -O1, it was two
// thirds of the equivalence tests' time under ASan+UBSan. The sanitizers still instrument it.
#include "support/dense_oracle.hpp"

namespace polyattn::testing {

RowMatrixXf dense_attention(const RowMatrixXf& q, const RowMatrixXf& k, const RowMatrixXf& v, int n_heads, int group,
                            bool causal, int first_pos, const OracleKeys& which) {
  const int dk = int(q.cols()) / n_heads;
  const int dv = int(v.cols()) / (n_heads / group);
  const double scale = 1.0 / std::sqrt(double(dk));
  // Everything in double; the dot products and the weighted sum of values are Eigen's, which are
  // SIMD even where the compiler's loops are not (GCC does not vectorise a loop that
  // AddressSanitizer instruments).
  const RowMatrix<double> qd = q.cast<double>(), kd = k.cast<double>(), vd = v.cast<double>();
  RowMatrixXf out(q.rows(), n_heads * dv);
  std::vector<int> seen;
  Eigen::VectorXd s;
  Eigen::RowVectorXd acc(dv);
  for (int i = 0; i < q.rows(); ++i) {
    const int visible = causal ? first_pos + i + 1 : int(k.rows());
    seen.clear();
    for (int t = which.window > 0 ? std::max(0, visible - which.window) : 0; t < visible; ++t)
      if (!which.keeps || which.keeps(visible, t)) seen.push_back(t);
    if (seen.empty()) {  // no key: zeros
      out.row(i).setZero();
      continue;
    }
    s.resize(Eigen::Index(seen.size()));
    for (int h = 0; h < n_heads; ++h) {
      const int kv = h / group;
      const auto qh = qd.row(i).segment(h * dk, dk);
      for (std::size_t j = 0; j < seen.size(); ++j) s[Eigen::Index(j)] = kd.row(seen[j]).segment(kv * dk, dk).dot(qh) * scale;
      s = (s.array() - s.maxCoeff()).exp().matrix();
      acc.setZero();
      for (std::size_t j = 0; j < seen.size(); ++j) acc += s[Eigen::Index(j)] * vd.row(seen[j]).segment(kv * dv, dv);
      out.row(i).segment(h * dv, dv) = (acc / s.sum()).cast<float>();
    }
  }
  return out;
}

}  // namespace polyattn::testing
