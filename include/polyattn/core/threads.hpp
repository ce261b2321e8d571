// The threads an executor runs its work on: a count for a pool of its own (core/thread_pool.hpp),
// or a team the program already keeps, lent through a parallel-for.
#pragma once

#include <algorithm>
#include <functional>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <sched.h>
#endif

namespace polyattn {

/// Runs task(i) exactly once for every i in [0, n) and returns when all have run, on threads of
/// the caller's choosing. `task` never throws (the pool catches what its tasks throw before they
/// return). It must not throw itself once a task has started (the tasks' state lives on the
/// caller's stack), and it may be called from inside one of its own tasks when a program nests
/// executors on one team (OpenMP's nested regions run inline; a job system must allow it too).
using ParallelFor = std::function<void(int n, const std::function<void(int)>& task)>;

/// The cores this process may run on, what a thread count of 0 means: on Linux the CPUs of the
/// calling thread's affinity mask (a container's cpuset, taskset, numactl), else
/// std::thread::hardware_concurrency(), which counts every online CPU whatever the mask; at
/// least 1. (With hardware_concurrency alone, `taskset -c 0` on a 2-core VM gave a pool of 2
/// threads that took turns on the one core: bench/results/cpu_decode_variants/README.md.)
inline int usable_cores() {
#if defined(__linux__)
  cpu_set_t cpus;  // (a mask of more than CPU_SETSIZE CPUs fails with EINVAL: the fallback)
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) return std::max(1, CPU_COUNT(&cpus));
#endif
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

/// The threads an executor runs on: `count` threads counting the caller (0 = usable_cores()) of
/// its own pool, or, when `run` is set, of the caller's team through `run`, the executor
/// splitting its work for `count` threads (give the team's size: 0 means usable_cores() here
/// too). An int converts to it, so every `threads` argument still takes a count.
struct Threads {
  Threads(int thread_count = 0) : count(thread_count) {}  // NOLINT(google-explicit-constructor): a count is a Threads
  Threads(int thread_count, ParallelFor team_run) : count(thread_count), run(std::move(team_run)) {}

  int count = 0;
  ParallelFor run;
};

}  // namespace polyattn
