// Helpers shared by the Whisper tests: where the shared data and the model live, temporary
// files; the byte writer and random numbers are in test_bytes.hpp (no doctest there, so the
// fuzz harness uses them too).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <unistd.h>  // getpid

#include "test_bytes.hpp"

namespace whisper_test {

inline std::string data_file(const std::string& name) { return std::string(POLYATTN_SHARED_DATA_DIR) + "/" + name; }
inline std::string model_dir() { return POLYATTN_WHISPER_MODEL_DIR; }

// For a test that cannot run (`why`: a file or tool is missing). On a developer's machine the
// test skips with that message; in CI (environment CI=true) it fails, so that a missing model or
// data set never passes silently. Returns false: `if (!have_file(p)) return;`.
inline bool skip_or_fail(const std::string& why) {
  const char* ci = std::getenv("CI");
  if (ci && std::string_view(ci) == "true") FAIL_CHECK("CI=true, so this fails instead of skipping: " << why);
  else MESSAGE("skipped: " << why);
  return false;
}

// True when `path` exists; otherwise skip_or_fail.
inline bool have_file(const std::string& path) {
  return std::filesystem::exists(path) || skip_or_fail(path + " is not present");
}

// Named by the process too: ctest runs test processes side by side.
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("polyattn_whisper_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

// A file temp_path(name) that is removed when this goes out of scope, a failed check included.
class TempFile {
 public:
  explicit TempFile(const std::string& name) : path_(temp_path(name)) {}
  ~TempFile() {
    std::error_code ignored;  // never written (a test that failed first): nothing to remove
    std::filesystem::remove(path_, ignored);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace whisper_test
