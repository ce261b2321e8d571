// What every fuzz harness shares: one input runs under the allocation budget; a
// polyattn::whisper::Error is the expected answer to bad input; anything else (another exception,
// a broken invariant, a sanitizer report) aborts, so libFuzzer keeps the input as a crash.
//
//   extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
//     return polyattn_fuzz::run_one(data, size, [](std::span<const std::uint8_t> bytes) { ...entry point... });
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>

#include <whisper/error.hpp>

#include "allocation_budget.hpp"

namespace polyattn_fuzz {

// Reports a broken invariant and aborts (libFuzzer saves the input).
[[noreturn]] inline void broken(const std::string& what) {
  std::fprintf(stderr, "\n==fuzz== BROKEN INVARIANT: %s\n", what.c_str());
  std::abort();
}

template <class Body>
int run_one(const std::uint8_t* data, std::size_t size, Body&& body) {
  const AllocationBudget budget(size);
  try {
    body(std::span<const std::uint8_t>(data, size));
  } catch (const polyattn::whisper::Error&) {
    // Bad input rejected with a message: what the loaders promise.
  } catch (const std::exception& e) {
    broken(std::string("threw ") + typeid(e).name() + " (not a polyattn::whisper::Error): " + e.what());
  }
  return 0;
}

inline std::string_view as_text(std::span<const std::uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace polyattn_fuzz
