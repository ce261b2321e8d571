// How much of a benchmark's cache Linux backed with 2 MiB pages. CacheConfig::huge_pages only
// advises them (cache/huge_pages.hpp): with THP off, or too few free 2 MiB blocks (memory
// fragmented by the gigabytes earlier cases mapped and freed), Linux falls back to 4 KiB pages,
// and a step then pays a TLB miss every 4 KiB. A figure read on such pages is a different
// machine's figure, so each case reports the share it got.
#pragma once

#include <fstream>
#include <string>

namespace polyattn::bench {

/// Bytes of this process's anonymous memory on transparent huge pages (AnonHugePages of
/// /proc/self/smaps_rollup), or -1 where that file is absent (not Linux, or a kernel before 4.14).
inline double anon_huge_page_bytes() {
  std::ifstream rollup("/proc/self/smaps_rollup");
  if (!rollup) return -1;
  for (std::string line; std::getline(rollup, line);)
    if (line.rfind("AnonHugePages:", 0) == 0) return 1024.0 * std::stod(line.substr(line.find(':') + 1));  // "... kB"
  return -1;
}

}  // namespace polyattn::bench
