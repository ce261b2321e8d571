// A missing model or data file skips a test on a developer's machine and fails it under CI=true
// (test_util.hpp skip_or_fail). Skipped by default; ctest whisper.missing_file_* run it with
// --no-skip, with and without CI=true.
#include <doctest/doctest.h>

#include "test_util.hpp"

TEST_SUITE("skips") {
  TEST_CASE("a missing file skips, or fails under CI=true" * doctest::skip()) {
    CHECK(!whisper_test::have_file(whisper_test::temp_path("this-file-is-never-created")));
  }
}
