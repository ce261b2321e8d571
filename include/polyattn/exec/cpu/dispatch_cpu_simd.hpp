// exec::DispatchCpuSimd<Arch>: the CPU executor that chooses its kernels when the program runs.
// On a CPU that runs Arch it uses Arch's kernels, elsewhere those of the architecture its own
// translation unit is compiled for (CpuSimd's). One binary built for AVX2 (-march=x86-64-v3)
// then runs the AVX-512 kernels on a CPU that has AVX-512, whether Intel or AMD.
//
// xsimd (8.1) defines an architecture's vectors only where the compiler targets it, so Arch's
// kernels are compiled in a translation unit built for Arch, and the others only declare them:
//
//   // attention.hpp: the Attention types the program uses, and the kernels it finds elsewhere
//   using Layer = polyattn::Attention<polyattn::Gqa<4>, polyattn::Hnd,
//                                     polyattn::exec::DispatchCpuSimd<xsimd::avx512bw>, Eigen::half>;
//   POLYATTN_EXTERN_CPU_KERNELS(xsimd::avx512bw, Layer)
//
//   // kernels_avx512.cpp, compiled with -march=x86-64-v4 (AVX-512 F, BW, CD, DQ, VL)
//   #include "attention.hpp"
//   POLYATTN_CPU_KERNELS(xsimd::avx512bw, Layer)
//
// The kernels are per (key mask, cache store) pair, which the macros take from an Attention type:
// name each pair once (Attention types that differ only in their variant share one; the
// compiler refuses a pair instantiated twice). POLYATTN_CPU_KERNELS_FOR names any other pair the
// executor is given (an uncached attention's MatrixRows, the views of a variant that derives
// rows). A pair that was not declared does not compile, with a message that says so: never a
// silent fall back to the slower kernels. Write the macros at global scope (explicit
// instantiations belong to a namespace that encloses polyattn's).
//
// Link the Arch translation unit into a shared library that exports nothing but its kernels (a
// linker version script; cmake/cpu_kernels.map is one). The functions it compiles inline
// for Arch (the standard library's and Eigen's among them) then stay in it: linked statically,
// the linker would keep one copy of each inline function, perhaps Arch's, and a CPU without Arch
// would fail on it far from any kernel.
#pragma once

#include <span>
#include <string>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/key_mask.hpp"
#include "polyattn/exec/cpu/attend_jobs.hpp"
#include "polyattn/exec/cpu/bf16_scores.hpp"
#include "polyattn/exec/cpu/int8_scores.hpp"

namespace polyattn::exec {

namespace cpu {

/// Whether the CPU running the program, and its operating system, execute what a translation
/// unit built for Arch may contain: x86-64-v3 (AVX2, FMA, F16C, BMI, LZCNT, MOVBE) for
/// fma3<avx2>, x86-64-v4 (v3 and AVX-512 F, BW, CD, DQ, VL) for avx512bw. GCC checks the
/// registers' state is saved by the OS (XCR0); clang 14 does not know the names f16c, lzcnt and
/// movbe, which every CPU with AVX2 and BMI2 has.
template <class Arch>
bool cpu_runs() {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
                  __builtin_cpu_supports("bmi2")
#if !defined(__clang__)
                  && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("lzcnt") && __builtin_cpu_supports("movbe")
#endif
      ;
  if constexpr (std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>) {
    return v3;
  } else if constexpr (std::is_same_v<Arch, xsimd::avx512bw>) {
    return v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  } else if constexpr (std::is_same_v<Arch, avx512bf16_scores>) {
    return cpu_runs<xsimd::avx512bw>() && cpu_runs_avx512bf16();
  } else if constexpr (std::is_same_v<Arch, avx512vnni_scores>) {
    return cpu_runs<xsimd::avx512bw>() && cpu_runs_avx512vnni();
  } else {
    static_assert(sizeof(Arch) == 0, "polyattn: DispatchCpuSimd knows the CPU checks of xsimd::fma3<xsimd::avx2>, xsimd::avx512bw, "
                                     "cpu::avx512bf16_scores and cpu::avx512vnni_scores");
    return false;
  }
#else
  static_assert(sizeof(Arch) == 0, "polyattn: DispatchCpuSimd chooses among x86-64 architectures");
  return false;
#endif
}

}  // namespace cpu

template <class Arch>
class DispatchCpuSimd {
 public:
  using fallback_arch = xsimd::default_arch;

  /// `threads` counts the calling thread (0 = usable_cores(): the CPUs it may run on), or names a
  /// lent team (core/threads.hpp). `use_arch` false keeps the fallback kernels whatever the CPU
  /// (to compare the two in one program).
  explicit DispatchCpuSimd(Threads threads = {}, bool use_arch = true) : state_(std::move(threads)), use_arch_(use_arch && cpu::cpu_runs<Arch>()) {}

  /// "cpu/" and xsimd's names of the two architectures ("cpu/avx512bw|fma3+avx2").
  static std::string name() { return std::string("cpu/") + Arch::name() + "|" + fallback_arch::name(); }

  /// xsimd's name of the architecture whose kernels this executor runs.
  std::string kernels() const { return use_arch_ ? Arch::name() : fallback_arch::name(); }

  /// Whether it runs Arch's kernels (the CPU has Arch and the constructor did not refuse them).
  bool uses_arch() const { return use_arch_; }

  int threads() const { return state_.pool->size(); }

  template <KeyMask KeyMaskT = PrefixMask, class Store>
  void attend(const Store& store, const AttendSpec& spec, std::span<const QueryJob> jobs) {
    if (use_arch_)
      cpu::attend_jobs<Arch, KeyMaskT>(state_, store, spec, jobs);
    else
      cpu::attend_jobs<fallback_arch, KeyMaskT>(state_, store, spec, jobs);
  }

 private:
  cpu::ExecutorState state_;
  bool use_arch_;
};

}  // namespace polyattn::exec

/// Instantiates Arch's kernels for one (key mask, cache store) pair: in the translation unit
/// built for ARCH.
#define POLYATTN_CPU_KERNELS_FOR(ARCH, MASK, STORE)                                                                        \
  template void ::polyattn::exec::cpu::attend_jobs<ARCH, MASK, STORE>(::polyattn::exec::cpu::ExecutorState&, const STORE&, \
                                                                       const ::polyattn::AttendSpec&,                       \
                                                                       ::std::span<const ::polyattn::QueryJob>);
/// Declares them where they are called: every other translation unit that uses the pair.
#define POLYATTN_EXTERN_CPU_KERNELS_FOR(ARCH, MASK, STORE) extern POLYATTN_CPU_KERNELS_FOR(ARCH, MASK, STORE)

/// The same for the pair an Attention type gives its executor (its key mask and cache store).
#define POLYATTN_CPU_KERNELS(ARCH, ATTENTION) POLYATTN_CPU_KERNELS_FOR(ARCH, ATTENTION::mask_type, ATTENTION::Store)
#define POLYATTN_EXTERN_CPU_KERNELS(ARCH, ATTENTION) POLYATTN_EXTERN_CPU_KERNELS_FOR(ARCH, ATTENTION::mask_type, ATTENTION::Store)
