// A small fork-join thread pool for the CPU executor.
//
// Why not OpenMP: a header-only library would force -fopenmp (and its runtime) on every
// consumer, OpenMP's pool is global so two Attention objects cannot use different thread
// counts, and it fights Eigen's own OpenMP GEMM threading in applications that use both.
// This pool is per executor, needs only <thread>, and the calling thread does work too.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "polyattn/core/error.hpp"

namespace polyattn {

class ThreadPool {
 public:
  /// `threads` counts the caller: 1 runs everything inline; 0 means hardware_concurrency().
  explicit ThreadPool(int threads = 0) {
    require<ShapeError>(threads >= 0, "ThreadPool: threads must be >= 0, got ", threads);
    if (threads == 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
    size_ = threads;
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  /// Runs task(i) for i in [0, n), spread over the pool; returns when all are done. The first
  /// exception thrown by a task is rethrown here (remaining tasks still run to completion).
  void parallel_for(int n, const std::function<void(int)>& task) {
    if (n <= 0) return;
    if (size_ == 1 || n == 1) {
      for (int i = 0; i < n; ++i) task(i);
      return;
    }
    std::unique_lock call_lock(call_mutex_);  // one parallel_for at a time per pool
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
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void run_tasks() {
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
