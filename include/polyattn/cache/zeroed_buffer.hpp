// A cache buffer that starts as zeros and costs memory only where it is written. It comes from
// std::calloc: for large blocks the allocator maps fresh pages, which the OS hands out zeroed on
// first touch, so a contiguous layout's capacity (every sequence's rows up front) is address
// space until rows are written, not resident memory. (A std::vector<T>(n, T(0)) writes every
// element and commits it all.) Only for element types whose all-zero bytes are the value zero:
// float, double, Eigen::half, Eigen::bfloat16 and int8 (codes 0, scales 0.0f).
// With huge_pages the OS is asked for 2 MiB pages (huge_pages.hpp): memory is then committed 2 MiB
// at a time as rows are written. The elements start on a cache line (cache_line.hpp): calloc's
// block is one line longer, and the elements start at its first line boundary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>

#include "polyattn/cache/cache_line.hpp"
#include "polyattn/cache/huge_pages.hpp"

namespace polyattn::detail {

template <class T>
class ZeroedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "polyattn: a zeroed buffer holds trivially copyable elements");

 public:
  ZeroedBuffer() = default;
  /// n elements of value zero; std::bad_alloc when the allocator refuses.
  explicit ZeroedBuffer(std::size_t n, bool huge_pages = false) : size_(n) {
    if (n == 0) return;
    if (n > (std::size_t(-1) - kCacheLineBytes) / sizeof(T)) throw std::bad_alloc();
    void* block = std::calloc(n * sizeof(T) + kCacheLineBytes, 1);
    if (!block) throw std::bad_alloc();
    const auto address = reinterpret_cast<std::uintptr_t>(block);
    const std::size_t offset = (kCacheLineBytes - address % kCacheLineBytes) % kCacheLineBytes;
    data_ = std::unique_ptr<T, Free>(reinterpret_cast<T*>(static_cast<std::byte*>(block) + offset), Free{offset});
    if (huge_pages) advise_huge_pages(data_.get(), n * sizeof(T));
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct Free {
    std::size_t offset = 0;  // from calloc's block to the first element
    void operator()(T* p) const { std::free(reinterpret_cast<std::byte*>(p) - offset); }
  };
  std::unique_ptr<T, Free> data_;
  std::size_t size_ = 0;
};

}  // namespace polyattn::detail
