// Helpers shared by the Whisper tests: where the shared data and the model live, and
// little-endian byte writers for building test files.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace whisper_test {

inline std::string data_file(const std::string& name) { return std::string(POLYATTN_SHARED_DATA_DIR) + "/" + name; }
inline std::string model_dir() { return POLYATTN_WHISPER_MODEL_DIR; }

// True when `path` exists; otherwise prints why the calling test is skipped.
inline bool have_file(const std::string& path) {
  if (std::filesystem::exists(path)) return true;
  MESSAGE("skipped: " << path << " is not present");
  return false;
}

struct Bytes {
  std::vector<std::uint8_t> b;
  template <class T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const void* p, std::size_t n) {
    const auto* q = static_cast<const std::uint8_t*>(p);
    b.insert(b.end(), q, q + n);
    return *this;
  }
};

inline void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("polyattn_whisper_test_" + name)).string();
}

// Deterministic pseudo-random numbers (splitmix64) so failures reproduce.
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  float normal_ish() { return static_cast<float>((uniform() + uniform() + uniform() - 1.5) * 2.0); }
};

}  // namespace whisper_test
