// Test support: an exception of type E whose message contains a given phrase, so tests check
// that errors name the offending value, not only that something was thrown.
#pragma once

#include <string>

#include <doctest/doctest.h>

namespace polyattn::testing {

template <class E, class F>
void check_throws_with(F&& f, const std::string& needle) {
  try {
    f();
    FAIL("expected an exception mentioning: ", needle);
  } catch (const E& e) {
    INFO("message: ", std::string(e.what()));
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

}  // namespace polyattn::testing
