// The machine's read bandwidth, measured in the benchmark's own run: the roofline that a
// memory-bound decode step is judged against.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include <xsimd/xsimd.hpp>

#include <polyattn/cache/zeroed_buffer.hpp>
#include <polyattn/core/thread_pool.hpp>

namespace polyattn::bench {

/// Sums `n` floats with independent accumulators, so the loop is limited by loads, not adds.
inline float stream_sum(const float* data, std::size_t n) {
  using B = xsimd::batch<float>;
  constexpr std::size_t W = B::size;
  B a0(0.f), a1(0.f), a2(0.f), a3(0.f);
  std::size_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    a0 += B::load_unaligned(data + i);
    a1 += B::load_unaligned(data + i + W);
    a2 += B::load_unaligned(data + i + 2 * W);
    a3 += B::load_unaligned(data + i + 3 * W);
  }
  float s = xsimd::hadd(a0 + a1 + a2 + a3);
  for (; i < n; ++i) s += data[i];
  return s;
}

/// Best-of-`repeats` streaming read over `bytes` (far larger than the last-level cache) with
/// `threads` threads, in bytes per second.
inline double measure_read_bandwidth(std::size_t bytes = std::size_t(2) << 30, int threads = 0, int repeats = 5) {
  // Backed by 2 MiB pages where the OS offers them, as the benchmarks' caches are (CacheConfig::
  // huge_pages): on the AMD EPYC VM the probe read 27-32 GB/s with 4 KiB pages and 34-35 with 2 MiB.
  polyattn::detail::ZeroedBuffer<float> buffer(bytes / sizeof(float), /*huge_pages=*/true);
  std::fill_n(buffer.data(), buffer.size(), 1.0f);  // written once, so every page is mapped
  ThreadPool pool(threads);
  const int parts = pool.size();
  const std::size_t per_part = buffer.size() / std::size_t(parts);
  std::vector<float> sums(static_cast<std::size_t>(parts));
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(parts, [&](int p) { sums[std::size_t(p)] = stream_sum(buffer.data() + std::size_t(p) * per_part, per_part); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(per_part * std::size_t(parts) * sizeof(float)) / seconds);
  }
  volatile float sink = sums[0];  // keeps the sums alive
  (void)sink;
  return best;
}

/// Measured once per process, on first use.
inline double read_bandwidth() {
  static const double bandwidth = measure_read_bandwidth();
  return bandwidth;
}

}  // namespace polyattn::bench
