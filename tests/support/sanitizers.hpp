// Which sanitizer a test build runs under, for tests that cut their largest shapes there.
#pragma once

namespace polyattn::testing {

/// Whether this build runs under AddressSanitizer (GCC's macro; Clang 14 has only the feature test).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAddressSanitizer = true;
#elif defined(__has_feature)
constexpr bool kUnderAddressSanitizer = __has_feature(address_sanitizer);
#else
constexpr bool kUnderAddressSanitizer = false;
#endif

}  // namespace polyattn::testing
