// Helpers shared by the Whisper tests: where the shared data and the model live, temporary
// files; the byte writer and random numbers are in test_bytes.hpp (no doctest there, so the
// fuzz harness uses them too).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "test_bytes.hpp"

namespace whisper_test {

inline std::string data_file(const std::string& name) { return std::string(POLYATTN_SHARED_DATA_DIR) + "/" + name; }
inline std::string model_dir() { return POLYATTN_WHISPER_MODEL_DIR; }

// True when `path` exists; otherwise prints why the calling test is skipped.
inline bool have_file(const std::string& path) {
  if (std::filesystem::exists(path)) return true;
  MESSAGE("skipped: " << path << " is not present");
  return false;
}

inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("polyattn_whisper_test_" + name)).string();
}

}  // namespace whisper_test
