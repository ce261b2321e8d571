// A small fork-join thread pool for the CPU executor.
//
// Why not OpenMP: a header-only library would force -fopenmp (and its runtime) on every
// consumer, and OpenMP's pool is global so two Attention objects could not use different thread
// counts. This pool is per executor, needs only <thread>, and the calling thread does work too.
//
// One parallel_for runs at a time per pool (callers on other threads wait their turn). A task
// that calls parallel_for on the pool running it gets its inner tasks run inline, on its own
// thread: the pool's threads are all busy with the outer call, and waiting for them would never end.
//
// A program that already keeps a team of threads (OpenMP for its GEMMs, TBB, a job system) can
// lend it instead (Threads with a ParallelFor): the pool then starts no thread and runs its tasks
// through the caller's parallel-for. On few cores, two teams that take turns cost more than the
// work between them: each wakes its threads from sleep, and one team's threads spin on the cores
// the other needs (the Whisper example: 15% of its samples in libgomp's wait while polyattn's
// workers ran, examples/whisper/README.md).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "polyattn/core/error.hpp"
#include "polyattn/core/threads.hpp"

namespace polyattn {

class ThreadPool {
 public:
  /// Starts a thread that runs `body`. The default is std::thread, which throws std::system_error
  /// when the system cannot create another thread; tests pass one that fails on purpose.
  using StartThread = std::function<std::thread(std::function<void()> body)>;

  /// `threads.count` counts the caller: 1 runs everything inline; 0 means usable_cores().
  /// With `threads.run` set no thread is started: parallel_for hands its tasks to it. Throws
  /// polyattn::Error, with every worker it started stopped and joined, when a worker thread
  /// cannot be started.
  explicit ThreadPool(Threads threads = {}, const StartThread& start_thread = start_std_thread) : lent_(std::move(threads.run)) {
    require<ShapeError>(threads.count >= 0, "ThreadPool: threads must be >= 0, got ", threads.count);
    const int count = threads.count > 0 ? threads.count : usable_cores();
    size_ = count;
    if (lent_) return;
    workers_.reserve(std::size_t(count - 1));
    for (int i = 1; i < count; ++i) {
      try {
        workers_.push_back(start_thread([this] { worker_loop(); }));
      } catch (...) {
        stop_workers();  // joinable threads left in workers_ would call std::terminate
        throw Error(detail::concat("polyattn: ThreadPool: could not start worker thread ", i, " of ", count - 1, " (for ",
                                   count, " threads): ", what(std::current_exception())));
      }
    }
  }

  ~ThreadPool() { stop_workers(); }

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  /// Whether the tasks run on a lent team (Threads::run) rather than on threads of the pool's own.
  bool lent() const { return bool(lent_); }

  /// Runs task(i) for i in [0, n), spread over the pool; returns when all are done. Every task
  /// runs even when some throw; the first exception thrown is rethrown here.
  void parallel_for(int n, const std::function<void(int)>& task) {
    if (n <= 0) return;
    if (size_ == 1 || n == 1 || running_here_ == this) {
      run_inline(n, task);
      return;
    }
    std::unique_lock call_lock(call_mutex_);  // one parallel_for at a time per pool
    if (lent_) {
      run_lent(n, task);
      return;
    }
    {
      std::lock_guard lock(mutex_);
      task_ = &task;
      n_tasks_ = n;
      next_.store(0);
      busy_workers_ = int(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    run_tasks();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return busy_workers_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  static std::thread start_std_thread(std::function<void()> body) { return std::thread(std::move(body)); }

  static std::string what(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "an exception not derived from std::exception";
    }
  }

  /// Marks the calling thread as running tasks of this pool for the scope (nested calls run inline).
  class RunningHere {
   public:
    explicit RunningHere(const ThreadPool* pool) : previous_(std::exchange(running_here_, pool)) {}
    ~RunningHere() { running_here_ = previous_; }
    RunningHere(const RunningHere&) = delete;
    RunningHere& operator=(const RunningHere&) = delete;

   private:
    const ThreadPool* previous_;
  };

  void run_inline(int n, const std::function<void(int)>& task) {
    const RunningHere here(this);
    std::exception_ptr first;
    for (int i = 0; i < n; ++i) {
      try {
        task(i);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  // Every task on the lent team, each marked as this pool's (a nested call runs inline) and none
  // letting an exception out (an OpenMP region must not); the first one thrown is rethrown here.
  void run_lent(int n, const std::function<void(int)>& task) {
    std::mutex first_mutex;
    std::exception_ptr first;
    lent_(n, [&](int i) {
      const RunningHere here(this);
      try {
        task(i);
      } catch (...) {
        std::lock_guard lock(first_mutex);
        if (!first) first = std::current_exception();
      }
    });
    if (first) std::rethrow_exception(first);
  }

  void run_tasks() {
    const RunningHere here(this);
    for (int i = next_.fetch_add(1); i < n_tasks_; i = next_.fetch_add(1)) {
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  void worker_loop() {
    std::size_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      run_tasks();
      {
        std::lock_guard lock(mutex_);
        --busy_workers_;
      }
      done_.notify_one();
    }
  }

  void stop_workers() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  /// The pool whose tasks the calling thread is running, if any.
  static inline thread_local const ThreadPool* running_here_ = nullptr;

  ParallelFor lent_;
  int size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* task_ = nullptr;
  int n_tasks_ = 0;
  std::atomic<int> next_{0};
  int busy_workers_ = 0;
  std::size_t generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace polyattn
