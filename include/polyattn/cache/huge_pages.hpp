// Asks the OS to back a large buffer with 2 MiB pages (Linux transparent huge pages). A decode
// step streams gigabytes of cache; with 4 KiB pages every 4 KiB read is a new TLB entry, and under
// a hypervisor each miss walks two page tables. Only advice: where the OS declines (another OS,
// THP off, no 2 MiB page free) the buffer keeps its 4 KiB pages and nothing else changes.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace polyattn::detail {

inline constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;

/// Advises huge pages for the whole 2 MiB pages inside [data, data + bytes), before they are
/// first touched (the kernel then maps 2 MiB at a time as they are written); returns whether the
/// advice was given (false: none fits, or not Linux, or madvise refused it).
inline bool advise_huge_pages(void* data, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const auto begin = (reinterpret_cast<std::uintptr_t>(data) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) / kHugePageBytes * kHugePageBytes;
  return end > begin && madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE) == 0;
#else
  (void)data, (void)bytes;
  return false;
#endif
}

}  // namespace polyattn::detail
