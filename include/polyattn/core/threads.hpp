// The threads an executor runs its work on: a count for a pool of its own (core/thread_pool.hpp),
// or a team the program already keeps, lent through a parallel-for.
#pragma once

#include <functional>
#include <utility>

namespace polyattn {

/// Runs task(i) exactly once for every i in [0, n) and returns when all have run, on threads of
/// the caller's choosing. `task` never throws (the pool catches what its tasks throw before they
/// return). It must not throw itself once a task has started (the tasks' state lives on the
/// caller's stack), and it may be called from inside one of its own tasks when a program nests
/// executors on one team (OpenMP's nested regions run inline; a job system must allow it too).
using ParallelFor = std::function<void(int n, const std::function<void(int)>& task)>;

/// The threads an executor runs on: `count` threads counting the caller (0 = all hardware
/// threads) of its own pool, or, when `run` is set, of the caller's team through `run`, the
/// executor splitting its work for `count` threads (give the team's size: 0 means all hardware
/// threads here too). An int converts to it, so every `threads` argument still takes a count.
struct Threads {
  Threads(int count = 0) : count(count) {}  // NOLINT(google-explicit-constructor): a count is a Threads
  Threads(int count, ParallelFor run) : count(count), run(std::move(run)) {}

  int count = 0;
  ParallelFor run;
};

}  // namespace polyattn
