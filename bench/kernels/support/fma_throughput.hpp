// The machine's fp32 multiply-add throughput, measured in the benchmark's own run: the compute
// roof that a decode step whose group shares a cache row (MQA, slim, X-cache) may hit before the
// memory roof.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include <xsimd/xsimd.hpp>

#include <polyattn/core/thread_pool.hpp>

namespace polyattn::bench {

/// 12 independent FMA chains (latency x throughput of every current x86 core) over registers,
/// `iterations` times; returns a value that depends on every chain so none is optimised away.
inline float fma_chains(std::size_t iterations, float seed) {
  using B = xsimd::batch<float>;
  constexpr int kChains = 12;
  B acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = B(seed + float(c));
  const B a(0.999999f), b(1e-7f);
  for (std::size_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = xsimd::fma(acc[c], a, b);
  B total(0.0f);
  for (int c = 0; c < kChains; ++c) total += acc[c];
  return xsimd::hadd(total);
}

/// Best-of-`repeats` multiply-adds per second (scalar multiply-adds: SIMD lanes counted) with
/// `threads` threads (0: all hardware threads).
inline double measure_fma_throughput(int threads = 0, int repeats = 5, std::size_t iterations = std::size_t(1) << 24) {
  ThreadPool pool(threads);
  const int parts = pool.size();
  std::vector<float> sinks(static_cast<std::size_t>(parts));
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(parts, [&](int p) { sinks[std::size_t(p)] = fma_chains(iterations, float(p)); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(parts) * double(iterations) * 12.0 * double(xsimd::batch<float>::size) / seconds);
  }
  volatile float sink = sinks[0];
  (void)sink;
  return best;
}

}  // namespace polyattn::bench
