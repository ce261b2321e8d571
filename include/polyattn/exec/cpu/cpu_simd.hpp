// CPU executor: xsimd kernels (exec/cpu/attend_jobs.hpp: decode, prefill, and how they are split
// over the executor's threads).
//
// The kernels are compiled for one xsimd architecture, a template parameter: its vector width,
// register count (the register blocks follow it) and conversion instructions. CpuSimd takes the
// best one this translation unit is compiled for (xsimd::default_arch: AVX-512 on the Xeon with
// -march=native, AVX2 + FMA on a CPU without AVX-512). A build for AVX-512 also has the AVX2
// instructions, so BasicCpuSimd<xsimd::fma3<xsimd::avx2>> runs there the kernels an AVX2-only CPU
// runs (tests/test_equivalence_cpu.cpp checks them on every machine that has both). To choose the
// architecture when the program runs rather than when it is compiled: exec::DispatchCpuSimd
// (exec/cpu/dispatch_cpu_simd.hpp).
#pragma once

#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include <xsimd/xsimd.hpp>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/key_mask.hpp"
#include "polyattn/exec/cpu/attend_jobs.hpp"
#include "polyattn/exec/cpu/bf16_scores.hpp"
#include "polyattn/exec/cpu/int8_scores.hpp"

namespace polyattn::exec {

template <class Arch>
class BasicCpuSimd {
 public:
  /// "cpu" for CpuSimd, else "cpu/" and xsimd's name of the architecture ("cpu/fma3+avx2").
  static std::string name() { return std::is_same_v<Arch, xsimd::default_arch> ? "cpu" : std::string("cpu/") + Arch::name(); }

  /// `threads` counts the calling thread; 0 = usable_cores(): the CPUs it may run on.
  /// Threads{n, run} runs the kernels on the caller's team instead of a pool of the executor's own
  /// (core/threads.hpp).
  explicit BasicCpuSimd(Threads threads = {}) : state_(std::move(threads)) {}

  int threads() const { return state_.pool->size(); }

  template <KeyMask KeyMaskT = PrefixMask, class Store>
  void attend(const Store& store, const AttendSpec& spec, std::span<const QueryJob> jobs) {
    cpu::attend_jobs<Arch, KeyMaskT>(state_, store, spec, jobs);
  }

 private:
  cpu::ExecutorState state_;
};

/// The CPU executor on the best architecture the translation unit is compiled for.
using CpuSimd = BasicCpuSimd<xsimd::default_arch>;

#if POLYATTN_HAS_BF16_SCORES
/// The AVX-512 kernels with decode's bfloat16 scores by AVX512-BF16 dot products against a query
/// rounded to bfloat16: a named reduced-precision policy (exec/cpu/bf16_scores.hpp says what it
/// changes and its error bound). For a CPU known to have AVX512-BF16; DispatchCpuSimd<cpu::
/// avx512bf16_scores> checks when the program runs.
using CpuSimdBf16Scores = BasicCpuSimd<cpu::avx512bf16_scores>;
#endif

#if POLYATTN_HAS_INT8_SCORES
/// The AVX-512 kernels with decode's int8 scores by AVX512-VNNI dot products against a query
/// rounded to int8 codes per head: a named reduced-precision policy (exec/cpu/int8_scores.hpp says
/// what it changes and its error bound). For a CPU known to have AVX512-VNNI; DispatchCpuSimd<cpu::
/// avx512vnni_scores> checks when the program runs.
using CpuSimdInt8Scores = BasicCpuSimd<cpu::avx512vnni_scores>;
#endif

}  // namespace polyattn::exec
