// A Dense engine's own copies of the weights it multiplies (dense.hpp lets an engine keep them and
// find them again by the weight's address): each made once, at the weight's first use, by the
// engine (rounded to bfloat16, quantized to int8, copied to a device), and kept as long as the
// engine. One rule for every engine: a weight met again at a known address must be the one that
// was converted, with the same shape and the same bits at its first, middle and last values.
// Anything else is refused with an error: multiplying by the stale copy would be silently wrong
// (another weight at a reused address, or a weight changed in place). The sample catches a new
// weight and a wholesale change, not every edit of single values; dense.hpp's contract is that
// weights stay unchanged.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "error.hpp"
#include "weight_matrix.hpp"

namespace polyattn::whisper {

/// What a copy was made from: the weight's shape and the bits of three of its values.
struct WeightFingerprint {
  std::int64_t rows = 0, cols = 0;
  std::array<std::uint32_t, 3> bits{};  // values at flat indices 0, size / 2, size - 1, as float bits

  friend bool operator==(const WeightFingerprint&, const WeightFingerprint&) = default;

  /// A (rows, cols) matrix of `value(flat index)` floats.
  template <class Value>
  static WeightFingerprint sample(std::int64_t rows, std::int64_t cols, Value&& value) {
    WeightFingerprint f{rows, cols, {}};
    const std::int64_t size = rows * cols;
    if (size == 0) return f;
    const std::int64_t at[3] = {0, size / 2, size - 1};
    for (int i = 0; i < 3; ++i) f.bits[std::size_t(i)] = std::bit_cast<std::uint32_t>(float(value(at[i])));
    return f;
  }
  /// A contiguous row-major float matrix.
  static WeightFingerprint of(const float* values, std::int64_t rows, std::int64_t cols) {
    return sample(rows, cols, [&](std::int64_t i) { return values[i]; });
  }
  /// A weight in its stored precision.
  static WeightFingerprint of(const WeightMatrix& w) {
    return sample(w.rows(), w.cols(), [&](std::int64_t i) { return w.value(i / w.cols(), i % w.cols()); });
  }

  std::string shape() const { return std::to_string(rows) + "x" + std::to_string(cols); }
};

/// The copies, by the weight's address. Thread-safe; `make` runs under the lock.
template <class Copy>
class ConvertedWeights {
 public:
  /// `engine` starts the refusal message ("onednn int8").
  explicit ConvertedWeights(std::string engine) : engine_(std::move(engine)) {}

  /// The copy of the weight at `address`, made by make() (returning a Copy) at its first use. A
  /// make() that throws leaves nothing behind. The reference stays valid as the table grows.
  template <class Make>
  const Copy& get(const void* address, const WeightFingerprint& fingerprint, Make&& make) {
    const std::lock_guard lock(mutex_);
    if (const auto it = copies_.find(address); it != copies_.end()) {
      if (!(it->second.fingerprint == fingerprint))
        throw Error(engine_ + ": the weight at a known address changed or is another one (now " + fingerprint.shape() + ", was " +
                    it->second.fingerprint.shape() +
                    "): weights must outlive the engine unchanged (dense.hpp); use one engine per model and decoder");
      return *it->second.copy;
    }
    auto copy = std::make_unique<const Copy>(make());
    return *copies_.emplace(address, Entry{fingerprint, std::move(copy)}).first->second.copy;
  }

  /// Weights converted so far.
  std::size_t size() const {
    const std::lock_guard lock(mutex_);
    return copies_.size();
  }

 private:
  struct Entry {
    WeightFingerprint fingerprint;
    std::unique_ptr<const Copy> copy;  // its own allocation: a reference survives a rehash
  };
  std::string engine_;
  mutable std::mutex mutex_;
  std::unordered_map<const void*, Entry> copies_;
};

}  // namespace polyattn::whisper
