// An A/B of the CPU decode kernels in one process: loads the cases of two commits (ab_decode.cpp
// built against each one's headers: before.so, after.so), fills every case's cache on both sides,
// then calls one decode step of each case on each side in turn, `rounds` times (which side goes
// first alternates by round). Calls of the two sides a few milliseconds apart see the same
// machine, so the ratio of each round's pair of calls is the figure: a VM's bandwidth drifts
// between processes and within minutes. Prints per case the minimum and median of each side in
// ms, the ratio of the medians, the median and range of the per-round ratios, and whether the
// outputs' sums agree (equal: the same arithmetic). Name unchanged cases as controls: on the Intel
// Xeon VM of 2026-12-01 the controls read 0.98-1.04 at L 65536, batch 16 (tens of ms a step), but
// two identical sides read 0.74-0.80 at L 4096, batch 1 (under a millisecond, in the L3): where a
// step is that short, where each side's cache landed in memory shows, not only the kernels.
//   ab_main before.so after.so L batch rounds case [case ...]
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

/// One side's cases.
struct Side {
  void* (*make)(const char*, int, int);
  double (*step)(void*);
};

Side load(const char* path) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "%s\n", dlerror());
    std::exit(2);
  }
  Side side{reinterpret_cast<void* (*)(const char*, int, int)>(dlsym(lib, "ab_make_case")),
            reinterpret_cast<double (*)(void*)>(dlsym(lib, "ab_step"))};
  if (!side.make || !side.step) {
    std::fprintf(stderr, "%s: no ab_make_case or ab_step\n", path);
    std::exit(2);
  }
  return side;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: ab_main before.so after.so L batch rounds case [case ...]\n");
    return 2;
  }
  const Side sides[2] = {load(argv[1]), load(argv[2])};
  const int length = std::atoi(argv[3]), batch = std::atoi(argv[4]), rounds = std::atoi(argv[5]);
  const std::vector<std::string> names(argv + 6, argv + argc);
  std::vector<void*> cases[2];
  for (const auto& n : names)
    for (int s = 0; s < 2; ++s) cases[s].push_back(sides[s].make(n.c_str(), length, batch));
  std::vector<std::vector<double>> ms[2];
  ms[0].resize(names.size());
  ms[1].resize(names.size());
  std::vector<double> sums[2] = {std::vector<double>(names.size()), std::vector<double>(names.size())};
  for (int r = 0; r < rounds; ++r)
    for (std::size_t c = 0; c < names.size(); ++c)
      for (int k = 0; k < 2; ++k) {
        const int s = (r + k) % 2;
        const auto t0 = std::chrono::steady_clock::now();
        sums[s][c] = sides[s].step(cases[s][c]);
        ms[s][c].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
  std::printf("L %d, batch %d, %d rounds; ms; after/before: of the medians, then each round's pair (median, range)\n", length, batch,
              rounds);
  for (std::size_t c = 0; c < names.size(); ++c) {
    std::vector<double> ratio;
    for (int r = 0; r < rounds; ++r) ratio.push_back(ms[1][c][r] / ms[0][c][r]);
    const auto [lo, hi] = std::minmax_element(ratio.begin(), ratio.end());
    std::printf("%-14s before min %8.3f med %8.3f  after min %8.3f med %8.3f  medians %.3f  pairs %.3f [%.3f, %.3f]  %s\n",
                names[c].c_str(), *std::min_element(ms[0][c].begin(), ms[0][c].end()), median(ms[0][c]),
                *std::min_element(ms[1][c].begin(), ms[1][c].end()), median(ms[1][c]), median(ms[1][c]) / median(ms[0][c]),
                median(ratio), *lo, *hi, sums[0][c] == sums[1][c] ? "same sums" : "SUMS DIFFER");
  }
}
