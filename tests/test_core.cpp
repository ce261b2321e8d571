// Core pieces: the online-softmax merge and the thread pool.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include <polyattn/core/online_softmax.hpp>
#include <polyattn/core/thread_pool.hpp>

using namespace polyattn;

TEST_CASE("merging softmax chunks in any split equals one pass") {
  std::mt19937 rng(11);
  std::normal_distribution<double> dist(0.0, 4.0);
  const int n = 200, dim = 3;
  std::vector<double> s(n), v(n * dim);
  for (auto& x : s) x = dist(rng);
  for (auto& x : v) x = dist(rng);
  // One pass, directly.
  double m = -INFINITY, sum = 0, expected[dim] = {};
  for (double x : s) m = std::max(m, x);
  for (int t = 0; t < n; ++t) {
    const double p = std::exp(s[t] - m);
    sum += p;
    for (int d = 0; d < dim; ++d) expected[d] += p * v[t * dim + d];
  }
  // Chunked: states per chunk, then merged left to right.
  for (int chunk : {1, 7, 64, 200}) {
    SoftmaxState<double> total;
    double acc[dim] = {};
    for (int begin = 0; begin < n; begin += chunk) {
      SoftmaxState<double> st;
      double part[dim] = {};
      for (int t = begin; t < std::min(n, begin + chunk); ++t) {
        const double f = st.raise_max(s[t]);
        for (double& x : part) x *= f;
        const double p = std::exp(s[t] - st.max);
        st.sum += p;
        for (int d = 0; d < dim; ++d) part[d] += p * v[t * dim + d];
      }
      merge_softmax(total, acc, st, part, dim);
    }
    CHECK(total.max == m);
    CHECK(total.sum == doctest::Approx(sum).epsilon(1e-12));
    for (int d = 0; d < dim; ++d) CHECK(acc[d] / total.sum == doctest::Approx(expected[d] / sum).epsilon(1e-12));
  }
  // An empty chunk changes nothing.
  SoftmaxState<double> a{1.0, 2.0}, empty;
  double acc_a[1] = {5.0}, acc_e[1] = {0.0};
  merge_softmax(a, acc_a, empty, acc_e, 1);
  CHECK(a.sum == 2.0);
  CHECK(acc_a[0] == 5.0);
}

TEST_CASE("the thread pool runs every task once and propagates exceptions") {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (int round = 0; round < 20; ++round) {
      std::vector<std::atomic<int>> hits(100);
      pool.parallel_for(100, [&](int i) { hits[std::size_t(i)]++; });
      for (auto& h : hits) CHECK(h.load() == 1);
    }
    CHECK_THROWS_WITH_AS(pool.parallel_for(10, [](int i) { if (i == 3) throw std::runtime_error("task 3 failed"); }),
                         "task 3 failed", std::runtime_error);
    int count = 0;
    pool.parallel_for(5, [&](int) { __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED); });  // still usable
    CHECK(count == 5);
  }
  CHECK_THROWS_AS(ThreadPool(-1), ShapeError);
}
