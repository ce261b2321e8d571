// What one core can read: a streaming sum over a 2 GiB buffer (2 MiB pages where the OS offers
// them) of float, half or int8 elements converted to fp32 as the decode kernels load them
// (exec/cpu/load_floats.hpp), on 1 or 2 threads, with or without software asks (prefetcht2, as
// the kernels ask) for the lines `distance` bytes ahead, every line or every k-th one. The decode
// kernels' 16-bit and int8 cases are judged against the read probe (support/read_bandwidth.hpp,
// float loads): this says how much of that a core reaches when each line takes more
// instructions, and how many asks it needs. No time is asserted; compare the cases of one run.
//
//   bench_read_streams --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// Cases: BM_ReadStream<T>/threads:N/ask_distance:D/ask_every:K (D 0: no asks; K lines: every
// K-th line is asked for, 64 = the first line of each 4 KiB page).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include <polyattn/cache/zeroed_buffer.hpp>
#include <polyattn/core/thread_pool.hpp>

#include "support/roofline.hpp"

namespace {

/// The buffer every case reads, written once so that every page is mapped.
const polyattn::detail::ZeroedBuffer<std::uint8_t>& stream_buffer() {
  static const auto buffer = [] {
    polyattn::detail::ZeroedBuffer<std::uint8_t> b(std::size_t(2) << 30, /*huge_pages=*/true);
    std::fill_n(b.data(), b.size(), std::uint8_t(1));
    return b;
  }();
  return buffer;
}

template <class T>
void BM_ReadStream(benchmark::State& state) {
  const int threads = int(state.range(0));
  const auto distance = std::size_t(state.range(1)), every = std::size_t(state.range(2));
  const auto& buffer = stream_buffer();
  polyattn::ThreadPool pool(threads);
  const std::size_t per_part = buffer.size() / std::size_t(threads) / 4096 * 4096;
  std::vector<float> sums(static_cast<std::size_t>(threads));
  for (auto _ : state) {
    pool.parallel_for(threads, [&](int t) {
      // the last part stops `distance` short, so that no ask passes the buffer's end
      const std::size_t bytes = per_part - (t == threads - 1 ? distance : 0);
      const T* part = reinterpret_cast<const T*>(buffer.data() + std::size_t(t) * per_part);
      sums[std::size_t(t)] = polyattn::bench::stream_sum(part, bytes / sizeof(T), distance, every);
    });
    benchmark::DoNotOptimize(sums.data());
  }
  const double bytes = double(per_part) * threads - double(distance);
  state.counters["GB_per_s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// threads x {no asks; every line 1, 4, 8 KiB ahead; every 2nd, 4th line and each page's first, 8 KiB ahead}
void StreamShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "ask_distance", "ask_every"});
  for (const int threads : {1, 2}) {
    b->Args({threads, 0, 1});
    for (const int distance : {1024, 4096, 8192}) b->Args({threads, distance, 1});
    for (const int every : {2, 4, 64}) b->Args({threads, 8192, every});
  }
  b->UseRealTime()->MinTime(0.5)->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_ReadStream<float>)->Apply(StreamShapes);
BENCHMARK(BM_ReadStream<Eigen::half>)->Apply(StreamShapes);
BENCHMARK(BM_ReadStream<std::int8_t>)->Apply(StreamShapes);

int main(int argc, char** argv) { return polyattn::bench::run_roofline_benchmarks(argc, argv); }
