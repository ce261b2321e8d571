// A cache buffer that starts as zeros and costs memory only where it is written, so a contiguous
// layout's capacity (every sequence's rows up front) is address space until rows are written, not
// resident memory. (A std::vector<T>(n, T(0)) writes every element and commits it all.) Only for
// element types whose all-zero bytes are the value zero: float, double, Eigen::half,
// Eigen::bfloat16 and int8 (codes 0, scales 0.0f).
// Where it comes from:
//  - From kMapBytes up, on Linux, from mmap: fresh anonymous pages, which the OS hands out zeroed
//    on first touch. Not calloc: glibc raises its mapping threshold to the size of any mapped block
//    it frees (up to 32 MiB), and a later calloc below that reuses freed heap memory, which it must
//    clear with memset, committing all of it.
//  - Smaller (or elsewhere), from calloc, one cache line longer.
// Either way the elements start on a cache line (cache_line.hpp). With huge_pages the OS is asked
// for 2 MiB pages (huge_pages.hpp): memory is then committed 2 MiB at a time as rows are written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>

#include "polyattn/cache/cache_line.hpp"
#include "polyattn/cache/huge_pages.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace polyattn::detail {

template <class T>
class ZeroedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "polyattn: a zeroed buffer holds trivially copyable elements");

 public:
  /// From this size up a buffer is mapped (glibc's default mapping threshold).
  static constexpr std::size_t kMapBytes = std::size_t(128) << 10;

  ZeroedBuffer() = default;
  /// n elements of value zero; std::bad_alloc when the OS or the allocator refuses.
  explicit ZeroedBuffer(std::size_t n, bool huge_pages = false) : size_(n) {
    if (n == 0) return;
    if (n > (std::size_t(-1) - kCacheLineBytes) / sizeof(T)) throw std::bad_alloc();
    const std::size_t bytes = n * sizeof(T);
#if defined(__linux__)
    if (bytes >= kMapBytes) {
      void* block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (block == MAP_FAILED) throw std::bad_alloc();
      data_ = std::unique_ptr<T, Release>(static_cast<T*>(block), Release{0, bytes});  // page-aligned
      if (huge_pages) advise_huge_pages(block, bytes);
      return;
    }
#endif
    void* block = std::calloc(bytes + kCacheLineBytes, 1);
    if (!block) throw std::bad_alloc();
    const auto address = reinterpret_cast<std::uintptr_t>(block);
    const std::size_t offset = (kCacheLineBytes - address % kCacheLineBytes) % kCacheLineBytes;
    data_ = std::unique_ptr<T, Release>(reinterpret_cast<T*>(static_cast<std::byte*>(block) + offset), Release{offset, 0});
    if (huge_pages) advise_huge_pages(data_.get(), bytes);
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct Release {
    std::size_t offset = 0;        // calloc: from its block to the first element
    std::size_t mapped_bytes = 0;  // mmap: the mapping's length (0: from calloc)
    void operator()(T* p) const {
#if defined(__linux__)
      if (mapped_bytes > 0) {
        munmap(p, mapped_bytes);
        return;
      }
#endif
      std::free(reinterpret_cast<std::byte*>(p) - offset);
    }
  };
  std::unique_ptr<T, Release> data_;
  std::size_t size_ = 0;
};

}  // namespace polyattn::detail
