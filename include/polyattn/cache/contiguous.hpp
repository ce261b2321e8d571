// Contiguous layouts: every sequence owns `capacity` rows of each tensor up front, one page of
// `capacity` tokens in the terms of tensor_strides.hpp. Up front in address space: the buffers
// start as zeros that the OS commits as rows are written (zeroed_buffer.hpp), so resident memory
// follows the rows written (Paged<P> commits pages in chunks), unless CacheConfig::poison_unused
// fills them.
//   Nhd: (seq, token, head, dim)  -- a token's heads are adjacent (append writes one block)
//   Hnd: (seq, head, token, dim)  -- a head's tokens are adjacent (decode streams one block)
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "polyattn/cache/buffer_size.hpp"
#include "polyattn/cache/layout_traits.hpp"
#include "polyattn/cache/sequence_table.hpp"
#include "polyattn/cache/tensor_strides.hpp"
#include "polyattn/cache/zeroed_buffer.hpp"
#include "polyattn/core/cache_element.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn {

struct Nhd {
  static std::string name() { return "nhd"; }
  static constexpr TensorStrides strides(const TensorSpec& s, int page_tokens) { return token_major_strides(s, page_tokens); }
};
struct Hnd {
  static std::string name() { return "hnd"; }
  static constexpr TensorStrides strides(const TensorSpec& s, int page_tokens) { return head_major_strides(s, page_tokens); }
};

namespace detail {

template <class Layout, class T>
class ContiguousStore {
 public:
  static constexpr bool heads_adjacent = std::is_same_v<Layout, Nhd>;

  ContiguousStore(std::span<const TensorSpec> tensors, const CacheConfig& config)
      : table_(config.max_sequences, config.capacity), poison_(config.poison_unused) {
    for (const TensorSpec& spec : tensors) {
      require<ShapeError>(spec.heads >= 1 && spec.dim >= 1, "cache tensor shape must be positive, got (",
                          spec.heads, ", ", spec.dim, ")");
      specs_.push_back(spec);
      strides_.push_back(Layout::strides(spec, config.capacity));
      const std::uint64_t slots = std::uint64_t(config.max_sequences) * std::uint64_t(config.capacity);  // both in [1, 2^31)
      const std::size_t n = detail::cache_buffer_elements<T>(slots, spec);
      data_.emplace_back(n, config.huge_pages);
      if (poison_) std::fill_n(data_.back().data(), n, poison_value());
    }
  }

  int open() { return table_.open(); }
  void close(int seq) {
    table_.close(seq);
    if (poison_)  // a later user of this slot must not see the old rows
      for (std::size_t t = 0; t < specs_.size(); ++t) {
        const std::size_t per_seq = std::size_t(table_.capacity()) * specs_[t].elements();
        std::fill_n(data_[t].data() + std::size_t(seq) * per_seq, per_seq, poison_value());
      }
  }
  bool is_open(int seq) const { return table_.is_open(seq); }
  int free_slots() const { return table_.free_slots(); }
  int length(int seq) const { return table_.length(seq); }
  std::uint64_t generation(int seq) const { return table_.generation(seq); }
  int capacity() const { return table_.capacity(); }
  int max_sequences() const { return table_.max_sequences(); }
  void check_room(int seq, int n) const { table_.check_room(seq, n); }
  void check_room(std::span<const RowRequest> requests) const {  // every sequence has its own capacity
    for (const RowRequest& r : requests) table_.check_room(r.seq, r.rows);
  }
  int grow(int seq, int n) { return table_.grow(seq, n); }

  /// A new slot with a copy of the parent's rows (each sequence owns its rows here).
  int fork(int parent, bool /*private_last_row: every row is copied*/) {
    const int len = table_.length(parent);
    table_.check_free_slot();
    const int child = table_.open();
    table_.grow(child, len);
    for (std::size_t t = 0; t < specs_.size(); ++t)
      for (int h = 0; h < specs_[t].heads; ++h)
        for (int token = 0; token < len; ++token)
          std::copy_n(row(int(t), parent, token, h), specs_[t].dim, row(int(t), child, token, h));
    return child;
  }
  std::span<const TensorSpec> tensors() const { return specs_; }

  T* row(int tensor, int seq, int token, int head) { return data_[std::size_t(tensor)].data() + offset(tensor, seq, token, head); }
  const T* row(int tensor, int seq, int token, int head) const {
    return data_[std::size_t(tensor)].data() + offset(tensor, seq, token, head);
  }

  CacheRun<T> run(int tensor, int seq, int token, int head) const {
    return {row(tensor, seq, token, head), std::ptrdiff_t(strides_[std::size_t(tensor)].token), table_.capacity() - token};
  }

  std::size_t bytes_allocated() const {
    std::size_t bytes = 0;
    for (const auto& d : data_) bytes += d.size() * sizeof(T);
    return bytes;
  }
  /// Rows of the open sequences; a fork copies its rows, so none is shared.
  std::size_t bytes_held() const {
    std::size_t rows = 0, row_bytes = 0;
    for (int seq = 0; seq < table_.max_sequences(); ++seq)
      if (table_.is_open(seq)) rows += std::size_t(table_.length(seq));
    for (const TensorSpec& spec : specs_) row_bytes += spec.elements() * sizeof(T);
    return rows * row_bytes;
  }
  std::size_t bytes_shared() const { return 0; }
  std::size_t bytes_if_unshared() const { return bytes_held(); }

 private:
  static T poison_value() { return poison_element<T>(); }

  std::size_t offset(int tensor, int seq, int token, int head) const {
    return std::size_t(strides_[std::size_t(tensor)].offset(seq, token, head));  // a sequence is one page
  }

  SequenceTable table_;
  bool poison_;
  std::vector<TensorSpec> specs_;
  std::vector<TensorStrides> strides_;  // Layout::strides(spec, capacity), per tensor
  std::vector<ZeroedBuffer<T>> data_;  // one buffer per cached tensor
};

}  // namespace detail

template <class T>
class CacheStore<Nhd, T> : public detail::ContiguousStore<Nhd, T> {
 public:
  using detail::ContiguousStore<Nhd, T>::ContiguousStore;
};

template <class T>
class CacheStore<Hnd, T> : public detail::ContiguousStore<Hnd, T> {
 public:
  using detail::ContiguousStore<Hnd, T>::ContiguousStore;
};

}  // namespace polyattn
