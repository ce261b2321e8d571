// Owners of CUDA resources: device buffers (plain cudaMalloc, no managed memory), pinned host
// buffers for asynchronous copies, and a stream. Move-only; sizes grow and never shrink.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

#include "polyattn/exec/cuda/cuda_error.cuh"

namespace polyattn::exec::cuda {

namespace detail {
/// Bytes of device memory held by polyattn's DeviceBuffers in this process, now and at the most
/// (what a policy costs on the GPU; cuBLAS workspaces and the CUDA context are not counted).
struct DeviceBytes {
  static inline std::atomic<std::size_t> held{0}, peak{0};
  static void add(std::size_t bytes) {
    const std::size_t now = held.fetch_add(bytes) + bytes;
    std::size_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
  static void remove(std::size_t bytes) { held.fetch_sub(bytes); }
};

struct DeviceFree {
  static void release(void* p, std::size_t bytes) {
    cudaFree(p);
    DeviceBytes::remove(bytes);
  }
  static cudaError_t allocate(void** p, std::size_t bytes) {
    const cudaError_t code = cudaMalloc(p, bytes);
    if (code == cudaSuccess) DeviceBytes::add(bytes);
    return code;
  }
  static constexpr const char* what = "cudaMalloc";
};
struct PinnedFree {
  static void release(void* p, std::size_t) { cudaFreeHost(p); }
  static cudaError_t allocate(void** p, std::size_t bytes) { return cudaMallocHost(p, bytes); }
  static constexpr const char* what = "cudaMallocHost";
};

template <class T, class Memory>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      free();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~Buffer() { free(); }

  /// Makes room for `n` elements; the contents are lost when it grows.
  void reserve(std::size_t n) {
    if (n <= size_) return;
    free();
    void* p = nullptr;
    const cudaError_t code = Memory::allocate(&p, n * sizeof(T));
    if (code != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky; clear it
      throw CudaError(std::string(Memory::what) + "(" + std::to_string(n * sizeof(T)) + " bytes)", code);
    }
    data_ = static_cast<T*>(p);
    size_ = n;
  }

  T* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  void free() {
    if (data_) Memory::release(data_, size_ * sizeof(T));
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};
}  // namespace detail

/// Bytes held by DeviceBuffers now, and the most held at once since the process started.
inline std::size_t device_bytes_held() { return detail::DeviceBytes::held.load(); }
inline std::size_t device_bytes_peak() { return detail::DeviceBytes::peak.load(); }

/// Device memory (cudaMalloc).
template <class T>
using DeviceBuffer = detail::Buffer<T, detail::DeviceFree>;

/// Page-locked host memory (cudaMallocHost), the source and target of asynchronous copies.
template <class T>
using PinnedBuffer = detail::Buffer<T, detail::PinnedFree>;

/// A non-blocking stream owned by one executor.
class Stream {
 public:
  Stream() { POLYATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      if (stream_) cudaStreamDestroy(stream_);
      stream_ = std::exchange(o.stream_, nullptr);
    }
    return *this;
  }
  ~Stream() {
    if (stream_) cudaStreamDestroy(stream_);
  }

  cudaStream_t get() const { return stream_; }
  void synchronize() const { POLYATTN_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

/// A timing event (for the kernel time of the last call).
class Event {
 public:
  Event() { POLYATTN_CUDA_CHECK(cudaEventCreate(&event_)); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      if (event_) cudaEventDestroy(event_);
      event_ = std::exchange(o.event_, nullptr);
    }
    return *this;
  }
  ~Event() {
    if (event_) cudaEventDestroy(event_);
  }

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream) const { POLYATTN_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  void record(const Stream& stream) const { record(stream.get()); }

  /// Seconds from `start` to this event; both must have completed.
  double seconds_since(const Event& start) const {
    float ms = 0;
    POLYATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
    return double(ms) * 1e-3;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace polyattn::exec::cuda
