// This process's resident memory, for tests that check what a buffer or a mapping commits.
#pragma once

#include <unistd.h>

#include <fstream>

namespace polyattn::testing {

/// Resident bytes of this process (Linux /proc/self/statm: anonymous and file-backed pages), or
/// -1 where it cannot be read.
inline long long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long long size = 0, resident = -1;
  if (!(statm >> size >> resident)) return -1;
  return resident * sysconf(_SC_PAGESIZE);
}

}  // namespace polyattn::testing
