// The two roofs of a decode step, measured once per process in the benchmark's own run (2
// threads here, as the executor uses): streaming read bandwidth and fp32 multiply-add
// throughput. A step's roofline time is max(bytes / read bandwidth, multiply-adds / FMA rate).
#pragma once

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <string>

#include <benchmark/benchmark.h>

#include "support/fma_throughput.hpp"
#include "support/read_bandwidth.hpp"

namespace polyattn::bench {

/// Multiply-adds per second of every core, measured once per process, on first use.
inline double fma_throughput() {
  static const double rate = measure_fma_throughput();
  return rate;
}

/// `/proc/cpuinfo`'s first model name ("unknown" elsewhere): the context of every figure.
inline std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

/// Counters of one decode step against both roofs: bytes and multiply-adds per step, achieved
/// GB/s, fraction of the read probe, the roofline time (us), which roof binds (1 = memory), and
/// of_roofline = roofline time / measured time (1.0 = at the roof). Call after the timing loop.
/// `read_bw` and `fma_rate`: the roofs in bytes/s and multiply-adds/s (default: the process's
/// first probes).
inline void report_roofline(benchmark::State& state, double bytes_per_step, double macs_per_step, double read_bw = read_bandwidth(),
                            double fma_rate = fma_throughput()) {
  using benchmark::Counter;
  const double memory_s = bytes_per_step / read_bw, compute_s = macs_per_step / fma_rate;
  const double roofline_s = std::max(memory_s, compute_s);
  state.counters["MB_per_step"] = bytes_per_step * 1e-6;
  state.counters["MFMA_per_step"] = macs_per_step * 1e-6;
  state.counters["GB_per_s"] = Counter(bytes_per_step * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["of_read_bw"] = Counter(memory_s, Counter::kIsIterationInvariantRate);
  state.counters["roofline_us"] = roofline_s * 1e6;
  state.counters["memory_bound"] = memory_s >= compute_s ? 1.0 : 0.0;
  state.counters["of_roofline"] = Counter(roofline_s, Counter::kIsIterationInvariantRate);
}

/// The machine and both roofs as benchmark context (printed once at the top, and in the JSON).
inline void add_roofline_context() {
  benchmark::AddCustomContext("cpu_model", cpu_model_name());
  benchmark::AddCustomContext("read_probe_GB_per_s", std::to_string(read_bandwidth() * 1e-9));
  benchmark::AddCustomContext("fma_probe_GFMA_per_s", std::to_string(fma_throughput() * 1e-9));
}

/// A roofline benchmark's main: Google Benchmark's flags, the roofs as context, then every
/// registered benchmark. `int main(int argc, char** argv) { return run_roofline_benchmarks(argc, argv); }`
inline int run_roofline_benchmarks(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  add_roofline_context();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace polyattn::bench
