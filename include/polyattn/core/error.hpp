// Error types and the checks that raise them. Every message names the offending value and
// what was expected, so a caller can fix the input without reading polyattn's source.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace polyattn {

/// Base of every exception polyattn throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A tensor, shape or configuration does not fit what the policy expects.
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// Appending would exceed a sequence's capacity or the page pool; nothing was written.
class CapacityError : public Error {
 public:
  using Error::Error;
};

/// A sequence id that is not open (never opened, already closed, or out of range).
class SequenceError : public Error {
 public:
  using Error::Error;
};

/// An offline weight conversion cannot be done faithfully (singular or ill-conditioned matrix,
/// values the storage type cannot hold); the message names the layer and the measured figure.
class ConversionError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}
}  // namespace detail

/// Throws `E` with the concatenated message unless `ok`.
template <class E = Error, class... Parts>
void require(bool ok, Parts&&... parts) {
  if (!ok) throw E("polyattn: " + detail::concat(std::forward<Parts>(parts)...));
}

}  // namespace polyattn
