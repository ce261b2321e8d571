// Core pieces: the online-softmax merge, the thread pool and multiply_rows.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <polyattn/core/matrix.hpp>
#include <polyattn/core/online_softmax.hpp>
#include <polyattn/core/thread_pool.hpp>

#include "support/dense_oracle.hpp"

using namespace polyattn;

namespace {

/// Runs f; a call still running after `seconds` is a deadlock: say so and end the process
/// (a deadlocked thread can be neither joined nor cancelled).
template <class F>
void within_deadline(int seconds, const char* what, F&& f) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(m);
    if (!cv.wait_for(lock, std::chrono::seconds(seconds), [&] { return done; })) {
      std::fprintf(stderr, "deadlock: %s did not return within %d s\n", what, seconds);
      std::_Exit(1);
    }
  });
  try {
    f();
  } catch (...) {
    {
      std::lock_guard lock(m);
      done = true;
    }
    cv.notify_one();
    watchdog.join();
    throw;
  }
  {
    std::lock_guard lock(m);
    done = true;
  }
  cv.notify_one();
  watchdog.join();
}

}  // namespace

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

TEST_CASE("multiply_rows is the product for 1 to 9 rows, row by row or not, into a block, with a transposed factor") {
  std::mt19937 rng(11);
  const RowMatrixXf w = testing::random_matrix(40, 24, rng), w_t = testing::random_matrix(24, 40, rng);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int rows = 1; rows <= 2 * int(kRowByRowRows) + 1; ++rows) {  // (no 0: a block of an empty matrix offsets a null pointer)
    const RowMatrixXf x = testing::random_matrix(rows, 40, rng);
    RowMatrixXf out = RowMatrixXf::Constant(rows, 30, nan), out_t = RowMatrixXf::Constant(rows, 24, nan);
    multiply_rows(out.middleCols(3, 24), x, w);
    multiply_rows(out_t, x, w_t.transpose());
    // Each entry is a 40-term fp32 dot product: |error| <= 40 eps sum_k |x_k| |w_k| (a first-order bound).
    const Eigen::MatrixXd exact = x.cast<double>() * w.cast<double>(), bound = 40 * 0x1p-24 * (x.cast<double>().cwiseAbs() * w.cast<double>().cwiseAbs());
    const Eigen::MatrixXd exact_t = x.cast<double>() * w_t.transpose().cast<double>(),
                          bound_t = 40 * 0x1p-24 * (x.cast<double>().cwiseAbs() * w_t.transpose().cast<double>().cwiseAbs());
    INFO("rows ", rows);
    CHECK(((out.middleCols(3, 24).cast<double>() - exact).cwiseAbs().array() <= bound.array()).all());
    CHECK(((out_t.cast<double>() - exact_t).cwiseAbs().array() <= bound_t.array()).all());
    CHECK(out.leftCols(3).array().isNaN().all());  // the columns outside the block are not written
    CHECK(out.rightCols(3).array().isNaN().all());
  }
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

// A count of 0 is the cores the process may run on: a pool started under a one-CPU affinity
// mask (taskset -c N, a container's cpuset) has one thread, not one per online CPU.
TEST_CASE("a pool of 0 threads takes the cores of the affinity mask") {
  CHECK(usable_cores() >= 1);
  CHECK(ThreadPool(0).size() == usable_cores());
#if defined(__linux__)
  cpu_set_t before;
  REQUIRE(sched_getaffinity(0, sizeof(before), &before) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &before)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
  const int cores = usable_cores();
  const int pool_size = ThreadPool(0).size();
  REQUIRE(sched_setaffinity(0, sizeof(before), &before) == 0);  // (before any check can end the test)
  CHECK(cores == 1);
  CHECK(pool_size == 1);
  CHECK(usable_cores() == CPU_COUNT(&before));
#endif
}

// Issue #11, bug 5: the inline path (one thread, or one task) stopped at the first exception,
// although the remaining tasks are documented to run.
TEST_CASE("the inline path runs every task and rethrows the first exception") {
  for (auto [threads, n] : {std::pair{1, 10}, std::pair{3, 1}}) {
    ThreadPool pool(threads);
    std::vector<int> hits(std::size_t(n), 0);
    CHECK_THROWS_WITH_AS(pool.parallel_for(n, [&](int i) {
      ++hits[std::size_t(i)];
      if (i % 4 == 0) throw std::runtime_error("task " + std::to_string(i) + " failed");
    }),
                         "task 0 failed", std::runtime_error);
    for (int h : hits) CHECK(h == 1);
  }
}

// Issue #11, bug 5: a task that called parallel_for on its own pool waited for the pool's one
// call at a time, held by the call that ran the task: a deadlock. Nested calls run inline.
TEST_CASE("parallel_for from inside a task of the same pool runs the inner tasks inline") {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(8 * 5);
    std::atomic<int> elsewhere{0};
    within_deadline(60, "a nested parallel_for", [&] {
      pool.parallel_for(8, [&](int i) {
        const auto me = std::this_thread::get_id();
        pool.parallel_for(5, [&](int j) {
          if (std::this_thread::get_id() != me) elsewhere++;  // inline: on the thread of the outer task
          hits[std::size_t(i * 5 + j)]++;
        });
      });
    });
    for (auto& h : hits) CHECK(h.load() == 1);
    CHECK(elsewhere.load() == 0);
    // An exception of an inner task reaches the outer call; the pool stays usable.
    within_deadline(60, "a nested parallel_for that throws", [&] {
      CHECK_THROWS_WITH_AS(pool.parallel_for(4, [&](int) {
        pool.parallel_for(3, [](int j) { if (j == 1) throw std::runtime_error("inner task failed"); });
      }),
                           "inner task failed", std::runtime_error);
    });
    std::atomic<int> count{0};
    pool.parallel_for(7, [&](int) { count++; });
    CHECK(count.load() == 7);
  }
}

TEST_CASE("two threads that share a pool take turns") {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(2 * 200);
  within_deadline(60, "two callers of one pool", [&] {
    std::thread other([&] {
      for (int round = 0; round < 20; ++round) pool.parallel_for(10, [&](int i) { hits[std::size_t(200 + round * 10 + i)]++; });
    });
    for (int round = 0; round < 20; ++round) pool.parallel_for(10, [&](int i) { hits[std::size_t(round * 10 + i)]++; });
    other.join();
  });
  for (auto& h : hits) CHECK(h.load() == 1);
}

// Issue #11, bug 5: a worker thread that failed to start left the started ones joinable in a
// half-built pool, and std::thread's destructor called std::terminate. Now they are stopped and
// joined and the constructor throws polyattn::Error. The seam starts threads as std::thread
// does, and fails the third time as std::thread does when the system has no more threads.
TEST_CASE("a worker thread that fails to start stops the others and throws polyattn::Error") {
  std::atomic<int> started{0}, finished{0};
  int calls = 0;
  const ThreadPool::StartThread start_third_fails = [&](std::function<void()> body) {
    if (++calls == 3) throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again), "thread creation");
    return std::thread([&, body = std::move(body)] {
      started++;
      body();
      finished++;
    });
  };
  try {
    ThreadPool pool(5, start_third_fails);
    FAIL("the constructor should have thrown");
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("could not start worker thread 3 of 4") != std::string::npos);
    CHECK(what.find("thread creation") != std::string::npos);  // the system's reason
  }
  CHECK(calls == 3);
  CHECK(started.load() == 2);
  CHECK(finished.load() == 2);  // both started workers were stopped and joined
}
