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
#include <polyattn/exec/cpu/load_floats.hpp>

namespace polyattn::bench {

/// Sums `n` elements of T from `data`, converted to fp32 as the decode kernels load them
/// (load_floats), into independent sums, so that the loop is limited by loads, not adds. With
/// `ask_distance` > 0 it also asks (prefetcht2, as the kernels ask) for the line that many bytes
/// ahead of each line it reads whose index is a multiple of `ask_every` (bench_read_streams).
template <class T = float>
float stream_sum(const T* data, std::size_t n, std::size_t ask_distance = 0, std::size_t ask_every = 1) {
  using Arch = xsimd::default_arch;
  using B = xsimd::batch<float, Arch>;
  constexpr std::size_t W = B::size;
  const char* bytes = reinterpret_cast<const char*>(data);
  B a0(0.f), a1(0.f), a2(0.f), a3(0.f);
  std::size_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    if (ask_distance > 0)
      for (std::size_t line = i * sizeof(T); line < (i + 4 * W) * sizeof(T); line += 64)
        if ((line / 64) % ask_every == 0) __builtin_prefetch(bytes + line + ask_distance, 0, 1);
    a0 += exec::cpu::load_floats<Arch>(data + i);
    a1 += exec::cpu::load_floats<Arch>(data + i + W);
    a2 += exec::cpu::load_floats<Arch>(data + i + 2 * W);
    a3 += exec::cpu::load_floats<Arch>(data + i + 3 * W);
  }
  float s = xsimd::hadd(a0 + a1 + a2 + a3);
  for (; i < n; ++i) s += exec::cpu::element_value(data[i]);
  return s;
}

/// A streaming read over `bytes` (far larger than the last-level cache) with `threads` threads
/// that keeps its buffer, so that it can be measured again next to each benchmark case: on a VM
/// whose neighbours share the memory bus, the bandwidth moves within minutes (an AMD EPYC Zen 5
/// VM read 45-80 GB/s over one hour), and a case judged against a probe taken minutes before is
/// judged against another machine.
class ReadProbe {
 public:
  // Backed by 2 MiB pages where the OS offers them, as the benchmarks' caches are (CacheConfig::
  // huge_pages): on the AMD EPYC VM the probe read 27-32 GB/s with 4 KiB pages and 34-35 with 2 MiB.
  explicit ReadProbe(std::size_t bytes = std::size_t(2) << 30, int threads = 0)
      : buffer_(bytes / sizeof(float), /*huge_pages=*/true), pool_(threads) {
    std::fill_n(buffer_.data(), buffer_.size(), 1.0f);  // written once, so every page is mapped
  }

  /// The best of `repeats` reads of the whole buffer, in bytes per second.
  double measure(int repeats = 5) {
    const int parts = pool_.size();
    const std::size_t per_part = buffer_.size() / std::size_t(parts);
    std::vector<float> sums(static_cast<std::size_t>(parts));
    double best = 0;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      pool_.parallel_for(parts, [&](int p) { sums[std::size_t(p)] = stream_sum(buffer_.data() + std::size_t(p) * per_part, per_part); });
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, double(per_part * std::size_t(parts) * sizeof(float)) / seconds);
    }
    volatile float sink = sums[0];  // keeps the sums alive
    (void)sink;
    return best;
  }

 private:
  polyattn::detail::ZeroedBuffer<float> buffer_;
  ThreadPool pool_;
};

/// Best-of-`repeats` streaming read over `bytes` with `threads` threads, in bytes per second.
inline double measure_read_bandwidth(std::size_t bytes = std::size_t(2) << 30, int threads = 0, int repeats = 5) {
  return ReadProbe(bytes, threads).measure(repeats);
}

/// The process's probe (2 GiB, every thread), made on first use and kept.
inline ReadProbe& read_probe() {
  static ReadProbe probe;
  return probe;
}

/// The read bandwidth measured once per process, on first use.
inline double read_bandwidth() {
  static const double bandwidth = read_probe().measure();
  return bandwidth;
}

}  // namespace polyattn::bench
