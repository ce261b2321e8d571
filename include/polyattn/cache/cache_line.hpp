// Cache buffers start on a cache-line boundary. A cached row of 64 floats or 64 halves is a whole
// number of 64-byte lines, and the CPU kernels load it 64 bytes (AVX-512) or 32 bytes (AVX2) at
// a time: from a buffer that starts 16 bytes past a line (glibc's malloc and calloc for large
// blocks: the mapping plus a 16-byte header), every other or every 512-bit load straddles two
// lines and costs two L1 accesses. With the buffers aligned, decode ran faster or the same in
// every case measured (Intel Xeon; one process attending alternately from two caches, one
// aligned and one 16 bytes past a line, the same outputs; L 65536, batch 16): f32 MHA on Hnd
// 1.03-1.10x, on Paged<16> 1.03x, MQA (batch 64) 1.03-1.12x, SlimK2 1.08x, XCache 1.05-1.08x;
// MHA f16 on Hnd and Paged<16> 1.00-1.01x; with the cache in L3 (L 2048, batch 4) 1.01-1.09x.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace polyattn::detail {

inline constexpr std::size_t kCacheLineBytes = 64;

/// A std::allocator for cache buffers held in std::vector (Paged's pools): storage aligned to a
/// cache line.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kCacheLineBytes)));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(kCacheLineBytes)); }

  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept {
    return true;
  }
};

/// A vector whose elements start on a cache line: the CPU kernels' scratch (queries, scores,
/// accumulators, decoded rows), which they load a whole SIMD vector at a time.
template <class T>
using CacheLineVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace polyattn::detail
