// Compiled once for every test executable (tests/CMakeLists.txt: polyattn_test_support): the
// dense decompositions the test helpers and convert_to_slim_k need. Instantiated in each test
// translation unit, they took most of its compile time.
#include <Eigen/QR>
#include <Eigen/SVD>

#include "support/mha_layer.hpp"

template polyattn::SlimKWeights polyattn::convert_to_slim_k<float>(const polyattn::MhaWeights&, const polyattn::SlimKOptions&);
template polyattn::SlimKWeights polyattn::convert_to_slim_k<double>(const polyattn::MhaWeights&, const polyattn::SlimKOptions&);
template polyattn::SlimKWeights polyattn::convert_to_slim_k<Eigen::half>(const polyattn::MhaWeights&,
                                                                        const polyattn::SlimKOptions&);

namespace polyattn::testing {

Eigen::MatrixXd random_orthogonal(int n, std::mt19937& rng) {
  std::normal_distribution<double> dist;
  Eigen::MatrixXd g(n, n);
  for (Eigen::Index i = 0; i < g.size(); ++i) g.data()[i] = dist(rng);
  return Eigen::HouseholderQR<Eigen::MatrixXd>(g).householderQ();
}

RowMatrixXf matrix_with_condition(int rows, int cols, double cond, double largest, std::mt19937& rng) {
  const int k = std::min(rows, cols);
  const Eigen::MatrixXd u = random_orthogonal(rows, rng), v = random_orthogonal(cols, rng);
  Eigen::VectorXd sigma(k);
  for (int i = 0; i < k; ++i)
    sigma(i) = std::isinf(cond) ? (i == k - 1 ? 0.0 : largest) : largest * std::pow(cond, -double(i) / std::max(1, k - 1));
  return (u.leftCols(k) * sigma.asDiagonal() * v.leftCols(k).transpose()).cast<float>();
}

double spectral_norm(const RowMatrixXf& m) { return Eigen::JacobiSVD<Eigen::MatrixXd>(m.cast<double>()).singularValues()(0); }

}  // namespace polyattn::testing
