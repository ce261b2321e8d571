// This process's resident memory, for tests that check what a buffer or a mapping commits.
#pragma once

#include <unistd.h>

#include <fstream>
#include <string>

namespace polyattn::testing {

/// Resident bytes of this process (Linux /proc/self/statm: anonymous and file-backed pages), or
/// -1 where it cannot be read.
inline long long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long long size = 0, resident = -1;
  if (!(statm >> size >> resident)) return -1;
  return resident * sysconf(_SC_PAGESIZE);
}

/// Why resident memory cannot be measured in this process, or nullptr where it can.
/// AddressSanitizer is no reason: its shadow adds about an eighth of what a test writes, inside
/// the checks' margins. They ran and passed under Clang 14's ASan+UBSan (CI's dev pass, which
/// never skipped them: Clang 14 does not define __SANITIZE_ADDRESS__, on which they used to skip)
/// and under GCC 12's (test_cache_layouts and test_formats, Debian 12, 2026-12-07).
inline const char* resident_memory_unmeasurable() {
  return resident_bytes() < 0 ? "no /proc/self/statm to read resident memory from" : nullptr;
}

/// Bytes of this process's anonymous memory mapped as transparent huge pages (Linux
/// /proc/self/smaps_rollup, AnonHugePages), or -1 where it cannot be read.
inline long long huge_page_bytes() {
  std::ifstream rollup("/proc/self/smaps_rollup");
  std::string key;
  long long kib = 0;
  while (rollup >> key) {
    if (key == "AnonHugePages:" && rollup >> kib) return kib * 1024;
    rollup.ignore(1 << 20, '\n');
  }
  return -1;
}

/// The system's transparent huge page mode ("always", "madvise" or "never"), or "" where it
/// cannot be read.
inline std::string huge_page_mode() {
  std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string word;
  while (enabled >> word)
    if (word.size() > 2 && word.front() == '[' && word.back() == ']') return word.substr(1, word.size() - 2);
  return "";
}

}  // namespace polyattn::testing
