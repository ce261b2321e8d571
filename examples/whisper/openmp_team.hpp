// The example's one team of threads: OpenMP's, which Eigen's and oneDNN's products already run
// on, lent to polyattn's CPU executor (polyattn::Threads, core/threads.hpp) so that attention runs
// on the same threads instead of a pool of its own per layer.
//
// Why: a decoding step alternates products and attention about 30 times. With two teams on 2
// cores, each attention woke its pool's sleeping worker while libgomp's thread still spun after
// the last product, on the core the worker needed; 10-15% of a run's samples were in libgomp's
// wait. On one team the thread that spun is the one that runs the next tasks. Measured on the
// EPYC (examples/whisper/README.md, decode step).
//
// Without OpenMP the count alone: the executor's own pool. Every object of a program must agree
// (one definition): the CUDA targets' host code is compiled with OpenMP too
// (examples/whisper/CMakeLists.txt).
#pragma once

#include <functional>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <polyattn/core/threads.hpp>

namespace polyattn::whisper {

/// `threads` OpenMP threads (0 = OpenMP's default team size) as polyattn::Threads: tasks handed
/// out one at a time, in order (the executor puts its longest tasks first).
inline Threads openmp_team(int threads) {
#ifdef _OPENMP
  if (threads <= 0) threads = omp_get_max_threads();
  return Threads(threads, [threads](int n, const std::function<void(int)>& task) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int i = 0; i < n; ++i) task(i);
  });
#else
  return threads;
#endif
}

}  // namespace polyattn::whisper
