// Threads a program lends the CPU executor (core/threads.hpp): the pool runs every task on the
// lent team and none of its own, errors reach the caller as with its own threads, nested calls
// run inline, and an executor on a lent team of n threads gives the bits of one with n threads of
// its own (the work is split by the count, whoever runs it).
#include <doctest/doctest.h>

#include <atomic>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include <polyattn/attention.hpp>
#include <polyattn/core/thread_pool.hpp>
#include <polyattn/exec/cpu/cpu_simd.hpp>
#include <polyattn/uncached_attention.hpp>

#include "support/dense_oracle.hpp"

using namespace polyattn;
using namespace polyattn::testing;

namespace {

// A team of `size` threads for each call, the caller one of them: thread t runs tasks t, t +
// size, ... (so with n >= size every thread runs one). Counts the calls, and the calls in which
// a task ran on a thread other than the caller.
struct CountingTeam {
  int size = 2;
  std::atomic<int> calls{0}, calls_shared{0};

  ParallelFor parallel_for() {
    return [this](int n, const std::function<void(int)>& task) {
      calls++;
      const std::thread::id caller = std::this_thread::get_id();
      std::atomic<bool> elsewhere{false};
      auto work = [&](int t) {
        for (int i = t; i < n; i += size) {
          if (std::this_thread::get_id() != caller) elsewhere = true;
          task(i);
        }
      };
      std::vector<std::thread> others;
      for (int t = 1; t < size; ++t) others.emplace_back(work, t);
      work(0);
      for (auto& t : others) t.join();
      if (elsewhere) calls_shared++;
    };
  }
};

}  // namespace

TEST_CASE("a pool on a lent team runs every task there, starts no thread, and rethrows what a task threw") {
  CountingTeam team;
  int started = 0;
  const ThreadPool::StartThread counting_start = [&](std::function<void()> body) {
    ++started;
    return std::thread(std::move(body));
  };
  ThreadPool pool(Threads(3, team.parallel_for()), counting_start);
  CHECK(started == 0);
  CHECK(pool.lent());
  CHECK(pool.size() == 3);
  std::vector<std::atomic<int>> hits(100);
  pool.parallel_for(100, [&](int i) { hits[std::size_t(i)]++; });
  for (auto& h : hits) CHECK(h.load() == 1);
  CHECK(team.calls.load() == 1);
  CHECK(team.calls_shared.load() == 1);
  // Every task runs although some throw; the first thrown reaches the caller, no other.
  std::vector<std::atomic<int>> again(10);
  CHECK_THROWS_AS(pool.parallel_for(10, [&](int i) {
    again[std::size_t(i)]++;
    if (i % 3 == 0) throw std::runtime_error("task failed");
  }),
                  std::runtime_error);
  for (auto& h : again) CHECK(h.load() == 1);
  // A task that calls parallel_for on its own pool gets the inner tasks inline, not a second team.
  const int before = team.calls.load();
  std::atomic<int> inner{0};
  pool.parallel_for(4, [&](int) { pool.parallel_for(5, [&](int) { inner++; }); });
  CHECK(inner.load() == 20);
  CHECK(team.calls.load() == before + 1);
  // One task, or a count of one, runs inline as with a pool of its own.
  pool.parallel_for(1, [](int) {});
  CHECK(team.calls.load() == before + 1);
  ThreadPool single(Threads(1, team.parallel_for()));
  single.parallel_for(8, [](int) {});
  CHECK(team.calls.load() == before + 1);
  CHECK_THROWS_AS(ThreadPool(Threads(-1, team.parallel_for())), ShapeError);
}

TEST_CASE("CpuSimd on a lent team gives the bits of its own pool of the same size: decode, prefill, uncached") {
  std::mt19937 rng(5);
  const AttentionShape shape{.n_heads = 4, .head_dim = 64};
  const int kv_heads = 2;  // Gqa<2>: two query heads per cached head
  const int width = shape.n_heads * shape.head_dim, kv_width = kv_heads * shape.head_dim;
  const int prompt = 700;  // one sequence long enough that its decode is split into chunks across the threads
  const RowMatrixXf q = random_matrix(prompt, width, rng), k = random_matrix(prompt, kv_width, rng),
                    v = random_matrix(prompt, kv_width, rng);
  const RowMatrixXf q1 = random_matrix(1, width, rng), k1 = random_matrix(1, kv_width, rng), v1 = random_matrix(1, kv_width, rng);
  const float nan = std::numeric_limits<float>::quiet_NaN();

  CountingTeam team;
  using Attn = Attention<Gqa<2>, Hnd, exec::CpuSimd>;
  const CacheConfig config{.max_sequences = 1, .capacity = prompt + 1};
  Attn own(shape, config, {}, 2), lent(shape, config, {}, Threads(2, team.parallel_for()));
  CHECK(lent.executor().threads() == 2);
  RowMatrixXf prefill_own = RowMatrixXf::Constant(prompt, width, nan), prefill_lent = prefill_own;
  RowMatrixXf step_own = RowMatrixXf::Constant(1, width, nan), step_lent = step_own;
  for (auto [attn, pre, step] : {std::tuple{&own, &prefill_own, &step_own}, std::tuple{&lent, &prefill_lent, &step_lent}}) {
    const int seq = attn->open_sequence();
    attn->prefill(seq, q, {k, v}, Mask::causal, *pre);
    const int batch[] = {seq};
    attn->decode(batch, q1, {k1, v1}, *step);
  }
  CHECK(team.calls.load() >= 2);
  CHECK(team.calls_shared.load() == team.calls.load());
  CHECK(prefill_lent == prefill_own);
  CHECK(step_lent == step_own);
  RowMatrixXf k_all(prompt + 1, kv_width), v_all(prompt + 1, kv_width);
  k_all << k, k1;
  v_all << v, v1;
  const RowMatrixXf step_oracle = dense_attention(q1, k_all, v_all, shape.n_heads, 2, true, prompt);
  CHECK(max_abs_diff(step_lent, step_oracle) <= fp32_attention_tolerance(shape.head_dim, prompt + 1));

  exec::CpuSimd own_cpu(2), lent_cpu(Threads(2, team.parallel_for()));
  RowMatrixXf full_own = RowMatrixXf::Constant(prompt, width, nan), full_lent = full_own;
  attention(own_cpu, q, k, v, {shape.n_heads, kv_heads, shape.head_dim}, Mask::full, full_own);
  attention(lent_cpu, q, k, v, {shape.n_heads, kv_heads, shape.head_dim}, Mask::full, full_lent);
  CHECK(full_lent == full_own);
}
