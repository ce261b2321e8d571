// Bookkeeping shared by every cache store: which sequence slots are open, how many tokens each
// holds, and the capacity checks. Checks never modify state, so a failed append loses nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "polyattn/core/error.hpp"

namespace polyattn {

class SequenceTable {
 public:
  SequenceTable(int max_sequences, int capacity)
      : capacity_(capacity), length_(checked_slots(max_sequences, capacity), kClosed), generation_(length_.size(), 0) {}

  int max_sequences() const { return int(length_.size()); }
  int capacity() const { return capacity_; }

  bool is_open(int seq) const { return seq >= 0 && seq < max_sequences() && length_[std::size_t(seq)] != kClosed; }

  void check_open(int seq) const {
    require<SequenceError>(is_open(seq), "sequence ", seq, " is not open (slots 0..", max_sequences() - 1,
                           "; open one with open_sequence())");
  }

  int length(int seq) const {
    check_open(seq);
    return length_[std::size_t(seq)];
  }

  /// Which opening of slot `seq` this is: a stamp, unique within this table, taken when the slot
  /// was opened. A copy of the cache kept elsewhere (a GPU mirror) compares it to tell a slot
  /// that was closed and reopened from one that only grew.
  std::uint64_t generation(int seq) const {
    check_open(seq);
    return generation_[std::size_t(seq)];
  }

  int free_slots() const { return int(std::count(length_.begin(), length_.end(), kClosed)); }

  /// Throws CapacityError unless a slot is free for open().
  void check_free_slot() const {
    for (int len : length_)
      if (len == kClosed) return;
    throw CapacityError(detail::concat("polyattn: all ", max_sequences(),
                                       " sequence slots are open; close one or raise CacheConfig.max_sequences"));
  }

  /// Opens the lowest free slot.
  int open() {
    for (int s = 0; s < max_sequences(); ++s)
      if (length_[std::size_t(s)] == kClosed) {
        length_[std::size_t(s)] = 0;
        generation_[std::size_t(s)] = ++opened_;
        return s;
      }
    throw CapacityError(detail::concat("polyattn: all ", max_sequences(),
                                       " sequence slots are open; close one or raise CacheConfig.max_sequences"));
  }

  void close(int seq) {
    check_open(seq);
    length_[std::size_t(seq)] = kClosed;
  }

  void check_room(int seq, int n) const {
    const int len = length(seq);
    require<ShapeError>(n >= 0, "cannot append a negative number of tokens (", n, ")");
    require<CapacityError>(n <= capacity_ - len, "sequence ", seq, " holds ", len, " of ", capacity_,
                           " tokens; appending ", n, " would overflow its capacity");
  }

  /// Reserves n tokens after the checks; returns the first new position.
  int grow(int seq, int n) {
    check_room(seq, n);
    const int first = length_[std::size_t(seq)];
    length_[std::size_t(seq)] += n;
    return first;
  }

 private:
  /// Sequence slots, once both values are checked (before anything is sized by them).
  static std::size_t checked_slots(int max_sequences, int capacity) {
    require<ShapeError>(max_sequences >= 1, "CacheConfig.max_sequences must be >= 1, got ", max_sequences);
    require<ShapeError>(capacity >= 1, "CacheConfig.capacity must be >= 1, got ", capacity);
    return std::size_t(max_sequences);
  }

  static constexpr int kClosed = -1;
  int capacity_;
  std::vector<int> length_;
  std::vector<std::uint64_t> generation_;
  std::uint64_t opened_ = 0;  // slots opened so far
};

}  // namespace polyattn
